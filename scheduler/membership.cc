#include "scheduler/membership.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pstrain {
namespace {

bool BadAddress(const std::string& address) { return address.empty() || address.size() > 512; }

// A fresh member's report: nothing heard yet.
MemberStatus NewStatus(Role role, int id, const std::string& address) {
  MemberStatus status;
  status.set_role(role);
  status.set_id(id);
  status.set_address(address);
  status.set_state(REGISTERED);
  if (role == WORKER) status.mutable_worker()->set_test_accuracy(-1);
  return status;
}

SchedulerMember ToState(const MemberRecord& m) {
  SchedulerMember out;
  out.set_role(m.role);
  out.set_id(m.id);
  out.set_address(m.address);
  out.set_incarnation(m.incarnation);
  out.set_state(m.state);
  out.set_undeclared(!m.declared);
  *out.mutable_status() = m.status;
  return out;
}

MemberRecord FromState(const SchedulerMember& m, absl::Time now) {
  MemberRecord out;
  out.role = m.role();
  out.id = m.id();
  out.address = m.address();
  out.incarnation = m.incarnation();
  out.state = m.state();
  out.declared = !m.undeclared();
  out.status = m.status();
  out.last_seen = now;
  return out;
}

}  // namespace

const char* RoleName(Role role) { return role == SERVER ? "server" : "worker"; }

bool Gone(MemberState s) { return s == FINISHED || s == FAILED || s == DEAD; }

MemberStatus MemberRecord::Shown() const {
  MemberStatus out = status;
  out.set_state(state);
  return out;
}

void MemberRecord::Declare(MemberState new_state, const std::string& why, absl::Time now) {
  state = new_state;
  status.set_message(why);
  status.set_declared_dead_unix_ms(absl::ToUnixMillis(now));
}

Membership::Membership(int num_servers, int num_workers)
    : num_servers_(num_servers), num_workers_(num_workers) {}

absl::StatusOr<int> Membership::Register(Role role, const std::string& address,
                                         uint64_t incarnation, absl::Time now) {
  if (role != SERVER && role != WORKER) {
    return absl::InvalidArgumentError("register: role must be SERVER or WORKER");
  }
  if (BadAddress(address)) return absl::InvalidArgumentError("register: bad address");
  for (const std::vector<MemberRecord>* list : {&servers_, &workers_}) {
    for (const MemberRecord& m : *list) {
      if (m.address != address) continue;
      if (m.role == role && m.incarnation == incarnation) return m.id;  // a retry
      return absl::AlreadyExistsError(
          absl::StrCat(address, " is already registered as ", RoleName(m.role), " ", m.id));
    }
  }
  std::vector<MemberRecord>& list = List(role);
  const int expected = role == SERVER ? num_servers_ : num_workers_;
  if (static_cast<int>(list.size()) >= expected) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the job expects ", expected, " ", RoleName(role), "s; all have registered"));
  }
  MemberRecord m;
  m.role = role;
  m.id = static_cast<int>(list.size());
  m.address = address;
  m.incarnation = incarnation;
  m.last_seen = now;
  m.status = NewStatus(role, m.id, address);
  list.push_back(m);
  return m.id;
}

absl::StatusOr<int> Membership::Join(const std::string& address, uint64_t incarnation, int id,
                                     absl::Time now) {
  for (const MemberRecord& m : servers_) {
    if (m.address == address && m.incarnation == incarnation) return m.id;  // a retry
  }
  const int next = static_cast<int>(servers_.size());
  if (id < 0 || id > next) {
    return absl::InvalidArgumentError(
        absl::StrCat("server id ", id, " to join: the next is ", next));
  }
  if (id < next) {
    RETURN_IF_ERROR(Replace(SERVER, id, address, incarnation, now));
    return id;
  }
  ++num_servers_;
  absl::StatusOr<int> registered = Register(SERVER, address, incarnation, now);
  if (!registered.ok()) --num_servers_;
  return registered;
}

absl::StatusOr<int> Membership::IdFor(
    Role role, std::optional<int> id,
    const std::function<bool(const MemberRecord&)>& vacant) const {
  if (role != SERVER && role != WORKER) {
    if (id.has_value()) return absl::InvalidArgumentError("bad role");
    return -1;  // Register refuses it
  }
  const std::vector<MemberRecord>& list = List(role);
  const int expected = role == SERVER ? num_servers_ : num_workers_;
  const int registered = static_cast<int>(list.size());
  if (id.has_value()) {
    if (*id < 0 || *id >= expected) {
      return absl::InvalidArgumentError(absl::StrCat("id ", *id, " outside [0, ", expected, ")"));
    }
    if (*id > registered) {
      return absl::FailedPreconditionError(absl::StrCat(
          RoleName(role), " ids are handed out in order: ", registered, " is next, not ", *id));
    }
    return *id < registered ? *id : -1;
  }
  if (registered < expected) return -1;
  for (const MemberRecord& m : list) {
    if (m.state == DEAD && vacant(m)) return m.id;
  }
  return -1;
}

