// What both ends of a sparse table's row path compute alike: which server
// holds a row, a push's repeated ids coalesced, and a new row's initial
// values. The servers' tables (server/sparse_table.h) and the workers' row
// client (worker/row_client.h, the PyTorch front end's pst_initial_rows)
// call these, so that neither side includes the other.
#ifndef PSTRAIN_COMMON_ROWS_H_
#define PSTRAIN_COMMON_ROWS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/types/span.h"

namespace pstrain {

// A table's rows are placed by bucket: a mixing hash of the row's id
// (consecutive ids spread), one of kRowBuckets; the job's placement
// (common/placement.h) names each bucket's server.
inline constexpr int kRowBuckets = 1024;
int RowBucket(uint64_t id);
// The server of `servers` that holds row `id` by the job's initial
// placement: its bucket's, bucket b on server b mod `servers`.
int ServerOfRow(uint64_t id, int servers);

// The distinct ids of `ids` in first-seen order, and for each the sum of its
// rows of `grads` (ids.size() x width floats, added in order).
void CoalesceRows(absl::Span<const uint64_t> ids, absl::Span<const float> grads, int width,
                  std::vector<uint64_t>* distinct, std::vector<float>* summed);

// A table's key for its rows' initial values: from the job's seed and the
// table's name, so two tables (or two jobs) start their rows apart.
uint64_t TableInitKey(uint64_t seed, const std::string& table);

// Row `id`'s initial weights into out[0, width): 24 random bits a value from
// (key, id), a uniform float in [-1, 1) scaled by `init_scale`.
void InitialRow(uint64_t key, uint64_t id, int width, float init_scale, float* out);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_ROWS_H_
