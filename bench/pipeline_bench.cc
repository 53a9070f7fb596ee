// The pipeline schedules measured: P stages in threads over in-process
// links (worker/stage_runner.h), each forward taking a fixed `--forward_ms`
// and each backward twice that (a tiny real model plus a sleep, so that the
// measurement is of the schedule, not of two shared cores). For P in {2, 4},
// M in {1, 4, 8} and both schedules: each stage's idle (bubble) fraction of
// the clock's wall time next to (P-1)/(M+P-1), and the micro-batches whose
// activations it kept next to M (GPipe) and min(M, P - stage) (1F1B).
// Medians over --rounds of the per-clock values; prints JSON.
//
//   bazel run -c opt //bench:pipeline_bench -- --rounds=3
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/stage_plan.h"
#include "kernels/cpu/cpu_backend.h"
#include "worker/models/model.h"
#include "worker/stage_runner.h"
#include "worker/testing/local_channel.h"

ABSL_FLAG(int, rounds, 3, "clocks measured per configuration (the median is reported)");
ABSL_FLAG(double, forward_ms, 4.0, "each micro-batch's forward on a stage; the backward takes 2x");

namespace pstrain {
namespace {

// A stage model whose forward and backward take a fixed time.
class TimedStage : public Model {
 public:
  TimedStage(const ModelSpec& spec, const Stage& stage, kernels::Backend* backend,
             absl::Duration forward)
      : Model(spec, stage, backend),
        inner_(MakeStageModel(spec, stage, backend)),
        forward_(forward) {}
  absl::StatusOr<StepResult> Forward(int stash, const Batch& batch, const std::vector<float>* input,
                                     std::vector<float>* output, bool train) override {
    absl::SleepFor(forward_);
    return inner_->Forward(stash, batch, input, output, train);
  }
  absl::Status Backward(int stash, const std::vector<float>* grad_output,
                        std::vector<float>* grad_input) override {
    absl::SleepFor(2 * forward_);
    return inner_->Backward(stash, grad_output, grad_input);
  }

