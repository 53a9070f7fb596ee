#include "server/shard_actions.h"

#include "absl/strings/str_join.h"
#include "common/logging.h"

namespace pstrain {

void ShardActions::WakePulls() {
  service_->WakePulls();
  service_->WakePushes();  // (a dead worker's round may be all a push waited for)
}

void ShardActions::SetRoutes(const ServerRoutes& routes) {
  if (sender_ == nullptr) return;
  Shard& shard = **shard_;
  const ServerRoles roles = RolesOf(routes, id_);
  // The queues know their standby before any change is shipped to it.
  sender_->SetTargets(roles, shard.generation());
  StandbyParts& standby = shard.standby();
  const bool changed = standby.SetRoles(roles.serving, roles.shipped());
  // Not ready by these routes (back after being declared dead, or new):
  // the primaries may have gone on without this server's copies.
  if (routes.ready_size() > id_ && !routes.ready(id_)) standby.ForgetCopies();
  // Its Status speaks of these routes only once they are applied.
  service_->SetRoutes(routes);
  if (changed) {
    spdlog::info("routes {}: serving the parts of servers {}; standby copies of {}",
                 routes.version(), absl::StrJoin(standby.Homes(/*served=*/true), ","),
                 absl::StrJoin(standby.Homes(/*served=*/false), ","));
  }
  service_->WakePushes();
  service_->WakePulls();
}

ClusterNews NewsFrom(const SchedulerClient& client) {
  ClusterNews news;
  news.job_state = client.job_state();
  news.dead_workers = client.dead_workers();
  news.generation = client.generation(&news.restore_clock);
  news.manifest_clock = client.manifest_clock();
  news.routes = client.routes();
  news.placement = client.placement();
  news.leave = client.leave();
  news.move = client.move();
  return news;
}

}  // namespace pstrain
