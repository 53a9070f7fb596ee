// Progress: the window ends every log_every clocks, at an epoch's end and
// at the job's end; replica 0 evaluates at an epoch's end but not at the
// job's (the final evaluation is the loop's), and the evaluation is not
// training time.
#include "worker/progress.h"

#include <memory>
#include <vector>

#include "common/job_spec.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"

namespace pstrain {
namespace {

// Epochs of four clocks; every evaluation answers 0.75.
class FourClockEpochs : public DataSource {
 public:
  void NextBatch(int64_t, int, int, Batch*) override {}
  absl::StatusOr<double> Evaluate(Model&) override { return 0.75; }
  int64_t Epoch(int64_t clock) const override { return clock / 4; }
};

class ProgressTest : public ::testing::Test {
 protected:
  ProgressTest() {
    job_ = ParseJobSpecText(
               "data { dataset: SYNTHETIC synthetic_dim: 4 synthetic_classes: 3 "
               "synthetic_train_size: 16 } "
               "model { layers { type: DENSE units: 3 } layers { type: SOFTMAX_XENT } } "
               "batch_size: 4 num_servers: 1 num_workers: 1 log_every: 3",
               "t")
               .value();
    ApplyJobDefaults(&job_);
    model_ = MakeModel(job_.model(), backend_.get());
  }

  // Runs clocks [0, total): the clocks after which a window ended, and
  // those after which the weights were evaluated.
  void Run(int64_t total, bool evaluates, std::vector<int64_t>* windows,
           std::vector<int64_t>* evaluations) {
    LoopStats stats(absl::Now());
    Progress progress(job_, /*logs=*/true, evaluates, &data_, &stats);
    for (int64_t c = 0; c < total; ++c) {
      stats.EndClock(1.0, {}, absl::Now());
      const ProgressNews news = progress.AfterClock(c, total, {}, *model_).value();
      if (news.window.has_value()) windows->push_back(c);
      if (news.accuracy.has_value()) {
        EXPECT_EQ(*news.accuracy, 0.75);
        evaluations->push_back(c);
      }
    }
  }

  JobSpec job_;
  std::unique_ptr<kernels::Backend> backend_ = kernels::MakeCpuBackend(1);
  std::unique_ptr<Model> model_;
  FourClockEpochs data_;
};

TEST_F(ProgressTest, WindowsEndEveryLogEveryClocksAtEpochEndsAndAtTheEnd) {
  ASSERT_EQ(ClocksPerEpoch(job_), 4);
  std::vector<int64_t> windows, evaluations;
  Run(/*total=*/10, /*evaluates=*/true, &windows, &evaluations);
  // log_every 3: after clocks 2, then the epoch's end 3, 6, 7 (epoch), and
  // 9 (the job's end).
  EXPECT_EQ(windows, (std::vector<int64_t>{2, 3, 6, 7, 9}));
  // Epoch ends before the job's end: clocks 3 and 7.
  EXPECT_EQ(evaluations, (std::vector<int64_t>{3, 7}));
}

TEST_F(ProgressTest, TheJobsLastClockIsNotEvaluatedHereNorByOtherReplicas) {
  std::vector<int64_t> windows, evaluations;
  Run(/*total=*/8, /*evaluates=*/true, &windows, &evaluations);
  EXPECT_EQ(evaluations, (std::vector<int64_t>{3}));  // 7 ends the job: the loop evaluates
  windows.clear();
  evaluations.clear();
  Run(8, /*evaluates=*/false, &windows, &evaluations);
  EXPECT_TRUE(evaluations.empty());
}

}  // namespace
}  // namespace pstrain