absl::StatusOr<MemberRecord*> Membership::Find(Role role, int id, uint64_t incarnation) {
  if (role != SERVER && role != WORKER) {
    return absl::InvalidArgumentError("role must be SERVER or WORKER");
  }
  MemberRecord* m = Get(role, id);
  if (m == nullptr) {
    return absl::NotFoundError(absl::StrCat(RoleName(role), " ", id, " is not registered"));
  }
  if (m->incarnation != incarnation) {
    return absl::FailedPreconditionError(
        absl::StrCat(RoleName(role), " ", id, " is registered by another process"));
  }
  return m;
}

MemberRecord* Membership::Get(Role role, int id) {
  return const_cast<MemberRecord*>(static_cast<const Membership*>(this)->Get(role, id));
}

const MemberRecord* Membership::Get(Role role, int id) const {
  if (role != SERVER && role != WORKER) return nullptr;
  const std::vector<MemberRecord>& list = List(role);
  if (id < 0 || id >= static_cast<int>(list.size())) return nullptr;
  return &list[id];
}

const MemberRecord* Membership::Holder(const std::string& address, Role role, int id) const {
  for (const std::vector<MemberRecord>* list : {&servers_, &workers_}) {
    for (const MemberRecord& m : *list) {
      if (m.address == address && !(m.role == role && m.id == id)) return &m;
    }
  }
  return nullptr;
}

absl::Status Membership::Replace(Role role, int id, const std::string& address,
                                 uint64_t incarnation, absl::Time now) {
  if (role != SERVER && role != WORKER) return absl::InvalidArgumentError("bad role");
  MemberRecord* m = Get(role, id);
  if (m == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(RoleName(role), " ", id, " is not registered"));
  }
  if (BadAddress(address)) return absl::InvalidArgumentError("register: bad address");
  if (const MemberRecord* other = Holder(address, role, id); other != nullptr) {
    return absl::AlreadyExistsError(
        absl::StrCat(address, " is already registered as ", RoleName(other->role), " ", other->id));
  }
  m->address = address;
  m->incarnation = incarnation;
  m->last_seen = now;
  m->state = REGISTERED;
  m->status = NewStatus(role, id, address);
  return absl::OkStatus();
}

void Membership::ForEach(const std::function<void(MemberRecord&)>& fn) {
  for (MemberRecord& m : servers_) fn(m);
  for (MemberRecord& m : workers_) fn(m);
}

void Membership::ForEach(const std::function<void(const MemberRecord&)>& fn) const {
  for (const MemberRecord& m : servers_) fn(m);
  for (const MemberRecord& m : workers_) fn(m);
}

bool Membership::All(Role role, const std::function<bool(const MemberRecord&)>& pred) const {
  const std::vector<MemberRecord>& list = List(role);
  return std::all_of(list.begin(), list.end(), pred);
}

int Membership::Count(Role role, const std::function<bool(const MemberRecord&)>& pred) const {
  const std::vector<MemberRecord>& list = List(role);
  return static_cast<int>(std::count_if(list.begin(), list.end(), pred));
}

void Membership::Paused(absl::Duration gap, absl::Time now) {
  ForEach([&](MemberRecord& m) { m.last_seen = std::min(now, m.last_seen + gap); });
}

bool Membership::Complete() const {
  return static_cast<int>(servers_.size()) == num_servers_ &&
         static_cast<int>(workers_.size()) == num_workers_ &&
         All(WORKER, [](const MemberRecord& w) { return w.declared; });
}

ClusterMembers Membership::View() const {
  ClusterMembers view;
  ForEach([&view](const MemberRecord& m) {
    Member* out = m.role == SERVER ? view.add_servers() : view.add_workers();
    out->set_role(m.role);
    out->set_id(m.id);
    out->set_address(m.address);
  });
  return view;
}

void Membership::AddStatus(ClusterStatus* out) const {
  ForEach([out](const MemberRecord& m) { *out->add_members() = m.Shown(); });
}

MembershipState Membership::Snapshot() const {
  MembershipState out;
  for (const MemberRecord& m : servers_) *out.add_servers() = ToState(m);
  for (const MemberRecord& m : workers_) *out.add_workers() = ToState(m);
  return out;
}

absl::Status Membership::Restore(const MembershipState& state, absl::Time now) {
  // (More servers than the job started with: servers that joined it.)
  if (state.workers_size() > num_workers_) {
    return absl::InvalidArgumentError("the state holds more members than the job");
  }
  for (const auto& [list, role] :
       {std::make_pair(&state.servers(), SERVER), std::make_pair(&state.workers(), WORKER)}) {
    for (int i = 0; i < list->size(); ++i) {
      if ((*list)[i].id() != i || (*list)[i].role() != role) {
        return absl::InvalidArgumentError("members out of order");
      }
    }
  }
  num_servers_ = std::max(num_servers_, state.servers_size());
  servers_.clear();
  workers_.clear();
  for (const SchedulerMember& m : state.servers()) servers_.push_back(FromState(m, now));
  for (const SchedulerMember& m : state.workers()) workers_.push_back(FromState(m, now));
  return absl::OkStatus();
}

}  // namespace pstrain
