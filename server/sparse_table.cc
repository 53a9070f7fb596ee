#include "server/sparse_table.h"

#include <cmath>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/hash.h"

namespace pstrain {

int RowOptimizer::StateFloats(int width) const {
  switch (type) {
    case Type::kSgd:
      return 0;
    case Type::kAdagrad:
      return width;
    case Type::kAdam:
      return 2 * width;
  }
  return 0;
}

void RowOptimizer::InitState(int width, float* state) const {
  const float start = type == Type::kAdagrad ? static_cast<float>(initial_accumulator) : 0.0f;
  for (int j = 0; j < StateFloats(width); ++j) state[j] = start;
}

void RowOptimizer::Update(int64_t t, int width, const float* g, float* w, float* state) const {
  switch (type) {
    case Type::kSgd: {
      const float alpha = static_cast<float>(-lr);
      for (int j = 0; j < width; ++j) w[j] += alpha * g[j];
      return;
    }
    case Type::kAdagrad: {
      const float alpha = static_cast<float>(-(lr / (1 + (t - 1) * lr_decay)));
      const float e = static_cast<float>(eps);
      for (int j = 0; j < width; ++j) {
        state[j] += g[j] * g[j];
        w[j] += alpha * (g[j] / (std::sqrt(state[j]) + e));
      }
      return;
    }
    case Type::kAdam: {
      const float keep1 = static_cast<float>(1 - beta1), keep2 = static_cast<float>(1 - beta2);
      const double correction1 = 1 - std::pow(beta1, static_cast<double>(t));
      const double correction2 = 1 - std::pow(beta2, static_cast<double>(t));
      const float step = static_cast<float>(-(lr * std::sqrt(correction2) / correction1));
      const float e = static_cast<float>(eps);
      float* m = state;
      float* v = state + width;
      for (int j = 0; j < width; ++j) {
        // In PyTorch's order: the updates first, then the moments from them.
        const float m_update = (g[j] - m[j]) * keep1;
        const float v_update = (g[j] * g[j] - v[j]) * keep2;
        const float numer = m_update + m[j];
        const float denom = std::sqrt(v_update + v[j]) + e;
        m[j] = numer;
        v[j] = v_update + v[j];
        w[j] += step * (numer / denom);
      }
      return;
    }
  }
}

SparseTable::SparseTable(TableConfig config)
    : config_(std::move(config)),
      name_hash_(Fnv1a(config_.name)),
      stride_(config_.width + config_.optimizer.StateFloats(config_.width)) {}

int64_t SparseTable::Create(uint64_t id) {
  const int64_t row = num_rows();
  rows_.resize(rows_.size() + stride_);
  float* w = Weights(row);
  const uint64_t base = SplitMix64(SplitMix64(config_.seed ^ name_hash_) ^ id);
  for (int j = 0; j < config_.width; ++j) {
    // 24 random bits: a uniform float in [-1, 1), scaled.
    const float u = static_cast<float>(SplitMix64(base + j) >> 40) * (1.0f / (1 << 23)) - 1.0f;
    w[j] = u * config_.init_scale;
  }
  config_.optimizer.InitState(config_.width, w + config_.width);
  index_.emplace(id, row);
  return row;
}

void SparseTable::Pull(absl::Span<const uint64_t> ids, float* out) {
  for (size_t i = 0; i < ids.size(); ++i) {
    auto it = index_.find(ids[i]);
    const int64_t row = it != index_.end() ? it->second : Create(ids[i]);
    const float* w = Weights(row);
    std::copy(w, w + config_.width, out + i * config_.width);
  }
}

absl::Status SparseTable::Check(absl::Span<const uint64_t> ids, absl::Span<const float> grads,
                                std::vector<int64_t>* rows) const {
  if (grads.size() != ids.size() * static_cast<size_t>(config_.width)) {
    return absl::InvalidArgumentError(
        absl::StrCat("table ", config_.name, ": ", grads.size(), " gradient floats for ",
                     ids.size(), " rows of width ", config_.width));
  }
  rows->resize(ids.size());
  absl::flat_hash_set<uint64_t> seen;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!seen.insert(ids[i]).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("table ", config_.name, ": row ", ids[i], " pushed twice in one update"));
    }
    auto it = index_.find(ids[i]);
    if (it == index_.end()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "table ", config_.name, ": a push for row ", ids[i], ", which no pull created"));
    }
    (*rows)[i] = it->second;
  }
  return absl::OkStatus();
}

absl::Status SparseTable::CheckPush(absl::Span<const uint64_t> ids,
                                    absl::Span<const float> grads) const {
  std::vector<int64_t> rows;
  return Check(ids, grads, &rows);
}

absl::Status SparseTable::Push(absl::Span<const uint64_t> ids, absl::Span<const float> grads) {
  std::vector<int64_t> rows;  // checked whole before anything is applied
  if (absl::Status st = Check(ids, grads, &rows); !st.ok()) return st;
  ++updates_;
  for (size_t i = 0; i < ids.size(); ++i) {
    float* w = Weights(rows[i]);
    config_.optimizer.Update(updates_, config_.width, grads.data() + i * config_.width, w,
                             w + config_.width);
  }
  return absl::OkStatus();
}

const float* SparseTable::Row(uint64_t id) const {
  auto it = index_.find(id);
  return it == index_.end() ? nullptr : rows_.data() + it->second * stride_;
}

int ServerOfRow(uint64_t id, int servers) {
  return servers <= 1 ? 0 : static_cast<int>(SplitMix64(id) % static_cast<uint64_t>(servers));
}

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

}  // namespace pstrain
