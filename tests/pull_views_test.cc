// Compressed pulls' views, the server's (server/pull_views.h) and a
// worker's (worker/held_views.h), in one process: a worker's first reply
// is whole, every later one a change its view takes to exactly the
// server's; workers of one clock share the change; the view's lag behind
// the weights stays bounded (the error feedback); a view not kept (a
// promoted standby's) is offered, after which the changes are the other
// server's; a change from another view falls back to whole.
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
// does -- a view the server does not keep offered to it first; returns the
// weights the worker now computes with.
std::vector<float> Pull(PullViews& server, HeldViews& worker, int id,
                        const std::vector<float>& weights, int64_t* bytes) {
  std::shared_ptr<const PullViews::View> base;
  absl::StatusOr<int64_t> size = server.Plan(kChunk, worker.Id(kChunk), kNumel, &base);
  if (absl::IsNotFound(size.status())) {  // PullResponse.views_unknown
    std::vector<float> held;
    const uint64_t view = worker.Copy(kChunk, &held);
    EXPECT_TRUE(server.Offer(kChunk, id, view, std::move(held), kNumel).ok());
    size = server.Plan(kChunk, worker.Id(kChunk), kNumel, &base);
  }
  EXPECT_TRUE(size.ok()) << size.status();
  std::vector<char> payload(*size);
  const uint64_t view =
      server.Answer(kChunk, id, base.get(), weights.data(), kNumel, payload.data());
  std::vector<float> got(kNumel);
  EXPECT_EQ(worker.PayloadBytes(base == nullptr ? 0 : base->id, kNumel), *size);
  EXPECT_TRUE(
      worker.Take(kChunk, base == nullptr ? 0 : base->id, view, payload.data(), kNumel, got.data())
          .ok());
  *bytes = *size;
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

// A server that took the chunk over (a promoted standby, or one that
// dropped the view after a lost reply) keeps none of the worker's views:
// it asks for the view (Plan: NOT_FOUND), takes it (Offer), and from then
// on gives the worker the very changes the first server gives a worker
// that holds the same view -- a promotion changes no weight. Two workers
// whose views are the same weights under two servers' ids share one view
// again after their next change.
TEST(PullViewsTest, AViewNotKeptIsOfferedAndItsChangesAreTheOtherServers) {
  const GradCompression spec = TopK();
  PullViews first(spec), taken_over(spec);
  HeldViews stays(spec), moves(spec), other(spec);
  std::mt19937 rng(7);
  std::normal_distribution<float> step(0.0f, 0.01f);
  std::vector<float> weights(kNumel);
  for (float& w : weights) w = step(rng) * 10;
  int64_t bytes = 0;
  // The other server has served a worker first: its ids start elsewhere.
  for (int i = 0; i < 3; ++i) Pull(taken_over, other, 2, weights, &bytes);
  for (int clock = 0; clock < 20; ++clock) {
    for (float& w : weights) w += step(rng);
    ASSERT_EQ(Pull(first, stays, 0, weights, &bytes), Pull(first, moves, 1, weights, &bytes));
  }
  for (int clock = 20; clock < 60; ++clock) {
    for (float& w : weights) w += step(rng);
    const std::vector<float> got = Pull(taken_over, moves, 1, weights, &bytes);
    ASSERT_EQ(bytes, EncodedBytes(spec, kNumel)) << "a change, not the values whole: " << clock;
    ASSERT_EQ(got, Pull(first, stays, 0, weights, &bytes)) << clock;
  }
  // Two workers holding the same weights under different ids.
  PullViews server(spec);
  std::vector<float> same(kNumel, 0.25f);
  ASSERT_TRUE(server.Offer(kChunk, 0, 111, same, kNumel).ok());
  ASSERT_TRUE(server.Offer(kChunk, 1, 222, same, kNumel).ok());
  for (float& w : same) w += 0.5f;
  std::vector<char> out(EncodedBytes(spec, kNumel));
  std::shared_ptr<const PullViews::View> base0, base1;
  ASSERT_TRUE(server.Plan(kChunk, 111, kNumel, &base0).ok());
  ASSERT_TRUE(server.Plan(kChunk, 222, kNumel, &base1).ok());
  const uint64_t view0 = server.Answer(kChunk, 0, base0.get(), same.data(), kNumel, out.data());
  const uint64_t view1 = server.Answer(kChunk, 1, base1.get(), same.data(), kNumel, out.data());
  EXPECT_EQ(view0, view1);
}

TEST(PullViewsTest, OffersOutOfShapeAreRefused) {
  const GradCompression spec = TopK();
  PullViews server(spec);
  std::vector<float> view(kNumel, 1.0f);
  EXPECT_EQ(server.Offer(kChunk, 0, 0, view, kNumel).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(server.Offer(kChunk, 0, 5, std::vector<float>(kNumel - 1), kNumel).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(server.Offer(kChunk, 0, 5, std::vector<float>(4), 4).code(),
            absl::StatusCode::kInvalidArgument)
      << "a chunk too small to compress keeps no view";
  ASSERT_TRUE(server.Offer(kChunk, 0, 5, view, kNumel).ok());
  EXPECT_TRUE(server.Offer(kChunk, 1, 5, view, kNumel).ok()) << "the same view, held by another";
  view[3] = 2.0f;
  EXPECT_EQ(server.Offer(kChunk, 1, 5, view, kNumel).code(),
            absl::StatusCode::kFailedPrecondition)
      << "an id kept for other weights";
}

TEST(PullViewsTest, AChangeFromAnotherViewIsRefusedAndTheNextPullIsWhole) {
  const GradCompression spec = TopK();
  HeldViews worker(spec);
  PullViews server(spec);
  std::vector<float> weights(kNumel, 0.5f);
  int64_t bytes = 0;
  Pull(server, worker, 0, weights, &bytes);
  // A change from a view the worker does not hold is refused (ABORTED: the
  // pull is retried); its next pull asks from none.
  std::vector<char> change(EncodedBytes(spec, kNumel), 0);
  std::vector<float> dst(kNumel);
  EXPECT_EQ(
      worker.Take(kChunk, worker.Id(kChunk) + 100, 999, change.data(), kNumel, dst.data()).code(),
      absl::StatusCode::kAborted);
  EXPECT_EQ(worker.Id(kChunk), 0u);
  weights[7] = 2.0f;
  EXPECT_EQ(Pull(server, worker, 0, weights, &bytes), weights);
  EXPECT_EQ(bytes, kNumel * 4);
}

}  // namespace
}  // namespace pstrain
