// Standby replicas (JobSpec.replicas): what a chunk (server/chunk_store.h)
// or a sparse table's part (server/sparse_tables.h) keeps about its copy,
// and the decisions both make the same way -- a role change, a standby's
// confirmation, whether a push is held by the standby, whether a copy can
// follow a change. A value; its owner guards it with its own lock.
#ifndef PSTRAIN_SERVER_REPLICA_STATE_H_
#define PSTRAIN_SERVER_REPLICA_STATE_H_

#include <algorithm>
#include <cstdint>
#include <vector>

namespace pstrain {

struct ReplicaState {
  enum class RoleChange { kNone, kPromoted, kDemoted, kStandbyChanged };
  // What a copy does with a change of version v (Follow).
  enum class Follow { kHeld, kNeedWhole, kApply };

  bool serving = true;   // served here; else a standby copy
  bool shipped = false;  // served, and its changes wait for a standby
  // Served: its changes so far; a copy: the changes it holds (-1: stale
  // until its primary's whole state fills it).
  int64_t version = 0;
  int64_t confirmed = 0;            // the newest change its standby confirmed
  std::vector<int64_t> replicated;  // the applied clocks as of that change

  // Served with nothing to wait for: every change counts as confirmed.
  void ConfirmAll(const std::vector<int64_t>& applied) {
    confirmed = version;
    replicated = applied;
  }
  // The scheduler's routes: served here (`serve`) or a copy; `ship`: a
  // standby to wait for. A promoted copy serves what it holds; a demoted
  // one is stale until filled.
  RoleChange SetRole(bool serve, bool ship, const std::vector<int64_t>& applied) {
    RoleChange change = RoleChange::kNone;
    if (serve && !serving) {
      version = std::max<int64_t>(version, 0);
      change = RoleChange::kPromoted;
    } else if (!serve && serving) {
      version = -1;
      change = RoleChange::kDemoted;
    } else if (shipped != ship) {
      change = RoleChange::kStandbyChanged;
    }
    if (serve && (change == RoleChange::kPromoted || !ship)) ConfirmAll(applied);
    serving = serve;
    shipped = ship;
    return change;
  }
  // The standby holds change `v`, with `applied` clocks (an older or
  // unknown one is ignored).
  void Confirm(int64_t v, const std::vector<int64_t>& applied) {
    if (!serving || v <= confirmed || v > version) return;
    confirmed = v;
    replicated = applied;
  }
  // Whether worker `worker`'s push of `clock` is held by the standby
  // (false once demoted: what it gave never reached the new primary).
  bool Holds(int worker, int64_t clock) const {
    if (!serving) return false;
    return worker < 0 || worker >= static_cast<int>(replicated.size()) ||
           replicated[worker] > clock;
  }
  // A copy's answer to a change of version `v`.
  Follow FollowOf(int64_t v) const {
    if (v <= version) return Follow::kHeld;
    if (version < 0 || v != version + 1) return Follow::kNeedWhole;
    return Follow::kApply;
  }
  // Whether a whole state of version `v` is newer than what the copy holds
  // (a late retry's is not).
  bool TakesWhole(int64_t v) const { return version < 0 || v >= version; }
  bool stale() const { return !serving && version < 0; }
  int64_t lag() const { return serving ? version - confirmed : 0; }
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_REPLICA_STATE_H_