 private:
  std::unique_ptr<Model> inner_;
  absl::Duration forward_;
};

// An MLP with 4 dense layers: 4 places to cut.
JobSpec FourLayers() {
  JobSpec job;
  job.mutable_data()->set_dataset(SYNTHETIC);
  job.mutable_data()->set_synthetic_dim(8);
  job.mutable_data()->set_synthetic_classes(4);
  for (int i = 0; i < 4; ++i) {
    LayerSpec* l = job.mutable_model()->add_layers();
    l->set_type(DENSE);
    l->set_units(i < 3 ? 8 : 4);
  }
  job.mutable_model()->add_layers()->set_type(SOFTMAX_XENT);
  ApplyJobDefaults(&job);
  return job;
}

// A GPT of 4 blocks (width 64, context 32): its stages' activations weigh.
JobSpec FourBlocks() {
  JobSpec job;
  job.mutable_model()->set_kind(GPT);
  GptSpec* gpt = job.mutable_model()->mutable_gpt();
  gpt->set_layers(4);
  gpt->set_heads(4);
  gpt->set_width(64);
  gpt->set_context(32);
  job.set_clocks(1);
  ApplyJobDefaults(&job);
  return job;
}

struct Measured {
  std::vector<double> idle;   // per stage, of the clock's wall time
  std::vector<int> kept;      // per stage, micro-batches in flight at most
  std::vector<int64_t> peak;  // per stage, the most device memory held
};

// `rows` rows per micro-batch.
Batch MakeBatch(const JobSpec& job, int rows) {
  Batch batch;
  batch.rows = rows;
  if (job.model().kind() == GPT) {
    const int n = rows * job.model().gpt().context();
    for (int i = 0; i < n; ++i) batch.tokens.push_back(i * 7 % 256);
    for (int i = 0; i < n; ++i) batch.labels.push_back(i * 11 % 256);
    return batch;
  }
  batch.x.assign(static_cast<size_t>(rows) * 8, 0.5f);
  for (int i = 0; i < rows; ++i) batch.labels.push_back(i % 4);
  return batch;
}

Measured OneClock(const JobSpec& job, PipelineSchedule schedule, int stages, int micro,
                  absl::Duration forward, int rows_per_micro = 8) {
  const std::vector<Stage> plan = *PlanStages(job.model(), stages);
  const Batch batch = MakeBatch(job, rows_per_micro * micro);
  std::vector<LocalQueue> down(stages), up(stages);
  std::vector<std::unique_ptr<LocalEnd>> ends;
  std::vector<LocalEnd*> before(stages, nullptr), after(stages, nullptr);
  for (int s = 0; s + 1 < stages; ++s) {
    after[s] = ends.emplace_back(new LocalEnd(&down[s], &up[s])).get();
    before[s + 1] = ends.emplace_back(new LocalEnd(&up[s], &down[s])).get();
  }
  std::vector<StageClock> clocks(stages);
  std::vector<int64_t> peak(stages, 0);
  const absl::Time start = absl::Now();
  std::vector<std::thread> threads;
  for (int s = 0; s < stages; ++s) {
    threads.emplace_back([&, s] {
      auto backend = kernels::MakeCpuBackend(1);
      TimedStage model(job.model(), plan[s], backend.get(), forward);
      StageRunner runner(&model, schedule, s, stages, before[s], after[s]);
      std::vector<std::vector<float>> grads;
      absl::StatusOr<StageClock> c = runner.RunClock(0, batch, micro, &grads);
      if (c.ok()) clocks[s] = *c;
      peak[s] = backend->peak_bytes();
    });
  }
  for (std::thread& t : threads) t.join();
  const double wall = absl::ToDoubleSeconds(absl::Now() - start);
  Measured m;
  for (const StageClock& c : clocks) {
    m.idle.push_back(std::max(0.0, 1.0 - c.busy_s / wall));
    m.kept.push_back(c.max_in_flight);
  }
  m.peak = peak;
  return m;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Activation memory: a GPT's 4 stages, 8 micro-batches of 2 sequences. A
// stage's stash (one micro-batch's activations) is its peak with two
// micro-batches kept minus its peak with one; its peak under each schedule
// is set next to base + kept x stash with kept = M (GPipe) or min(M, P - s)
// (1F1B).
void Memory() {
  const JobSpec job = FourBlocks();
  constexpr int kStages = 4, kMicro = 8;
  const Measured one = OneClock(job, GPIPE, kStages, 1, absl::ZeroDuration(), 2);
  const Measured two = OneClock(job, GPIPE, kStages, 2, absl::ZeroDuration(), 2);
  std::printf(
      " \"memory\": {\"model\": \"gpt 4 blocks, width 64, context 32\", "
      "\"micro_batches\": %d, \"rows_per_micro_batch\": 2, \"stages\": [",
      kMicro);
  const Measured gpipe = OneClock(job, GPIPE, kStages, kMicro, absl::ZeroDuration(), 2);
  const Measured onef = OneClock(job, ONE_F_ONE_B, kStages, kMicro, absl::ZeroDuration(), 2);
  for (int s = 0; s < kStages; ++s) {
    const int64_t stash = two.peak[s] - one.peak[s];
    const int64_t base = one.peak[s] - stash;
    const int kept = std::min(kMicro, kStages - s);
    std::printf(
        "%s\n  {\"stage\": %d, \"stash_bytes\": %lld, \"gpipe_peak\": %lld, "
        "\"gpipe_expected\": %lld, \"1f1b_peak\": %lld, \"1f1b_expected\": %lld, "
        "\"1f1b_kept\": %d}",
        s == 0 ? "" : ",", s, static_cast<long long>(stash), static_cast<long long>(gpipe.peak[s]),
        static_cast<long long>(base + kMicro * stash), static_cast<long long>(onef.peak[s]),
        static_cast<long long>(base + kept * stash), kept);
  }
  std::printf("]}");
}

void Run() {
  const JobSpec job = FourLayers();
  const int rounds = std::max(1, absl::GetFlag(FLAGS_rounds));
  std::printf("{\"forward_ms\": %.1f, \"backward_ms\": %.1f, \"rounds\": %d, \"configs\": [",
              absl::GetFlag(FLAGS_forward_ms), 2 * absl::GetFlag(FLAGS_forward_ms), rounds);
  const char* sep = "";
  for (PipelineSchedule schedule : {GPIPE, ONE_F_ONE_B}) {
    for (int stages : {2, 4}) {
      for (int micro : {1, 4, 8}) {
        std::vector<Measured> runs;
        for (int r = 0; r < rounds; ++r) {
          runs.push_back(OneClock(job, schedule, stages, micro,
                                  absl::Milliseconds(absl::GetFlag(FLAGS_forward_ms))));
        }
        const double expected = (stages - 1.0) / (micro + stages - 1.0);
        std::printf(
            "%s\n  {\"schedule\": \"%s\", \"stages\": %d, \"micro_batches\": %d, "
            "\"expected_bubble\": %.4f, \"stages_measured\": [",
            sep, schedule == GPIPE ? "gpipe" : "1f1b", stages, micro, expected);
        for (int s = 0; s < stages; ++s) {
          std::vector<double> idle;
          for (const Measured& m : runs) idle.push_back(m.idle[s]);
          const int promised = schedule == GPIPE ? micro : std::min(micro, stages - s);
          std::printf(
              "%s{\"stage\": %d, \"bubble\": %.4f, \"bubble_min\": %.4f, "
              "\"bubble_max\": %.4f, \"ratio\": %.3f, \"activations_kept\": %d, "
              "\"activations_promised\": %d}",
              s == 0 ? "" : ", ", s, Median(idle), *std::min_element(idle.begin(), idle.end()),
              *std::max_element(idle.begin(), idle.end()),
              expected > 0 ? Median(idle) / expected : 0.0, runs[0].kept[s], promised);
        }
        std::printf("]}");
        sep = ",";
      }
    }
  }
  std::printf("\n],");
  Memory();
  std::printf("}\n");
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  pstrain::LogToStderr();
  absl::ParseCommandLine(argc, argv);
  pstrain::Run();
  return 0;
}
