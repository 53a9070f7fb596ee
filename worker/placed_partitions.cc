#include "worker/placed_partitions.h"

#include "common/logging.h"
#include "common/placement.h"
#include "common/status_macros.h"

namespace pstrain {

absl::StatusOr<const Partition*> PlacedPartitions::For(const ClusterMembers& cluster) {
  const int64_t version = cluster.placement().version();
  absl::MutexLock lock(&mu_);
  auto it = by_version_.find(version);
  if (it == by_version_.end()) {
    ASSIGN_OR_RETURN(Partition p,
                     PlacedPartition(params_, chunk_bytes_, num_servers_, cluster.placement()));
    it = by_version_.emplace(version, std::make_unique<Partition>(std::move(p))).first;
  }
  return it->second.get();
}

const Partition* PlacedOrLogged(PlacedPartitions& partitions, const ClusterMembers& cluster) {
  absl::StatusOr<const Partition*> p = partitions.For(cluster);
  if (p.ok()) return *p;
  spdlog::error("the scheduler's placement {}: {}", cluster.placement().version(),
                p.status().message());
  return *partitions.For(ClusterMembers());
}

}  // namespace pstrain
