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
  // Chunk `chunk`'s `n` values of clock `clock` in generation `generation`
  // plus its residual, encoded under `spec` (it compresses chunks of n
  // values) into `out` (resized to the encoding); the new residual is kept.
  // The chunk's push of the same generation and clock encoded again (a
  // clock redone after a relink, which the servers take once) gets the
  // same bytes, and the residual does not move twice.
  void Encode(const GradCompression& spec, int32_t chunk, int64_t generation, int64_t clock,
              const float* values, int64_t n, std::vector<char>* out);

 private:
  struct Residual {
    absl::Mutex mu;
    std::vector<float> values ABSL_GUARDED_BY(mu);
    // The last encoding and whose it was.
    int64_t generation ABSL_GUARDED_BY(mu) = -1;
    int64_t clock ABSL_GUARDED_BY(mu) = -1;
    std::vector<char> sent ABSL_GUARDED_BY(mu);
  };
  Residual& Of(int32_t chunk);

  absl::Mutex mu_;
  absl::flat_hash_map<int32_t, std::unique_ptr<Residual>> residuals_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_ERROR_FEEDBACK_H_
