// The unit of standby (JobSpec.standby_copies): what a server serves or keeps a
// standby copy of -- a chunk (server/chunk_store.h) or a sparse table's
// part (server/sparse_tables.h) -- as the standby layer
// (server/standby_parts.h) sees both: a lock, the workers' clocks, the
// generation of the state held and its StandbyState, with the decisions
// every part makes the same way (its state at start and after a rollback,
// a role change, a change shipped, a standby's confirmation, whether a
// push is held by the standby, what a copy does with its primary's
// change), and hooks for what each kind does besides.
#ifndef PSTRAIN_SERVER_STANDBY_PART_H_
#define PSTRAIN_SERVER_STANDBY_PART_H_

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/chunk_clocks.h"

namespace pstrain {

// A value; its part guards it with the part's lock.
struct StandbyState {
  enum class RoleChange { kNone, kPromoted, kDemoted, kStandbyChanged };
  // What a served part does with a change of its own (Changed).
  enum class Ship { kNothing, kChange, kWhole };
  // What a copy does with its primary's change (Take).
  enum class Take { kHeld, kNeedWhole, kWhole, kApply };

  bool serving = true;   // served here; else a standby copy
  bool shipped = false;  // served, and its changes wait for a standby
  // Served: its changes so far; a copy: the changes it holds (-1: stale
  // until its primary's whole state fills it).
  int64_t version = 0;
  int64_t confirmed = 0;            // the newest change its standby confirmed
  std::vector<int64_t> replicated;  // the applied clocks as of that change

  // At start and after a rollback: served when it is this server's own
  // (`own`) with nothing to wait for, else a stale copy its primary fills.
  void Reset(bool own, const std::vector<int64_t>& applied) {
    serving = own;
    version = own ? std::max<int64_t>(version, 0) : -1;
    ConfirmAll(applied);
  }
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
  // A served part changed (its applied clocks are `applied`): the next
  // version, and what goes to its standby -- nothing (no standby to wait
  // for, or no `sink`: confirmed at once), the change, or (`whole`: not a
  // change the standby could take) the whole state.
  Ship Changed(bool sink, bool whole, const std::vector<int64_t>& applied) {
    if (!serving) return Ship::kNothing;
    ++version;
    if (!shipped || !sink) {
      ConfirmAll(applied);
      return Ship::kNothing;
    }
    return whole ? Ship::kWhole : Ship::kChange;
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
  // A copy's answer to its primary's change of version `v`, the whole
  // state (`whole`) or the change after one: a whole state older than the
  // copy (a late retry) or a change it has is held already; a change that
  // does not follow what it holds needs the whole state.
  Take TakeOf(int64_t v, bool whole) const {
    if (whole) return version < 0 || v >= version ? Take::kWhole : Take::kHeld;
    if (v <= version) return Take::kHeld;
    if (version < 0 || v != version + 1) return Take::kNeedWhole;
    return Take::kApply;
  }
  bool stale() const { return !serving && version < 0; }
  int64_t lag() const { return serving ? version - confirmed : 0; }
};

// A chunk or a table's part. Its kind fills in the hooks, called with `mu`
// held by the standby layer.
class StandbyPart {
 public:
  // `members[w]`: whether worker w takes part in its clocks.
  explicit StandbyPart(std::vector<bool> members) : clocks(std::move(members)) {}
  virtual ~StandbyPart() = default;

  mutable absl::Mutex mu;
  // The workers' applied clocks and BSP round.
  ChunkClocks clocks ABSL_GUARDED_BY(mu);
  int64_t generation ABSL_GUARDED_BY(mu) = 0;  // of the state held
  StandbyState standby ABSL_GUARDED_BY(mu);

  // A copy was promoted: it is served from now on, its round empty.
  virtual void Promoted() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {}
  // A replacement joined: it is a stale copy.
  virtual void Joined() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {}
  // Its role or clocks changed (what it reports follows).
  virtual void Touched() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {}
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_STANDBY_PART_H_
