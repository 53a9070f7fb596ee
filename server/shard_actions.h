// The server member loop's actions (server/member_loop.h) on the server's
// shard, service and standby sender, and the news it acts on from the
// scheduler client's last heartbeat answer. A restore goes to the runtime,
// which may place the shard anew (a move's switch: server_runtime.cc);
// the rest to the shard the runtime holds now.
#ifndef PSTRAIN_SERVER_SHARD_ACTIONS_H_
#define PSTRAIN_SERVER_SHARD_ACTIONS_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "common/scheduler_client.h"
#include "server/member_loop.h"
#include "server/ps_service.h"
#include "server/shard.h"
#include "server/standby_sender.h"

namespace pstrain {

class ShardActions : public ServerActions {
 public:
  using RestoreFn =
      std::function<absl::Status(int64_t generation, int64_t clock, const Placement& placement)>;
  using FollowFn = std::function<void(const MoveNews& move, int64_t generation)>;
  // `*shard` is the runtime's shard now (it may be replaced by `restore`);
  // `sender` is null without standby copies. All outlive this. `follow`
  // takes the move the scheduler names (none: no move).
  ShardActions(const std::shared_ptr<Shard>* shard, PsService* service, StandbySender* sender,
               int id, RestoreFn restore, FollowFn follow)
      : shard_(shard),
        service_(service),
        sender_(sender),
        id_(id),
        restore_(std::move(restore)),
        follow_(std::move(follow)) {}

  int64_t generation() const override { return (*shard_)->generation(); }
  void RemoveWorker(int w) override { (*shard_)->RemoveWorker(w); }
  void WakePulls() override;
  absl::Status Restore(int64_t generation, int64_t clock, const Placement& placement) override {
    return restore_(generation, clock, placement);
  }
  void CancelParked(const absl::Status& why, int64_t generation) override {
    service_->CancelParked(why, generation);
  }
  void Prune(int64_t clock) override { (*shard_)->Prune(clock); }
  void SetRoutes(const ServerRoutes& routes) override;
  void FollowMove(const MoveNews& move, int64_t generation) override { follow_(move, generation); }

 private:
  const std::shared_ptr<Shard>* const shard_;
  PsService* const service_;
  StandbySender* const sender_;
  const int id_;
  const RestoreFn restore_;
  const FollowFn follow_;
};

// What the scheduler's last heartbeat answer said, as the loop takes it.
ClusterNews NewsFrom(const SchedulerClient& client);

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_SHARD_ACTIONS_H_
