#include "common/rows.h"

#include "absl/container/flat_hash_map.h"
#include "common/hash.h"

namespace pstrain {

int RowBucket(uint64_t id) { return static_cast<int>(SplitMix64(id) % kRowBuckets); }

int ServerOfRow(uint64_t id, int servers) { return servers <= 1 ? 0 : RowBucket(id) % servers; }

void CoalesceRows(absl::Span<const uint64_t> ids, absl::Span<const float> grads, int width,
                  std::vector<uint64_t>* distinct, std::vector<float>* summed) {
  distinct->clear();
  summed->clear();
  absl::flat_hash_map<uint64_t, size_t> at;
  for (size_t i = 0; i < ids.size(); ++i) {
    auto [it, fresh] = at.emplace(ids[i], distinct->size());
    const float* g = grads.data() + i * width;
    if (fresh) {
      distinct->push_back(ids[i]);
      summed->insert(summed->end(), g, g + width);
      continue;
    }
    float* sum = summed->data() + it->second * width;
    for (int j = 0; j < width; ++j) sum[j] += g[j];
  }
}

uint64_t TableInitKey(uint64_t seed, const std::string& table) {
  return SplitMix64(seed ^ Fnv1a(table));
}

void InitialRow(uint64_t key, uint64_t id, int width, float init_scale, float* out) {
  const uint64_t base = SplitMix64(key ^ id);
  for (int j = 0; j < width; ++j) {
    const float u = static_cast<float>(SplitMix64(base + j) >> 40) * (1.0f / (1 << 23)) - 1.0f;
    out[j] = u * init_scale;
  }
}

}  // namespace pstrain
