// Two pipeline stages over a real gRPC stream on loopback: a clock trains as
// the whole model does (fp32 on the wire: within 1e-5; bf16: within 2e-2),
// and a neighbour that goes away or never comes is an error, not a hang.
#include "worker/stage_link.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "common/job_spec.h"
#include "common/params.h"
#include "common/rpc.h"
#include "common/stage_plan.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "worker/models/test_models.h"

namespace pstrain {
namespace {

std::unique_ptr<Model> StageModel(const JobSpec& job, const Stage& stage,
                                  kernels::Backend* backend) {
  std::unique_ptr<Model> model = MakeStageModel(job.model(), stage, backend);
  const testing::Buffers all = testing::NoisyWeights(job.model());
  std::copy(all.begin() + stage.first_param, all.begin() + stage.end_param,
            model->weights().begin());
  return model;
}

struct Served {
  std::unique_ptr<StageLinkService> service;
  std::unique_ptr<grpc::Server> server;
  std::string address;
};

Served Serve(StageEndpoint me) {
  Served s;
  s.service = std::make_unique<StageLinkService>(me);
  std::string bound;
  absl::StatusOr<std::unique_ptr<grpc::Server>> server =
      StartServer("127.0.0.1:0", {s.service.get()}, &bound);
  EXPECT_TRUE(server.ok()) << server.status();
  s.server = std::move(*server);
  s.address = bound;
  return s;
}

// Two clocks of a 2-stage pipeline over gRPC; the worst relative gradient
// difference from the whole model's.
double TwoStagesOverGrpc(DType wire) {
  const JobSpec job = testing::TinyGpt(2);
  const std::vector<Stage> plan = *PlanStages(job.model(), 2);
  const Batch batch = testing::RandomTokens(4, 5);
  StageEndpoint first{0, 0, 0, wire}, second{0, 1, 0, wire};
  Served served = Serve(second);
  auto client = std::make_unique<StageLinkClient>(first, served.address);
  auto b0 = kernels::MakeCpuBackend(1), b1 = kernels::MakeCpuBackend(1);
  std::unique_ptr<Model> m0 = StageModel(job, plan[0], b0.get());
  std::unique_ptr<Model> m1 = StageModel(job, plan[1], b1.get());
  testing::Buffers g0, g1;
  for (int64_t clock = 0; clock < 2; ++clock) {
    std::thread downstream([&] {
      StageRunner runner(m1.get(), ONE_F_ONE_B, 1, 2, served.service->before(), nullptr);
      EXPECT_TRUE(runner.RunClock(clock, batch, 2, &g1).ok());
    });
    StageRunner runner(m0.get(), ONE_F_ONE_B, 0, 2, nullptr, client->after());
    absl::StatusOr<StageClock> r = runner.RunClock(clock, batch, 2, &g0);
    EXPECT_TRUE(r.ok()) << r.status();
    downstream.join();
  }
  auto whole_backend = kernels::MakeCpuBackend(1);
  std::unique_ptr<Model> whole = StageModel(job, WholeModel(job.model()), whole_backend.get());
  EXPECT_TRUE(whole->TrainStep(batch).ok());
  g0.insert(g0.end(), g1.begin(), g1.end());
  const double diff = testing::MaxRelativeDifference(whole->grads(), g0);
  client.reset();
  served.server->Shutdown();
  return diff;
}

TEST(StageLinkTest, TwoStagesOverAStreamTrainAsTheWholeModel) {
  EXPECT_LE(TwoStagesOverGrpc(FP32), 1e-5);
  const double bf16 = TwoStagesOverGrpc(BF16);
  EXPECT_LE(bf16, 2e-2);
  EXPECT_GT(bf16, 0.0);  // the wire really rounded
}

TEST(StageLinkTest, ANeighbourThatGoesAwayOrNeverComesIsAnError) {
  StageEndpoint second{1, 1, 0, FP32};
  second.connect_timeout = absl::Milliseconds(300);
  Served served = Serve(second);
  absl::StatusOr<StageTensor> t = served.service->before()->Receive();
  EXPECT_EQ(t.status().code(), absl::StatusCode::kDeadlineExceeded) << t.status();
  EXPECT_NE(t.status().message().find("stage 0 of replica 1"), std::string::npos) << t.status();

  auto client = std::make_unique<StageLinkClient>(StageEndpoint{1, 0, 0, FP32}, served.address);
  ASSERT_TRUE(client->after()->Send(StageTensor{0, 0, {1.0f, 2.0f}}).ok());
  t = served.service->before()->Receive();
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->values, (std::vector<float>{1.0f, 2.0f}));
  client.reset();  // the stage before goes away
  t = served.service->before()->Receive();
  EXPECT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("stage 0 of replica 1"), std::string::npos) << t.status();
  served.server->Shutdown();
}

