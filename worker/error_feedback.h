// The residuals of a worker's compressed pushes (JobSpec.compression,
// common/grad_codec.h): one per chunk, added to the chunk's next gradient
// before it is compressed. They belong to the worker, not to a client: a
// rollback's or a relink's new PsClient goes on with them.
#ifndef PSTRAIN_WORKER_ERROR_FEEDBACK_H_
#define PSTRAIN_WORKER_ERROR_FEEDBACK_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "proto/job.pb.h"

namespace pstrain {

// Thread-safe; pushes of different chunks encode at once.
class ErrorFeedback {
 public:
  // Encodes chunk `chunk`'s `n` values plus its residual under `spec`
  // (defaults filled in; it compresses chunks of n values) into `out`,
  // resized to the encoding, and keeps the new residual.
  void Encode(const GradCompression& spec, int32_t chunk, const float* values, int64_t n,
              std::vector<char>* out);
  // The L2 norm of every residual together (0 before any push).
  double ResidualNorm() const;

 private:
  struct Residual {
    absl::Mutex mu;
    std::vector<float> values ABSL_GUARDED_BY(mu);
  };
  Residual& Of(int32_t chunk, int64_t n);

  mutable absl::Mutex mu_;
  absl::flat_hash_map<int32_t, std::unique_ptr<Residual>> residuals_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_ERROR_FEEDBACK_H_
