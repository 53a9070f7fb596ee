// Compressed pulls (GradCompression.pulls): what each worker holds of each
// chunk -- its "view" -- so that a pull's reply can bring only the change
// since, compressed by the job's codec. The change a view lags behind the
// weights is the error feedback: the next change carries it.
//
// Views are shared: workers that hold the same view and pull the same
// weights (every worker of a BSP clock) get the same bytes and the same new
// view, encoded once. A chunk keeps the views some worker holds and the
// newest change's (with a copy of the weights it moved toward): under BSP
// about two copies of the chunk, at most one more for each worker out of
// step. A worker asking from no view gets the chunk's values whole; one
// asking from a view not kept here -- the server took the chunk over from
// a dead one, or a reply never reached the worker -- is asked for it
// (Offer), so that its change is the one it would have got: a view's
// bytes depend on the worker's view and the weights only, never on which
// server made them. A chunk too small to compress always goes whole and
// keeps no view. Thread-safe; chunks work independently.
#ifndef PSTRAIN_SERVER_PULL_VIEWS_H_
#define PSTRAIN_SERVER_PULL_VIEWS_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/job.pb.h"

namespace pstrain {

class PullViews {
 public:
  struct View {
    uint64_t id = 0;
    std::vector<float> weights;
  };

  // `spec`: the job's compression (a codec set).
  explicit PullViews(GradCompression spec);

  // A reply for chunk `chunk` (`numel` values) to a worker holding view
  // `held`: its payload bytes, and in *base the view the change is from,
  // held by the caller until it answers (null: the values go whole --
  // `held` is 0, or the chunk is too small to compress). NOT_FOUND when
  // `held` is a view not kept here: the worker offers it first.
  absl::StatusOr<int64_t> Plan(int32_t chunk, uint64_t held, int64_t numel,
                               std::shared_ptr<const View>* base);
  // Worker `worker`'s reply as planned: from `base` (null: whole) to the
  // chunk's `current` weights, written to `out`; returns the view it
  // brings the worker to (0: none kept, for a chunk too small to compress).
  uint64_t Answer(int32_t chunk, int worker, const View* base, const float* current, int64_t numel,
                  char* out);
  // Worker `worker` holds view `id` of chunk `chunk` (`numel` values
  // whole: `weights`), which Plan did not find: it is kept from now on, as
  // the view that worker holds (an id kept already, with these weights,
  // is only held). INVALID_ARGUMENT for id 0, a chunk too small to
  // compress or weights of another size; FAILED_PRECONDITION for an id
  // kept here for other weights.
  absl::Status Offer(int32_t chunk, int worker, uint64_t id, std::vector<float> weights,
                     int64_t numel);

 private:
  // Worker `worker` moves from `base` to chunk `chunk`'s `current` weights
  // (`numel` of them): the change, compressed, goes to `out`
  // (EncodedBytes); returns the new view's id.
  uint64_t Advance(int32_t chunk, int worker, const View& base, const float* current, int64_t numel,
                   char* out);
  // Worker `worker` gets `current` whole: returns its view's id.
  uint64_t Adopt(int32_t chunk, int worker, const float* current, int64_t numel);

  struct Chunk {
    absl::Mutex mu;
    std::map<uint64_t, std::shared_ptr<const View>> views ABSL_GUARDED_BY(mu);
    absl::flat_hash_map<int, uint64_t> held ABSL_GUARDED_BY(mu);  // by worker
    // The newest change: from view `from` toward weights `toward`, its
    // bytes, the view it made.
    uint64_t from ABSL_GUARDED_BY(mu) = 0, to ABSL_GUARDED_BY(mu) = 0;
    std::vector<float> toward ABSL_GUARDED_BY(mu);
    std::vector<char> bytes ABSL_GUARDED_BY(mu);
  };
  Chunk& Of(int32_t chunk);
  uint64_t NewId();
  // The id of a view kept of `c` with exactly `weights`, else of a new one
  // made of them: two workers whose views are the same weights under
  // different ids (one was offered: two servers numbered them) hold one
  // again after their next change.
  uint64_t Keep(Chunk& c, std::vector<float> weights) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);
  // Notes that `worker` holds view `id`; drops the views nobody needs.
  static void Hold(Chunk& c, int worker, uint64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu);

  const GradCompression spec_;
  absl::Mutex mu_;
  absl::flat_hash_map<int32_t, std::unique_ptr<Chunk>> chunks_ ABSL_GUARDED_BY(mu_);
  // Starts at random: a worker's view id from before this server's restart
  // (or from the server whose chunks it took over) is not one of its own.
  std::atomic<uint64_t> next_id_;
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_PULL_VIEWS_H_
