// The clock loop's sequence of calls against a fake gate and fake
// parameter clients, in process: clock tags, min_clock per consistency
// model, pushes by layer or whole, the pull with the gate or after it, the
// prefetch, the final read, and a resync after a rollback. No daemons.
#include "worker/clock_loop.h"

#include <atomic>
#include <memory>

#include "common/job_spec.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "worker/testing/fakes.h"

namespace pstrain {
namespace {

using testing::CallLog;
using testing::FakeGate;
using testing::FakeParamClient;

// Four features, three classes, a fixed batch.
class TinyData : public DataSource {
 public:
  void NextBatch(int64_t clock, int num_shares, int, Batch* batch) override {
    batch->rows = 4 / num_shares;
    batch->x.assign(batch->rows * 4, 0.5f + 0.1f * static_cast<float>(clock));
    batch->labels.assign(batch->rows, static_cast<int32_t>(clock % 3));
  }
  absl::StatusOr<double> Evaluate(Model&) override { return 0.5; }
  int64_t Epoch(int64_t clock) const override { return clock / 100; }
};

JobSpec TinyJob(const std::string& consistency, int64_t steps) {
  JobSpec job = ParseJobSpecText(
                    "data { dataset: SYNTHETIC synthetic_dim: 4 synthetic_classes: 3 } "
                    "model { layers { type: DENSE units: 3 } layers { type: SOFTMAX_XENT } } "
                    "batch_size: 4 num_servers: 1 num_workers: 1 " +
                        consistency,
                    "t")
                    .value();
  job.set_clocks(steps);
  ApplyJobDefaults(&job);
  EXPECT_TRUE(ValidateJobSpec(job).ok()) << ValidateJobSpec(job);
  return job;
}

class ClockLoopTest : public ::testing::Test {
 protected:
  // Runs the loop to the end; its log.
  absl::StatusOr<double> RunLoop(const std::string& consistency, int64_t steps, bool overlap,
                                 std::function<absl::Status(const std::string&)> fail = nullptr) {
    ClockLoopOptions o;
    o.job = TinyJob(consistency, steps);
    o.training.overlap = overlap;
    model_ = MakeModel(o.job.model(), backend_.get());
    gate_ = std::make_unique<FakeGate>(&log_, 1, 1);
    if (script_) gate_->script = script_;
    ParamClientFactory factory = [this, fail](const ClusterMembers&, int64_t generation, bool fp32,
                                              std::function<bool()>) {
      return std::make_unique<FakeParamClient>(&log_, generation, fp32, fail);
    };
    ClockLoop loop(o, gate_.get(), factory, &data_, model_.get(), backend_.get());
    std::atomic<bool> stop{false};
    absl::StatusOr<double> acc = loop.Run(stop);
    metrics_ = loop.metrics();
    return acc;
  }

