// Pipeline stages in threads, linked by in-process queues, train a clock as
// the whole model does: the same gradients (within 1e-5), under GPipe and
// 1F1B, with the activations each schedule promises to keep.
#include "worker/stage_runner.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/job_spec.h"
#include "common/params.h"
#include "common/stage_plan.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "worker/models/test_models.h"
#include "worker/testing/local_channel.h"

namespace pstrain {
namespace {

using testing::Buffers;

JobSpec Gpt() { return testing::TinyGpt(3); }

struct PipelineRun {
  Buffers grads;                   // every parameter, in model order
  std::vector<StageClock> stages;  // per stage
};

PipelineRun RunPipeline(const JobSpec& job, const Batch& batch, int stages, int micro,
                        PipelineSchedule schedule) {
  const std::vector<Stage> plan = *PlanStages(job.model(), stages);
  const Buffers all = testing::NoisyWeights(job.model());
  std::vector<LocalQueue> forward(stages), backward(stages);
  std::vector<std::unique_ptr<LocalEnd>> ends;
  PipelineRun run;
  run.stages.resize(stages);
  std::vector<Buffers> grads(stages);
  std::vector<std::thread> threads;
  for (int s = 0; s < stages; ++s) {
    // Link s joins stage s and s + 1: forward[s] carries activations,
    // backward[s] their gradients.
    LocalEnd* before =
        s == 0 ? nullptr : ends.emplace_back(new LocalEnd(&backward[s - 1], &forward[s - 1])).get();
    LocalEnd* after = s + 1 == stages
                          ? nullptr
                          : ends.emplace_back(new LocalEnd(&forward[s], &backward[s])).get();
    threads.emplace_back([&, s, before, after] {
      auto backend = kernels::MakeCpuBackend(1);
      std::unique_ptr<Model> model = MakeStageModel(job.model(), plan[s], backend.get());
      std::copy(all.begin() + plan[s].first_param, all.begin() + plan[s].end_param,
                model->weights().begin());
      StageRunner runner(model.get(), schedule, s, stages, before, after);
      absl::StatusOr<StageClock> clock = runner.RunClock(0, batch, micro, &grads[s]);
      EXPECT_TRUE(clock.ok()) << clock.status();
      if (clock.ok()) run.stages[s] = *clock;
    });
  }
  for (std::thread& t : threads) t.join();
  for (const Buffers& g : grads) run.grads.insert(run.grads.end(), g.begin(), g.end());
  return run;
}

TEST(StageRunnerTest, PipelinedStagesGiveTheWholeModelsGradients) {
  const JobSpec job = Gpt();
  ASSERT_TRUE(ValidateJobSpec(job).ok());
  const Batch batch = testing::RandomTokens(8, job.model().gpt().context());
  auto backend = kernels::MakeCpuBackend(1);
  std::unique_ptr<Model> whole = MakeModel(job.model(), backend.get());
  whole->weights() = testing::NoisyWeights(job.model());
  absl::StatusOr<StepResult> reference = whole->TrainStep(batch);
  ASSERT_TRUE(reference.ok());
  for (PipelineSchedule schedule : {GPIPE, ONE_F_ONE_B}) {
    for (int stages : {2, 3}) {
      for (int micro : {1, 2, 4}) {
        const PipelineRun run = RunPipeline(job, batch, stages, micro, schedule);
        ASSERT_EQ(run.grads.size(), whole->grads().size());
        const double diff = testing::MaxRelativeDifference(whole->grads(), run.grads);
        EXPECT_LE(diff, 1e-5) << schedule << " P=" << stages << " M=" << micro;
        EXPECT_NEAR(run.stages.back().result.loss, reference->loss, 1e-5 * reference->loss);
        for (int s = 0; s < stages; ++s) {
          const int promised = schedule == GPIPE ? micro : std::min(micro, stages - s);
          EXPECT_EQ(run.stages[s].max_in_flight, promised) << "stage " << s;
          // 8 sequences x 5 tokens x width 8, fp32, each way per link.
          const int64_t link = 8 * 5 * 8 * 4;
          EXPECT_EQ(run.stages[s].activation_bytes_sent, s + 1 < stages ? link : 0);
          EXPECT_EQ(run.stages[s].gradient_bytes_sent, s > 0 ? link : 0);
        }
      }
    }
  }
}

TEST(StageRunnerTest, ATensorOfAnotherMicroBatchOrABrokenLinkEndsTheClockWithAnError) {
  const JobSpec job = Gpt();
  const std::vector<Stage> plan = *PlanStages(job.model(), 2);
  auto backend = kernels::MakeCpuBackend(1);
  std::unique_ptr<Model> model = MakeStageModel(job.model(), plan[1], backend.get());
  const Batch batch = testing::RandomTokens(4, job.model().gpt().context());
  LocalQueue in, out;
  LocalEnd before(&out, &in);
  StageRunner runner(model.get(), ONE_F_ONE_B, 1, 2, &before, nullptr);
  Buffers grads;
  in.Put(StageTensor{0, 1, std::vector<float>(2 * 5 * 8, 0.0f)});  // micro 1 first
  absl::StatusOr<StageClock> r = runner.RunClock(0, batch, 2, &grads);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  in.Close();  // the stage before went away: an error, not a hang
  r = runner.RunClock(1, batch, 2, &grads);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
}

}  // namespace
}  // namespace pstrain
