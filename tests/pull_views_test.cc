// Compressed pulls' views, the server's (server/pull_views.h) and a
// worker's (worker/held_views.h), in one process: a worker's first reply
// is whole, every later one a change its view takes to exactly the
// server's; workers of one clock share the change; the view's lag behind
// the weights stays bounded (the error feedback); a view not kept (a
// restarted server's), or a change from another view, falls back to whole.
#include "server/pull_views.h"

#include <cmath>
#include <random>
#include <vector>

#include "common/grad_codec.h"
#include "gtest/gtest.h"
#include "worker/held_views.h"

namespace pstrain {
namespace {

constexpr int32_t kChunk = 3;
constexpr int64_t kNumel = 8192;

GradCompression TopK() {
  GradCompression spec;
  spec.set_codec(GradCompression::TOP_K);
  spec.set_pulls(true);
  return WithCompressionDefaults(spec);
}

// One worker's pull of the chunk's `weights` from `server`: the reply
// planned and answered as ChunkRequests::FillPull does, taken as PsClient
// does; returns the weights the worker now computes with.
std::vector<float> Pull(PullViews& server, HeldViews& worker, int id,
                        const std::vector<float>& weights, int64_t* bytes) {
  std::shared_ptr<const PullViews::View> base;
  const int64_t size = server.Plan(kChunk, worker.Id(kChunk), kNumel, &base);
  std::vector<char> payload(size);
  const uint64_t view =
      server.Answer(kChunk, id, base.get(), weights.data(), kNumel, payload.data());
  std::vector<float> got(kNumel);
  EXPECT_EQ(worker.PayloadBytes(base == nullptr ? 0 : base->id, kNumel), size);
  EXPECT_TRUE(
      worker.Take(kChunk, base == nullptr ? 0 : base->id, view, payload.data(), kNumel, got.data())
          .ok());
  *bytes = size;
  return got;
}

double Distance(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  return std::sqrt(s);
}

TEST(PullViewsTest, ChangesAfterAWholeReplyTrackTheWeightsAndAreShared) {
  const GradCompression spec = TopK();
  PullViews server(spec);
  HeldViews a(spec), b(spec);
  std::mt19937 rng(5);
  std::normal_distribution<float> step(0.0f, 0.01f);
  std::vector<float> weights(kNumel);
  for (float& w : weights) w = step(rng) * 10;
  int64_t bytes_a = 0, bytes_b = 0;
  EXPECT_EQ(Pull(server, a, 0, weights, &bytes_a), weights) << "the first reply is whole";
  EXPECT_EQ(Pull(server, b, 1, weights, &bytes_b), weights);
  EXPECT_EQ(bytes_a, kNumel * 4);
  double largest_lag = 0, last_lag = 0;
  for (int clock = 0; clock < 300; ++clock) {
    for (float& w : weights) w += step(rng);  // an optimizer's step
    const std::vector<float> got_a = Pull(server, a, 0, weights, &bytes_a);
    const std::vector<float> got_b = Pull(server, b, 1, weights, &bytes_b);
    ASSERT_EQ(bytes_a, EncodedBytes(spec, kNumel)) << clock;
    ASSERT_EQ(got_b, got_a) << "the same change from the same view, clock " << clock;
    last_lag = Distance(got_a, weights);
    largest_lag = std::max(largest_lag, last_lag);
  }
  // A step moves the weights by ~0.01 sqrt(8192) = 0.9; top-k's lag settles
  // at a few steps.
  EXPECT_LT(largest_lag, 10.0);
  EXPECT_GT(last_lag, 0.0);
}

TEST(PullViewsTest, AViewNotKeptOrAChangeFromAnotherFallsBackToWhole) {
  const GradCompression spec = TopK();
  HeldViews worker(spec);
  std::vector<float> weights(kNumel, 0.5f);
  int64_t bytes = 0;
  {
    PullViews server(spec);
    Pull(server, worker, 0, weights, &bytes);
  }
  // A restarted server (or the standby that took the chunk over), which
  // has served another worker first, does not mistake this worker's view
  // for one of its own: its ids start elsewhere.
  PullViews restarted(spec);
  HeldViews other(spec);
  for (int i = 0; i < 3; ++i) Pull(restarted, other, 1, weights, &bytes);
  weights[7] = 2.0f;
  EXPECT_EQ(Pull(restarted, worker, 0, weights, &bytes), weights);
  EXPECT_EQ(bytes, kNumel * 4);
  // A change from a view the worker does not hold is refused (ABORTED: the
  // pull is retried); its next pull asks from none.
  std::vector<char> change(EncodedBytes(spec, kNumel), 0);
  std::vector<float> dst(kNumel);
  EXPECT_EQ(
      worker.Take(kChunk, worker.Id(kChunk) + 100, 999, change.data(), kNumel, dst.data()).code(),
      absl::StatusCode::kAborted);
  EXPECT_EQ(worker.Id(kChunk), 0u);
}

}  // namespace
}  // namespace pstrain
