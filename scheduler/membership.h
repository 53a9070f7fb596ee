// Who is in the job: ids handed out at registration, each member's state
// (the scheduler's verdict) and last report, and when it was last heard
// from. Knows nothing of gRPC; decides nothing about a member's loss
// (scheduler/failure_policy.h does).
#ifndef PSTRAIN_SCHEDULER_MEMBERSHIP_H_
#define PSTRAIN_SCHEDULER_MEMBERSHIP_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/cluster.pb.h"
#include "proto/scheduler_state.pb.h"

namespace pstrain {

// "server" or "worker", for messages.
const char* RoleName(Role role);

// FINISHED, FAILED or DEAD: a member that left the job (or was left out).
bool Gone(MemberState state);

struct MemberRecord {
  Role role = ROLE_UNSPECIFIED;
  int id = 0;
  std::string address;
  uint64_t incarnation = 0;
  MemberState state = REGISTERED;  // the scheduler's verdict
  MemberStatus status;             // its last report (SchedulerMember.status)
  absl::Time last_seen;            // registration or last heartbeat
  // A worker that joined before declaring its model
  // (RegisterRequest.declare_later) is false until it declares (durable:
  // SchedulerMember.undeclared).
  bool declared = true;

  // The report with the verdict: what the cluster's Status shows.
  MemberStatus Shown() const;
  // Marks it `state` (DEAD, or a replica's worker taken out) at `now`.
  void Declare(MemberState state, const std::string& why, absl::Time now);
};

// Not thread-safe; the scheduler guards it.
class Membership {
 public:
  Membership(int num_servers, int num_workers);

  // Hands out the next id of `role` (ids count from 0 per role, in order of
  // registration). A repeated Register of the same process (same address and
  // incarnation) gets its id again. ALREADY_EXISTS when another process
  // registers an address already taken; RESOURCE_EXHAUSTED when every id of
  // the role is taken; INVALID_ARGUMENT for a bad role or empty address.
  absl::StatusOr<int> Register(Role role, const std::string& address, uint64_t incarnation,
                               absl::Time now);
  // A server added to the running job (a move, scheduler/placement_moves.h)
  // as server `id`: the next id (the job has one server more), or a
  // registered one that is out of the job (the placement frees it; the
  // caller knows), given to this process. A repeated Join of the same
  // process gets its id again; INVALID_ARGUMENT for an id past the next;
  // Register's and Replace's errors.
  absl::StatusOr<int> Join(const std::string& address, uint64_t incarnation, int id,
                           absl::Time now);

  // The id a registration of `role` takes: `id` (if given) when it is a
  // registered id, -1 when it is the next new one; without an id, once
  // every id of the role is taken, the first DEAD member for which
  // `vacant` says yes. INVALID_ARGUMENT for an id outside the job;
  // FAILED_PRECONDITION for an id past the next id.
  absl::StatusOr<int> IdFor(Role role, std::optional<int> id,
                            const std::function<bool(const MemberRecord&)>& vacant) const;

  // The registered member (role, id) of this incarnation, or
  // FAILED_PRECONDITION / NOT_FOUND with a message for an unknown sender.
  absl::StatusOr<MemberRecord*> Find(Role role, int id, uint64_t incarnation);
  // The registered member (role, id), or null.
  MemberRecord* Get(Role role, int id);
  const MemberRecord* Get(Role role, int id) const;

  // Gives the registered member (role, id) to another process: a
  // replacement of a failed one. INVALID_ARGUMENT for an unregistered id or
  // a bad address; ALREADY_EXISTS when another member holds `address`.
  absl::Status Replace(Role role, int id, const std::string& address, uint64_t incarnation,
                       absl::Time now);

  // Every registered member: servers by id, then workers by id.
  void ForEach(const std::function<void(MemberRecord&)>& fn);
  void ForEach(const std::function<void(const MemberRecord&)>& fn) const;
  // Whether `pred` holds for every registered member of `role`.
  bool All(Role role, const std::function<bool(const MemberRecord&)>& pred) const;
  // Registered members of `role` for which `pred` holds.
  int Count(Role role, const std::function<bool(const MemberRecord&)>& pred) const;
  int registered(Role role) const { return static_cast<int>(List(role).size()); }

  // This process did not run for `gap`: nobody's silence then counts.
  void Paused(absl::Duration gap, absl::Time now);

  // Every member registered, every worker's model declared.
  bool Complete() const;
  ClusterMembers View() const;

  // Its part of the cluster's status: every member as Shown.
  void AddStatus(ClusterStatus* out) const;

  // The durable part (SchedulerState.members).
  MembershipState Snapshot() const;
  // Takes `state` over: each member gets a heartbeat timeout from `now` to
  // be heard again. INVALID_ARGUMENT (and nothing changed) when it holds
  // more members than the job, ids out of order or roles mixed up.
  absl::Status Restore(const MembershipState& state, absl::Time now);

 private:
  std::vector<MemberRecord>& List(Role role) { return role == SERVER ? servers_ : workers_; }
  const std::vector<MemberRecord>& List(Role role) const {
    return role == SERVER ? servers_ : workers_;
  }
  // The member that holds `address`, other than (role, id); null if none.
  const MemberRecord* Holder(const std::string& address, Role role, int id) const;

  int num_servers_;  // grows as servers join
  const int num_workers_;
  std::vector<MemberRecord> servers_;
  std::vector<MemberRecord> workers_;
};

}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_MEMBERSHIP_H_
