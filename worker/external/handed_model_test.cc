#include "worker/external/handed_model.h"

#include <thread>

#include "absl/synchronization/notification.h"
#include "common/external_model.h"
#include "common/job_spec.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"

namespace pstrain {
namespace {

constexpr absl::Duration kLong = absl::Seconds(30);

JobSpec TwoParamJob() {
  JobSpec job;
  job.mutable_model()->set_kind(EXTERNAL);
  job.set_clocks(10);
  job.set_batch_size(4);
  job.set_num_workers(1);
  ApplyJobDefaults(&job);
  ParamSpecs params;
  for (const char* name : {"first.weight", "last.weight"}) {
    ParamSpec* p = params.Add();
    p->set_name(name);
    p->add_shape(3);
  }
  return *JoinExternalModel(job, params, 64);
}

// The loop's side of one clock (clock 1: not the run's first) over a model
// whose weights land as `landed` says: what reached the push (ReportGrads)
// and what Forward returned.
class HandedModelTest : public ::testing::Test {
 protected:
  HandedModelTest()
      : job_(TwoParamJob()),
        backend_(kernels::MakeCpuBackend(1)),
        data_(job_),
        exchange_(2),
        model_(job_.model(), backend_.get(), &data_, &exchange_, &initial_, /*by_layer=*/true) {
    initial_.push_back({0, 0, 0});  // (not clock 0's: none kept here)
    model_.set_weights_await([this](const std::vector<int>& params) {
      absl::MutexLock lock(&mu_);
      auto in = [&] {
        for (int p : params) {
          if (!landed_[p] && read_.ok()) return false;
        }
        return true;
      };
      mu_.Await(absl::Condition(&in));
      return read_;
    });
    model_.set_grads_ready([this](const std::vector<int>& params) {
      absl::MutexLock lock(&mu_);
      pushed_.insert(pushed_.end(), params.begin(), params.end());
    });
  }

  void Land(int param) {
    absl::MutexLock lock(&mu_);
    landed_[param] = true;
  }
  void Fail(absl::Status why) {
    absl::MutexLock lock(&mu_);
    read_ = std::move(why);
  }
  std::vector<int> pushed() {
    absl::MutexLock lock(&mu_);
    return pushed_;
  }
  // Starts the loop's Forward of clock 1 on a thread of its own.
  std::thread StartClock() {
    Batch batch;
    data_.NextBatch(1, 1, 0, &batch);
    return std::thread([this, batch] { result_ = model_.Forward(0, batch, nullptr, nullptr, true); });
  }

  JobSpec job_;
  std::unique_ptr<kernels::Backend> backend_;
  ExternalData data_;
  ClockExchange exchange_;
  ParamBuffers initial_;
  HandedModel model_;
  absl::StatusOr<StepResult> result_;
  absl::Mutex mu_;
  // Under mu_ (a test's; unannotated, the lambdas above read them under it).
  bool landed_[2] = {false, false};
  absl::Status read_;
  std::vector<int> pushed_;
};

TEST_F(HandedModelTest, AClockIsOfferedBeforeItsWeightsAndEachWaitIsForOneParameter) {
  std::thread loop = StartClock();
  // Offered with no weight in.
  absl::StatusOr<std::optional<ClockExchange::OfferedClock>> offer = exchange_.Await(kLong);
  ASSERT_TRUE(offer.ok() && offer->has_value()) << offer.status();
  EXPECT_EQ((*offer)->clock, 1);
  Land(0);
  EXPECT_TRUE(model_.AwaitWeightsOf(0).ok());  // the first layer's only
  absl::Notification last_in;
  std::thread caller([&] {
    EXPECT_TRUE(model_.AwaitWeightsOf(1).ok());
    last_in.Notify();
  });
  EXPECT_FALSE(last_in.WaitForNotificationWithTimeout(absl::Milliseconds(100)));
  Land(1);
  caller.join();
  EXPECT_TRUE(last_in.HasBeenNotified());
  ASSERT_TRUE(exchange_.GradsReady(1).ok());
  ASSERT_TRUE(exchange_.GradsReady(0).ok());
  ASSERT_TRUE(exchange_.ClockDone(StepResult{}).ok());
  loop.join();
  EXPECT_TRUE(result_.ok()) << result_.status();
  EXPECT_EQ(pushed(), (std::vector<int>{1, 0}));
  EXPECT_EQ(model_.AwaitWeightsOf(2).code(), absl::StatusCode::kInvalidArgument);
  // The clock over (or the loop stopped): no wait answers OK.
  EXPECT_EQ(model_.AwaitWeightsOf(0).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(HandedModelTest, AGradientLeavesOnlyOnceTheWeightsAreIn) {
  std::thread loop = StartClock();
  ASSERT_TRUE(exchange_.Await(kLong).ok());
  Land(0);
  // Parameter 1's gradient is ready before its weights (the forward never
  // read it): it waits for them (for every weight), then leaves.
  ASSERT_TRUE(exchange_.GradsReady(1).ok());
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_TRUE(pushed().empty());
  Land(1);
  ASSERT_TRUE(exchange_.ClockDone(StepResult{}).ok());
  loop.join();
  EXPECT_TRUE(result_.ok()) << result_.status();
  EXPECT_EQ(pushed(), (std::vector<int>{1, 0}));
}

TEST_F(HandedModelTest, NoGradientLeavesInAClockWhosePullFailed) {
  std::thread loop = StartClock();
  ASSERT_TRUE(exchange_.Await(kLong).ok());
  Land(0);
  EXPECT_TRUE(model_.AwaitWeightsOf(0).ok());
  Fail(absl::AbortedError("the cluster rolled back"));
  EXPECT_EQ(model_.AwaitWeightsOf(1).code(), absl::StatusCode::kAborted);
  ASSERT_TRUE(exchange_.GradsReady(0).ok());  // (its weights landed, but the clock is lost)
  ASSERT_TRUE(exchange_.ClockDone(StepResult{}).ok());
  loop.join();
  EXPECT_EQ(result_.status().code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(pushed().empty());
}

}  // namespace
}  // namespace pstrain