  std::unique_ptr<kernels::Backend> backend_ = kernels::MakeCpuBackend(1);
  std::unique_ptr<Model> model_;
  std::unique_ptr<FakeGate> gate_;
  std::function<void(int64_t, AdvanceClockResponse*)> script_;
  TinyData data_;
  CallLog log_;
  ClockMetrics metrics_;
};

TEST_F(ClockLoopTest, BspPullsEachClockAfterTheGateAndPushesTheWholeGradient) {
  ASSERT_TRUE(RunLoop("consistency: BSP", 3, /*overlap=*/false).ok());
  EXPECT_EQ(log_, (CallLog{"gate 0 g0", "g0 pull 0 min 0", "g0 push 0 all",  //
                           "gate 1 g0", "g0 pull 1 min 1", "g0 push 1 all",  //
                           "gate 2 g0", "g0 pull 2 min 2", "g0 push 2 all",  //
                           "gate 3 g0", "g0 fp32 pull 3 min 3"}));
  EXPECT_EQ(metrics_.clock, 3);
  EXPECT_EQ(metrics_.test_accuracy, 0.5);
  // Per clock: the gate, the pull and the push.
  EXPECT_EQ(metrics_.window.rpcs(), 3.0);
}

TEST_F(ClockLoopTest, SspReadsWithinTheBoundFromTheCacheOrAPrefetchWhilePushingByLayer) {
  ASSERT_TRUE(RunLoop("consistency: SSP staleness: 2", 4, /*overlap=*/true).ok());
  // The fake's pull of clock c holds every update before c. Clock 0's
  // weights serve clocks 1 and 2 too (a read for c needs the updates before
  // c - 2): no pull (the cache). Clock 3's are pulled while clock 2
  // computes (the prefetch, min_clock 1), before clock 2's pushes (by
  // layer: the dense layer's weight and bias, indices 0 and 1).
  EXPECT_EQ(log_, (CallLog{"gate 0 g0", "g0 pull 0 min 0", "g0 push 0 [0,1]",  //
                           "gate 1 g0", "g0 push 1 [0,1]",                     //
                           "gate 2 g0", "g0 pull 3 min 1", "g0 push 2 [0,1]",  //
                           "gate 3 g0", "g0 push 3 [0,1]",                     //
                           "gate 4 g0", "g0 fp32 pull 4 min 4"}))
      << absl::StrJoin(log_, "\n");
  EXPECT_EQ(metrics_.pulls, 2);
  // The prefetched weights are the ones used: the fake fills them with the
  // clock read.
  EXPECT_EQ(model_->weights()[0][0], 4.0f);  // the final read's
}

TEST_F(ClockLoopTest, BspWithOverlapPullsWithTheGateAndPushesByLayer) {
  ASSERT_TRUE(RunLoop("consistency: BSP", 2, /*overlap=*/true).ok());
  EXPECT_EQ(log_, (CallLog{"gate 0 g0", "g0 pull 0 min 0", "g0 push 0 [0,1]",  //
                           "g0 pull 1 min 1", "gate 1 g0", "g0 push 1 [0,1]",  //
                           "gate 2 g0", "g0 fp32 pull 2 min 2"}));
}

TEST_F(ClockLoopTest, AClockDoesNotWaitForItsGateButTakesAnAnswerThatCameWithItsPull) {
  // Clock 2's gate answers generation 1, back to clock 1. The clock does
  // not wait for the answer, but this one is there once its pull returned:
  // the loop resumes at clock 1 with generation-1 clients before it
  // computes. (An answer that comes later is taken at the next clock's
  // start; the pushes made meanwhile carry generation 0, which the
  // restored servers refuse.)
  script_ = [](int64_t clock, AdvanceClockResponse* r) {
    if (clock == 2 && r->generation() == 0) {
      r->set_generation(1);
      r->set_resume_clock(1);
    }
  };
  ASSERT_TRUE(RunLoop("consistency: SSP staleness: 1", 3, /*overlap=*/false).ok());
  // (Clock 1 reads clock 0's weights from the cache: they hold what s = 1
  // asks; the rollback empties the cache.)
  EXPECT_EQ(log_, (CallLog{"gate 0 g0", "g0 pull 0 min 0", "g0 push 0 all",  //
                           "gate 1 g0", "g0 push 1 all",                     //
                           "gate 2 g0", "g0 pull 2 min 1",                   //
                           "gate 1 g1", "g1 pull 1 min 0", "g1 push 1 all",  //
                           "gate 2 g1", "g1 push 2 all",                     //
                           "gate 3 g1", "g1 fp32 pull 3 min 3"}))
      << absl::StrJoin(log_, "\n");
  EXPECT_EQ(metrics_.generation, 1);
}

TEST_F(ClockLoopTest, AspReadsWithoutAGuarantee) {
  ASSERT_TRUE(RunLoop("consistency: ASP", 3, /*overlap=*/false).ok());
  for (const std::string& line : log_) {
    if (line.find(" pull ") != std::string::npos && line.find("fp32") == std::string::npos) {
      EXPECT_NE(line.find("min 0"), std::string::npos) << line;
    }
  }
}

TEST_F(ClockLoopTest, ARollbackAtTheGateResumesAtItsClockWithNewClients) {
  // At clock 3 the gate answers generation 1, back to clock 1.
  script_ = [](int64_t clock, AdvanceClockResponse* r) {
    if (clock == 3 && r->generation() == 0) {
      r->set_generation(1);
      r->set_resume_clock(1);
    }
  };
  ASSERT_TRUE(RunLoop("consistency: BSP", 4, /*overlap=*/false).ok());
  const CallLog tail(log_.begin() + 9, log_.end());
  // Clock 3's pull went out with its gate call; its answer, generation 1,
  // back to clock 1, is taken before the step.
  EXPECT_EQ(tail, (CallLog{"gate 3 g0", "g0 pull 3 min 3",  //
                           "gate 1 g1", "g1 pull 1 min 1", "g1 push 1 all",  //
                           "gate 2 g1", "g1 pull 2 min 2", "g1 push 2 all",  //
                           "gate 3 g1", "g1 pull 3 min 3", "g1 push 3 all",  //
                           "gate 4 g1", "g1 fp32 pull 4 min 4"}))
      << absl::StrJoin(log_, "\n");
  EXPECT_EQ(metrics_.generation, 1);
}

TEST_F(ClockLoopTest, AFailedPushIsResyncedAtTheGate) {
  // The push of clock 1 fails once; the next gate call (clock 2's, sent
  // while that push went on) tells of generation 1: the cluster rolled back
  // to clock 1, and the loop goes on from there.
  bool failed = false;
  script_ = [&failed](int64_t, AdvanceClockResponse* r) {
    if (failed && r->generation() == 0) {
      r->set_generation(1);
      r->set_resume_clock(1);
    }
  };
  auto fail = [&failed](const std::string& line) {
    if (line == "g0 push 1 all" && !failed) {
      failed = true;
      return absl::UnavailableError("server 0 unreachable");
    }
    return absl::OkStatus();
  };
  ASSERT_TRUE(RunLoop("consistency: BSP", 2, /*overlap=*/false, fail).ok());
  const CallLog tail(log_.begin() + 3, log_.end());
  EXPECT_EQ(tail, (CallLog{"gate 1 g0", "g0 pull 1 min 1", "g0 push 1 all",  //
                           "gate 2 g0",  // answered: generation 1, back to clock 1
                           "gate 1 g1", "g1 pull 1 min 1", "g1 push 1 all",  //
                           "gate 2 g1", "g1 fp32 pull 2 min 2"}))
      << absl::StrJoin(log_, "\n");
}

TEST_F(ClockLoopTest, AFailedPushWithoutARollbackEndsTheLoop) {
  auto fail = [](const std::string& line) {
    return line == "g0 push 1 all" ? absl::InvalidArgumentError("push to server 0: bad chunk")
                                   : absl::OkStatus();
  };
  const absl::StatusOr<double> acc = RunLoop("consistency: BSP", 3, /*overlap=*/false, fail);
  EXPECT_EQ(acc.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pstrain
