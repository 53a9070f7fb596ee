#include "scheduler/membership.h"

#include "absl/strings/str_cat.h"

namespace pstrain {

const char* RoleName(Role role) { return role == SERVER ? "server" : "worker"; }

Membership::Membership(int num_servers, int num_workers)
    : num_servers_(num_servers), num_workers_(num_workers) {}

absl::StatusOr<int> Membership::Register(Role role, const std::string& address,
                                         uint64_t incarnation, absl::Time now) {
  if (role != SERVER && role != WORKER) {
    return absl::InvalidArgumentError("register: role must be SERVER or WORKER");
  }
  if (address.empty() || address.size() > 512) {
    return absl::InvalidArgumentError("register: bad address");
  }
  for (const std::vector<MemberRecord>* list : {&servers_, &workers_}) {
    for (const MemberRecord& m : *list) {
      if (m.address != address) continue;
      if (m.role == role && m.incarnation == incarnation) return m.id;  // a retry
      return absl::AlreadyExistsError(
          absl::StrCat(address, " is already registered as ", RoleName(m.role), " ", m.id));
    }
  }
  std::vector<MemberRecord>& list = role == SERVER ? servers_ : workers_;
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
  m.status.set_role(role);
  m.status.set_id(m.id);
  m.status.set_address(address);
  m.status.set_state(REGISTERED);
  m.status.set_test_accuracy(-1);
  list.push_back(m);
  return m.id;
}

absl::StatusOr<MemberRecord*> Membership::Find(Role role, int id, uint64_t incarnation) {
  if (role != SERVER && role != WORKER) {
    return absl::InvalidArgumentError("role must be SERVER or WORKER");
  }
  std::vector<MemberRecord>& list = role == SERVER ? servers_ : workers_;
  if (id < 0 || id >= static_cast<int>(list.size())) {
    return absl::NotFoundError(absl::StrCat(RoleName(role), " ", id, " is not registered"));
  }
  if (list[id].incarnation != incarnation) {
    return absl::FailedPreconditionError(
        absl::StrCat(RoleName(role), " ", id, " is registered by another process"));
  }
  return &list[id];
}

absl::Status Membership::Replace(Role role, int id, const std::string& address,
                                 uint64_t incarnation, absl::Time now) {
  if (role != SERVER && role != WORKER) return absl::InvalidArgumentError("bad role");
  std::vector<MemberRecord>& list = role == SERVER ? servers_ : workers_;
  if (id < 0 || id >= static_cast<int>(list.size())) {
    return absl::InvalidArgumentError(absl::StrCat(RoleName(role), " ", id, " is not registered"));
  }
  if (address.empty() || address.size() > 512) {
    return absl::InvalidArgumentError("register: bad address");
  }
  for (const std::vector<MemberRecord>* l : {&servers_, &workers_}) {
    for (const MemberRecord& m : *l) {
      if (m.address == address && !(m.role == role && m.id == id)) {
        return absl::AlreadyExistsError(
            absl::StrCat(address, " is already registered as ", RoleName(m.role), " ", m.id));
      }
    }
  }
  MemberRecord& m = list[id];
  m.address = address;
  m.incarnation = incarnation;
  m.last_seen = now;
  m.saw_job_end = false;
  m.status = NodeStatus();
  m.status.set_role(role);
  m.status.set_id(id);
  m.status.set_address(address);
  m.status.set_state(REGISTERED);
  m.status.set_test_accuracy(-1);
  return absl::OkStatus();
}

bool Membership::Complete() const {
  return static_cast<int>(servers_.size()) == num_servers_ &&
         static_cast<int>(workers_.size()) == num_workers_;
}

ClusterView Membership::View() const {
  ClusterView view;
  for (const MemberRecord& m : servers_) {
    Member* out = view.add_servers();
    out->set_role(SERVER);
    out->set_id(m.id);
    out->set_address(m.address);
  }
  for (const MemberRecord& m : workers_) {
    Member* out = view.add_workers();
    out->set_role(WORKER);
    out->set_id(m.id);
    out->set_address(m.address);
  }
  return view;
}

}  // namespace pstrain