// A pipeline restart: the stage after resets its link to a newer link generation.
TEST(StageLinkTest, ALinkStartsOverInANewerLinkGenerationAndDropsWhatIsOlder) {
  StageEndpoint after{0, 1, 0, FP32};
  after.connect_timeout = absl::Seconds(10);
  Served served = Serve(after);
  StreamChannel* before = served.service->before();
  auto old_link = std::make_unique<StageLinkClient>(StageEndpoint{0, 0, 0, FP32}, served.address);
  ASSERT_TRUE(old_link->after()->Send(StageTensor{5, 0, {1.0f}}).ok());
  ASSERT_TRUE(before->Receive().ok());
  ASSERT_TRUE(old_link->after()->Send(StageTensor{5, 1, {2.0f}}).ok());
  absl::SleepFor(absl::Milliseconds(100));  // delivered, not taken
  before->Reset(1);
  // The older stream was ended: its stage learns it.
  EXPECT_FALSE(old_link->after()->Receive().ok());
  // A stream of the older link generation is refused.
  auto stale = std::make_unique<StageLinkClient>(StageEndpoint{0, 0, 0, FP32}, served.address);
  absl::StatusOr<StageTensor> t = stale->after()->Receive();
  EXPECT_EQ(t.status().code(), absl::StatusCode::kAborted) << t.status();
  // The new link generation's stream: only its tensors arrive (the old one was dropped).
  auto link = std::make_unique<StageLinkClient>(StageEndpoint{0, 0, 1, FP32}, served.address);
  ASSERT_TRUE(link->after()->Send(StageTensor{3, 0, {7.0f}}).ok());
  t = before->Receive();
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->clock, 3);
  EXPECT_EQ(t->values, std::vector<float>{7.0f});
  // A tensor of a newer link generation than the stage's ends its wait; once it
  // resets to that link generation, it takes it.
  auto newer = std::make_unique<StageLinkClient>(StageEndpoint{0, 0, 2, FP32}, served.address);
  ASSERT_TRUE(newer->after()->Send(StageTensor{3, 0, {9.0f}}).ok());
  t = before->Receive();
  EXPECT_EQ(t.status().code(), absl::StatusCode::kAborted) << t.status();
  // Closing the link of the older link generation (its stage restarts) keeps the
  // newer stream and what it sends.
  before->Close(absl::AbortedError("restarting"));
  ASSERT_TRUE(newer->after()->Send(StageTensor{3, 1, {10.0f}}).ok());
  absl::SleepFor(absl::Milliseconds(100));
  before->Reset(2);
  t = before->Receive();
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->values, std::vector<float>{9.0f});
  t = before->Receive();
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->values, std::vector<float>{10.0f});
  for (auto* c : {&old_link, &stale, &link, &newer}) (*c)->Abort(absl::CancelledError("done"));
  old_link.reset();
  stale.reset();
  link.reset();
  newer.reset();
  served.server->Shutdown();
}

TEST(StageLinkTest, ATensorFromAnotherStageIsRefused) {
  Served served = Serve(StageEndpoint{0, 2, 0, FP32});
  // A stage-0 client talking to stage 2: its tensors are not stage 1's.
  auto client = std::make_unique<StageLinkClient>(StageEndpoint{0, 0, 0, FP32}, served.address);
  ASSERT_TRUE(client->after()->Send(StageTensor{0, 0, {1.0f}}).ok());
  absl::StatusOr<StageTensor> t = served.service->before()->Receive();
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << t.status();
  client.reset();
  served.server->Shutdown();
}

}  // namespace
}  // namespace pstrain
