// Who is in the job: ids handed out at registration, and each member's last
// reported status. Knows nothing of gRPC.
#ifndef PSTRAIN_SCHEDULER_MEMBERSHIP_H_
#define PSTRAIN_SCHEDULER_MEMBERSHIP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/cluster.pb.h"

namespace pstrain {

// "server" or "worker", for messages.
const char* RoleName(Role role);

struct MemberRecord {
  Role role = ROLE_UNSPECIFIED;
  int id = 0;
  std::string address;
  uint64_t incarnation = 0;
  NodeStatus status;         // as last reported
  absl::Time last_seen;      // registration or last heartbeat
  bool saw_job_end = false;  // was told the job ended
};

// Not thread-safe; the scheduler guards it.
class Membership {
 public:
  Membership(int num_servers, int num_workers);

  // Hands out the next id of `role` (ids count from 0 per role, in order of
  // registration). A repeated Register of the same process (same address and
  // incarnation) gets its id again. ALREADY_EXISTS when another process
  // registers an address already taken; RESOURCE_EXHAUSTED when every slot of
  // the role is filled; INVALID_ARGUMENT for a bad role or empty address.
  absl::StatusOr<int> Register(Role role, const std::string& address, uint64_t incarnation,
                               absl::Time now);

  // The registered member (role, id) of this incarnation, or
  // FAILED_PRECONDITION / NOT_FOUND with a message for an unknown sender.
  absl::StatusOr<MemberRecord*> Find(Role role, int id, uint64_t incarnation);

  // Gives the registered member (role, id) to another process: a
  // replacement of a failed one. INVALID_ARGUMENT for an unregistered id or
  // a bad address; ALREADY_EXISTS when another member holds `address`.
  absl::Status Replace(Role role, int id, const std::string& address, uint64_t incarnation,
                       absl::Time now);

  bool Complete() const;
  ClusterView View() const;
  std::vector<MemberRecord>& servers() { return servers_; }
  std::vector<MemberRecord>& workers() { return workers_; }
  const std::vector<MemberRecord>& servers() const { return servers_; }
  const std::vector<MemberRecord>& workers() const { return workers_; }

 private:
  const int num_servers_;
  const int num_workers_;
  std::vector<MemberRecord> servers_;
  std::vector<MemberRecord> workers_;
};

}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_MEMBERSHIP_H_
