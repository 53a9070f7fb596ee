// The job's chunks as each generation's cluster places them on the
// servers (ClusterMembers.placement: present once a move changed the
// placement, common/placement.h), each kept for the parameter clients
// made over it (a client holds a pointer to its partition).
#ifndef PSTRAIN_WORKER_PLACED_PARTITIONS_H_
#define PSTRAIN_WORKER_PLACED_PARTITIONS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/params.h"
#include "common/partition.h"
#include "proto/member.pb.h"

namespace pstrain {

// Thread-safe.
class PlacedPartitions {
 public:
  // The job's parameters, chunk size and initial server count.
  PlacedPartitions(std::vector<ParamInfo> params, int64_t chunk_bytes, int num_servers)
      : params_(std::move(params)), chunk_bytes_(chunk_bytes), num_servers_(num_servers) {}

  // The partition by `cluster`'s placement (the initial one when it holds
  // none), the same object for every cluster of that placement version;
  // INVALID_ARGUMENT for a placement that does not fit the job.
  absl::StatusOr<const Partition*> For(const ClusterMembers& cluster);

 private:
  const std::vector<ParamInfo> params_;
  const int64_t chunk_bytes_;
  const int num_servers_;
  absl::Mutex mu_;
  std::map<int64_t, std::unique_ptr<Partition>> by_version_ ABSL_GUARDED_BY(mu_);
};

// partitions.For(cluster), or (the scheduler's placement does not fit the
// job: logged) the initial placement's, whose calls the servers then
// refuse.
const Partition* PlacedOrLogged(PlacedPartitions& partitions, const ClusterMembers& cluster);

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_PLACED_PARTITIONS_H_
