// Standby copies (JobSpec.standby_copies): the scheduler's map of who serves
// each server's chunks. Server h's chunks are held by the pair h and
// h + 1 (mod servers); one serves them, the other keeps a standby copy
// (common/partition.h StandbyServerOf). When a server dies, every home it
// serves is promoted to the other of its pair -- if that one is live and
// has filled every standby copy it keeps (it reports standby_ready for
// the routes' current version) -- and nothing rolls back; otherwise the
// failure policy's rollback (or abort) follows. A replacement (or a server
// that comes back) keeps standby copies until it reports them filled; a
// rollback serves every server's chunks from itself again. The routes go
// to every member with the heartbeat answers (ServerRoutes). A promotion
// counts (promotions()) once every server it promoted has reported the
// routes it made: one onto a server that died too before it could take
// it up (both servers of a pair lost together) is not counted. No I/O but
// logs.
//
// Not thread-safe: the coordinator's owner guards it.
#ifndef PSTRAIN_SCHEDULER_PROMOTIONS_H_
#define PSTRAIN_SCHEDULER_PROMOTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "proto/job.pb.h"
#include "proto/member.pb.h"
#include "proto/scheduler_state.pb.h"
#include "proto/status.pb.h"

namespace pstrain {

class Promotions {
 public:
  explicit Promotions(const JobSpec& job);

  // The job keeps standby copies.
  bool enabled() const { return num_servers_ > 0; }
  const ServerRoutes& routes() const { return state_.routes(); }
  int64_t promotions() const { return state_.promotions(); }

  // Server `server` registered at `address` (the first time, replacing a
  // dead one, or back after it was declared dead): the routes name it;
  // its standby copies are not filled until it says so.
  void Registered(int server, const std::string& address);
  // Its heartbeat's Status: ready once it reports every standby copy
  // filled for the current routes; a promotion onto it taken up once it
  // reports the routes the promotion made.
  void Reported(int server, const MemberStatus& status);
  // Server `dead` was lost (declared dead, or replaced while live). True
  // when every home it served went to the other server of its pair (then
  // `*why` says so): nothing rolls back. False when one could not (that
  // server is gone or not filled): `*why` says which; the failure
  // policy's answer follows. Either way the routes no longer name `dead`.
  bool Promote(int dead, std::string* why);
  // A rollback: every server serves its own chunks again, and every
  // standby copy is filled anew (a promotion not yet taken up is dropped).
  void Reset();

  void AddStatus(ClusterStatus* out) const;
  // The durable part (SchedulerState.promotions).
  const PromotionState& Snapshot() const { return state_; }
  // INVALID_ARGUMENT (and nothing changed) for routes of another size or
  // a server out of range (in the routes or a pending promotion).
  absl::Status Restore(const PromotionState& state);

 private:
  void Changed() { state_.mutable_routes()->set_version(state_.routes().version() + 1); }
  // `server` reported routes of `routes_version`: the promotions onto it
  // of that version or older are taken up there (counted once taken up
  // everywhere).
  void TakenUp(int server, int64_t routes_version);
  // `dead` died: a promotion onto it not yet taken up is never counted.
  void DropPromotionsOnto(int dead);

  const int num_servers_;  // 0 without standby copies
  PromotionState state_;
};

}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_PROMOTIONS_H_
