#include "server/pull_views.h"

#include <cstring>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "common/grad_codec.h"

namespace pstrain {

PullViews::PullViews(GradCompression spec)
    : spec_(std::move(spec)), next_id_(absl::Uniform<uint64_t>(absl::BitGen())) {}

uint64_t PullViews::NewId() {
  uint64_t id = next_id_.fetch_add(1);
  while (id == 0) id = next_id_.fetch_add(1);  // 0 is "none"
  return id;
}

PullViews::Chunk& PullViews::Of(int32_t chunk) {
  absl::MutexLock lock(&mu_);
  std::unique_ptr<Chunk>& c = chunks_[chunk];
  if (c == nullptr) c = std::make_unique<Chunk>();
  return *c;
}

absl::StatusOr<int64_t> PullViews::Plan(int32_t chunk, uint64_t held, int64_t numel,
                                        std::shared_ptr<const View>* base) {
  base->reset();
  if (held == 0 || !Compresses(spec_, numel)) return numel * static_cast<int64_t>(sizeof(float));
  Chunk& c = Of(chunk);
  absl::MutexLock lock(&c.mu);
  const auto it = c.views.find(held);
  if (it == c.views.end() || static_cast<int64_t>(it->second->weights.size()) != numel) {
    return absl::NotFoundError(
        absl::StrCat("view ", held, " of chunk ", chunk, " is not kept here"));
  }
  *base = it->second;
  return EncodedBytes(spec_, numel);
}

uint64_t PullViews::Answer(int32_t chunk, int worker, const View* base, const float* current,
                           int64_t numel, char* out) {
  if (base != nullptr) return Advance(chunk, worker, *base, current, numel, out);
  std::memcpy(out, current, numel * sizeof(float));
  // A chunk too small to compress goes whole every time: no view kept.
  return Compresses(spec_, numel) ? Adopt(chunk, worker, current, numel) : 0;
}

uint64_t PullViews::Advance(int32_t chunk, int worker, const View& base, const float* current,
                            int64_t numel, char* out) {
  Chunk& c = Of(chunk);
  absl::MutexLock lock(&c.mu);
  const int64_t bytes = EncodedBytes(spec_, numel);
  if (c.from == base.id && c.to != 0 && static_cast<int64_t>(c.toward.size()) == numel &&
      std::memcmp(c.toward.data(), current, numel * sizeof(float)) == 0) {
    std::memcpy(out, c.bytes.data(), bytes);  // another worker's, the same
    Hold(c, worker, c.to);
    return c.to;
  }
  thread_local std::vector<float> change, residual, decoded;
  change.resize(numel);
  residual.assign(numel, 0.0f);  // the view's lag is the residual
  decoded.resize(numel);
  for (int64_t i = 0; i < numel; ++i) change[i] = current[i] - base.weights[i];
  // Encoded here, not in `out` (a worker's shared memory, which it could
  // write meanwhile): every worker making the same move gets these bytes.
  c.bytes.resize(bytes);
  EncodeWithFeedback(spec_, change.data(), numel, residual.data(), c.bytes.data());
  (void)Decode(spec_, c.bytes.data(), bytes, numel, decoded.data());  // our own encoding
  std::memcpy(out, c.bytes.data(), bytes);
  std::vector<float> moved(numel);
  for (int64_t i = 0; i < numel; ++i) moved[i] = base.weights[i] + decoded[i];
  c.from = base.id;
  c.to = Keep(c, std::move(moved));
  c.toward.assign(current, current + numel);
  Hold(c, worker, c.to);
  return c.to;
}

uint64_t PullViews::Keep(Chunk& c, std::vector<float> weights) {
  for (const auto& [id, view] : c.views) {
    if (view->weights.size() == weights.size() &&
        std::memcmp(view->weights.data(), weights.data(), weights.size() * sizeof(float)) == 0) {
      return id;
    }
  }
  auto view = std::make_shared<View>();
  view->id = NewId();
  view->weights = std::move(weights);
  c.views[view->id] = view;
  return view->id;
}

absl::Status PullViews::Offer(int32_t chunk, int worker, uint64_t id, std::vector<float> weights,
                              int64_t numel) {
  if (id == 0 || !Compresses(spec_, numel) || static_cast<int64_t>(weights.size()) != numel) {
    return absl::InvalidArgumentError(absl::StrCat(
        "offer views: view ", id, " of chunk ", chunk, " (", numel, " values) with ",
        weights.size(), " values; a view has a nonzero id and a compressed chunk's size"));
  }
  Chunk& c = Of(chunk);
  absl::MutexLock lock(&c.mu);
  if (const auto it = c.views.find(id); it != c.views.end()) {
    if (std::memcmp(it->second->weights.data(), weights.data(), numel * sizeof(float)) != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("offer views: view ", id, " of chunk ", chunk, " is another one here"));
    }
  } else {
    auto view = std::make_shared<View>();
    view->id = id;
    view->weights = std::move(weights);
    c.views[id] = std::move(view);
  }
  Hold(c, worker, id);
  return absl::OkStatus();
}

uint64_t PullViews::Adopt(int32_t chunk, int worker, const float* current, int64_t numel) {
  Chunk& c = Of(chunk);
  absl::MutexLock lock(&c.mu);
  const uint64_t id = Keep(c, std::vector<float>(current, current + numel));
  Hold(c, worker, id);
  return id;
}

void PullViews::Hold(Chunk& c, int worker, uint64_t id) {
  c.held[worker] = id;
  for (auto it = c.views.begin(); it != c.views.end();) {
    bool needed = it->first == c.to;  // the next worker of the clock moves there too
    for (const auto& [w, held] : c.held) needed = needed || held == it->first;
    it = needed ? std::next(it) : c.views.erase(it);
  }
}

}  // namespace pstrain
