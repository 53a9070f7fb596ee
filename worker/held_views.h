// Compressed pulls (GradCompression.pulls) on the worker: the view it
// holds of each chunk -- what the servers' replies made of it -- to which a
// reply's compressed change is added (server/pull_views.h keeps the same
// views, and adds the same way, so the two agree bit for bit). Like the
// residuals, the views belong to the worker, not to a client. Thread-safe.
#ifndef PSTRAIN_WORKER_HELD_VIEWS_H_
#define PSTRAIN_WORKER_HELD_VIEWS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "proto/job.pb.h"

namespace pstrain {

class HeldViews {
 public:
  // `spec`: the job's compression (a codec set, pulls on).
  explicit HeldViews(GradCompression spec) : spec_(std::move(spec)) {}

  // The view held of `chunk`; 0: none (its next reply is whole).
  uint64_t Id(int32_t chunk);
  // The payload bytes of a reply of `numel` values against view `base`
  // (0: the fp32 values whole).
  int64_t PayloadBytes(uint64_t base, int64_t numel) const;
  // Takes chunk `chunk`'s reply: `bytes` (PayloadBytes of them) against
  // view `base`, making view `view`, written whole into `dst` (`numel`
  // fp32 values). ABORTED (retried: the retry asks from no view) when
  // `base` is not the view held -- another pull of the chunk moved it, a
  // prefetch -- and DATA_LOSS when the bytes are malformed; the chunk's
  // view is forgotten either way.
  absl::Status Take(int32_t chunk, uint64_t base, uint64_t view, const char* bytes, int64_t numel,
                    float* dst);
  // The view held of `chunk`, whole, for a server that does not keep it
  // (PullResponse.views_unknown): its id (0: none held) and its values.
  uint64_t Copy(int32_t chunk, std::vector<float>* weights);
  // Forgets the view held of `chunk`: its next reply is whole.
  void Forget(int32_t chunk);

 private:
  struct Held {
    absl::Mutex mu;
    uint64_t id ABSL_GUARDED_BY(mu) = 0;
    std::vector<float> weights ABSL_GUARDED_BY(mu);
  };
  Held& Of(int32_t chunk);

  const GradCompression spec_;
  absl::Mutex mu_;
  absl::flat_hash_map<int32_t, std::unique_ptr<Held>> chunks_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_HELD_VIEWS_H_
