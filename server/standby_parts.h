// What a server does with all its standby parts alike (server/standby_part.h:
// its chunks and its parts of the sparse tables): the scheduler's routes
// applied (SetRoles), its copies forgotten when it comes back, a
// replacement joining as standby, a dead worker left out of every part's
// clocks, and what its Status reports (every copy filled, the changes its
// standbys have not confirmed, the homes it serves and keeps copies of).
// ChunkStore and SparseTables each keep one over their parts; Shard one
// over both, which the runtime and the service use. No gRPC.
#ifndef PSTRAIN_SERVER_STANDBY_PARTS_H_
#define PSTRAIN_SERVER_STANDBY_PARTS_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "server/standby_part.h"

namespace pstrain {

// Thread-safe: each call takes each part's lock in turn. The parts are
// added before the set is shared, and outlive it.
class StandbyParts {
 public:
  // `part` is home server `home`'s (this server's own, or the one whose
  // standby copy it is).
  void Add(int home, StandbyPart* part) { parts_.emplace_back(home, part); }
  void AddAll(const StandbyParts& other);

  // The scheduler's routes: `serving[h]` whether this server serves home
  // server h's parts, `shipped[h]` whether they have a live standby to
  // wait for. A part promoted here is served from its copy; one demoted
  // becomes an unfilled copy; one whose standby went counts every change
  // as confirmed. True when anything changed.
  bool SetRoles(const std::vector<bool>& serving, const std::vector<bool>& shipped);
  // Every copy here becomes unfilled (the routes say this server is not
  // ready: it came back after it was declared dead, and its primaries
  // went on without it): each is filled anew.
  void ForgetCopies();
  // A replacement joins a cluster whose generation `generation` goes on
  // (no rollback): every part a stale copy of that generation.
  void JoinAsStandby(int64_t generation);
  // Leaves `worker` out of every part's clocks (declared dead); `removed`
  // is called, under the part's lock, for each part it took part in.
  void RemoveWorker(int worker, absl::FunctionRef<void(StandbyPart&)> removed);

  bool Filled() const;  // every copy here is filled (none is: true)
  int64_t Lag() const;  // changes of served parts not yet confirmed
  // The home servers whose parts are served here (`served`) or kept as
  // copies, in the order of their first part.
  std::vector<int> Homes(bool served) const;

 private:
  std::vector<std::pair<int, StandbyPart*>> parts_;
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_STANDBY_PARTS_H_
