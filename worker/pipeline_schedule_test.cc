#include "worker/pipeline_schedule.h"

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

// Runs every stage's schedule against the others with forwards of time 1
// and backwards of time 2 (a step starts once its stage is free and its
// input from the neighbour has arrived); each stage's idle fraction of the
// whole time. Fails the test on a deadlock.
std::vector<double> IdleFractions(PipelineSchedule schedule, int stages, int micro) {
  std::vector<std::vector<PipeStep>> steps;
  for (int s = 0; s < stages; ++s) steps.push_back(StageSchedule(schedule, s, stages, micro));
  std::map<std::pair<int, int>, double> fwd_done, bwd_done;  // (stage, micro) -> time
  std::vector<size_t> next(stages, 0);
  std::vector<double> free_at(stages, 0), busy(stages, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < stages; ++s) {
      while (next[s] < steps[s].size()) {
        const PipeStep& step = steps[s][next[s]];
        const bool fwd = step.op == PipeStep::kForward;
        double ready = 0;
        if (fwd && s > 0) {
          auto it = fwd_done.find({s - 1, step.micro});
          if (it == fwd_done.end()) break;
          ready = it->second;
        }
        if (!fwd && s + 1 < stages) {
          auto it = bwd_done.find({s + 1, step.micro});
          if (it == bwd_done.end()) break;
          ready = it->second;
        }
        const double cost = fwd ? 1 : 2;
        free_at[s] = std::max(free_at[s], ready) + cost;
        busy[s] += cost;
        (fwd ? fwd_done : bwd_done)[{s, step.micro}] = free_at[s];
        ++next[s];
        progress = true;
      }
    }
  }
  for (int s = 0; s < stages; ++s) EXPECT_EQ(next[s], steps[s].size()) << "deadlock at stage " << s;
  const double end = *std::max_element(free_at.begin(), free_at.end());
  std::vector<double> idle;
  for (int s = 0; s < stages; ++s) idle.push_back(1.0 - busy[s] / end);
  return idle;
}

TEST(PipelineScheduleTest, EveryMicroBatchRunsForwardThenBackwardOnce) {
  for (PipelineSchedule schedule : {GPIPE, ONE_F_ONE_B}) {
    for (int stages = 1; stages <= 5; ++stages) {
      for (int micro = 1; micro <= 9; ++micro) {
        for (int s = 0; s < stages; ++s) {
          const std::vector<PipeStep> steps = StageSchedule(schedule, s, stages, micro);
          ASSERT_EQ(steps.size(), 2u * micro);
          for (int m = 0; m < micro; ++m) {
            auto f = std::find(steps.begin(), steps.end(), PipeStep{PipeStep::kForward, m});
            auto b = std::find(steps.begin(), steps.end(), PipeStep{PipeStep::kBackward, m});
            ASSERT_TRUE(f != steps.end() && b != steps.end());
            EXPECT_LT(f - steps.begin(), b - steps.begin());
          }
        }
      }
    }
  }
}

TEST(PipelineScheduleTest, GpipeKeepsEveryMicroBatchAndOneFOneBAtMostTheStagesAfter) {
  for (int stages = 1; stages <= 5; ++stages) {
    for (int micro = 1; micro <= 9; ++micro) {
      for (int s = 0; s < stages; ++s) {
        EXPECT_EQ(MaxInFlight(StageSchedule(GPIPE, s, stages, micro)), micro);
        EXPECT_EQ(MaxInFlight(StageSchedule(ONE_F_ONE_B, s, stages, micro)),
                  std::min(micro, stages - s));
      }
    }
  }
}

TEST(PipelineScheduleTest, OneFOneBAlternatesAfterTheWarmUp) {
  using S = PipeStep;
  const std::vector<PipeStep> first = StageSchedule(ONE_F_ONE_B, 0, 3, 4);
  const std::vector<PipeStep> want = {{S::kForward, 0},  {S::kForward, 1}, {S::kForward, 2},
                                      {S::kBackward, 0}, {S::kForward, 3}, {S::kBackward, 1},
                                      {S::kBackward, 2}, {S::kBackward, 3}};
  EXPECT_EQ(first, want);
}

TEST(PipelineScheduleTest, TheBubbleIsPMinusOneOverMPlusPMinusOne) {
  for (PipelineSchedule schedule : {GPIPE, ONE_F_ONE_B}) {
    for (int stages : {1, 2, 4}) {
      for (int micro : {1, 4, 8}) {
        const double expected = (stages - 1.0) / (micro + stages - 1.0);
        for (double idle : IdleFractions(schedule, stages, micro)) {
          EXPECT_NEAR(idle, expected, 1e-9) << schedule << " P=" << stages << " M=" << micro;
        }
      }
    }
  }
}

}  // namespace
}  // namespace pstrain
