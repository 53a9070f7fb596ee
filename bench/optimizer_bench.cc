// Server update loops at memory speed: for 16M, 64M and 256M parameters and
// every optimizer, updates per second and GB/s, next to a STREAM triad
// measured in the same run on the same threads; and the bytes per parameter
// a server holds with each optimizer. Prints one JSON object.
//
//   bazel run -c opt //bench:optimizer_bench -- [--sizes=16,64,256] [--threads=N]
#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/partition.h"
#include "common/process_stats.h"
#include "common/simd.h"
#include "common/thread_pool.h"
#include "server/chunk_memory.h"
#include "server/chunk_store.h"
#include "server/lr_schedule.h"
#include "server/optimizer.h"

ABSL_FLAG(std::string, sizes, "16,64,256", "parameter counts, in Mi (2^20) parameters");
ABSL_FLAG(int, threads, static_cast<int>(std::thread::hardware_concurrency()),
          "update threads (as ps_server --server_threads)");
ABSL_FLAG(double, min_seconds, 0.3, "time each measurement at least this long");
ABSL_FLAG(int, pairs, 5, "interleaved (triad, update) pairs per optimizer and size");

namespace pstrain {
namespace {

const OptimizerType kTypes[] = {SGD,  MOMENTUM, NESTEROV, ADAGRAD,   RMSPROP,
                                ADADELTA, ADAM, ADAMW,    ADAFACTOR, LION};

// Bytes an update must move per parameter: the gradient read, the weight
// and each state array read and written. Adafactor's factored state is
// negligible; it reads the gradient in several passes, counted once.
int CompulsoryBytes(OptimizerType type) {
  switch (type) {
    case SGD:
    case ADAFACTOR:
      return 12;
    case MOMENTUM:
    case NESTEROV:
    case ADAGRAD:
    case RMSPROP:
    case LION:
      return 20;
    default:
      return 28;  // ADADELTA, ADAM, ADAMW
  }
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

double Seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Best time of repeated calls of fn, repeating for at least min_seconds.
template <typename Fn>
double BestTime(Fn fn) {
  const double budget = absl::GetFlag(FLAGS_min_seconds);
  double best = 1e30, total = 0;
  int reps = 0;
  while (total < budget || reps < 3) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    const double t = Seconds(t0, std::chrono::steady_clock::now());
    best = std::min(best, t);
    total += t;
    ++reps;
  }
  return best;
}

PSTRAIN_SIMD_CLONES
void Triad(float* __restrict a, const float* __restrict b, const float* __restrict c, int64_t n,
           float s) {
  for (int64_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
}

OptimizerSpec Spec(OptimizerType type) {
  JobSpec job;
  job.mutable_optimizer()->set_type(type);
  job.mutable_optimizer()->set_weight_decay(1e-4f);
  ApplyJobDefaults(&job);
  return job.optimizer();
}

// A job whose model is one 4096 x 4096 matrix (plus its 4096 bias).
JobSpec MatrixJob(OptimizerType type, Consistency consistency) {
  JobSpec job;
  job.mutable_data()->set_dataset(SYNTHETIC);
  job.mutable_data()->set_synthetic_dim(4096);
  job.mutable_data()->set_synthetic_classes(4096);
  job.mutable_model()->set_input_dim(4096);
  LayerSpec* dense = job.mutable_model()->add_layers();
  dense->set_type(DENSE);
  dense->set_units(4096);
  job.mutable_model()->add_layers()->set_type(SOFTMAX_XENT);
  job.mutable_optimizer()->set_type(type);
  job.set_consistency(consistency);
  job.set_num_workers(2);
  job.set_batch_size(64);
  ApplyJobDefaults(&job);
  return job;
}

std::string Json(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.4g", v);
  return buf;
}

// Every optimizer at n parameters next to the triad over the same slab:
// one element of the "sizes" list (`last`: no comma after it). Whether the
// goals held.
bool MeasureSize(int64_t n, ThreadPool& pool, bool last) {
  bool all_pass = true;
  // One buffer laid out as a server's slab (server/chunk_memory.h): the
  // weights, the state (up to 2 arrays of n + kArrayGap) and the gradient,
  // kArrayGap floats apart.
  const SlabLayout layout{0, n, 2 * (n + kArrayGap), n, kArrayGap};
  std::vector<float> slab(layout.floats());
  float* w = slab.data();
  float* state = slab.data() + layout.state_offset();
  float* g = slab.data() + layout.grad_offset();
  const int64_t state_floats = layout.state;
  // First touch on the pool's threads, as the updates will touch them.
  pool.ParallelFor(n, 1 << 16, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      w[i] = 0.01f * static_cast<float>(i % 97);
      g[i] = 1e-3f * static_cast<float>(i % 89) - 0.04f;
      state[i] = state[n + kArrayGap + i] = 0.0f;
    }
  });
  // STREAM triad a = b + s c over three of the slab's arrays.
  float* a = state;
  float* c = state + n + kArrayGap;
  auto triad = [&] {
    return BestTime([&] {
      pool.ParallelFor(n, 1 << 16, [&](int64_t b, int64_t e) {
        Triad(a + b, g + b, c + b, e - b, 0.5f);
      });
    });
  };
  const double triad_gbs = 12.0 * n / triad() / 1e9;
  std::printf("    {\"params\": %lld, \"triad_gb_per_s\": %s, \"optimizers\": [\n",
              static_cast<long long>(n), Json(triad_gbs).c_str());
  for (size_t k = 0; k < std::size(kTypes); ++k) {
    const OptimizerType type = kTypes[k];
    auto opt = MakeOptimizer(Spec(type)).value();
    // Adafactor sees the parameters as a matrix of 4096 columns.
    const ChunkShape shape = type == ADAFACTOR ? ChunkShape{n / 4096, 4096} : ChunkShape{1, n};
    std::fill(state, state + state_floats, 0.0f);
    int64_t step = 0;
    // Ceiling and update interleaved: the median of the paired ratios.
    std::vector<double> update_s, ratios;
    for (int r = 0; r < absl::GetFlag(FLAGS_pairs); ++r) {
      const double triad_s = triad();
      update_s.push_back(BestTime([&] {
        UpdateContext ctx;
        ctx.step = ++step;
        ctx.lr = 1e-4f;
        opt->Update(ctx, shape, w, state, g, &pool);
      }));
      ratios.push_back((CompulsoryBytes(type) * n / update_s.back()) / (12.0 * n / triad_s));
    }
    const double t = Median(update_s);
    const double gbs = CompulsoryBytes(type) * static_cast<double>(n) / t / 1e9;
    const double fraction = Median(ratios);
    std::printf(
        "      {\"optimizer\": \"%s\", \"updates_per_s\": %s, \"bytes_per_update\": %d, "
        "\"gb_per_s\": %s, \"fraction_of_triad\": %s, \"fraction_range\": [%s, %s]",
        OptimizerType_Name(type).c_str(), Json(n / t).c_str(), CompulsoryBytes(type),
        Json(gbs).c_str(), Json(fraction).c_str(),
        Json(*std::min_element(ratios.begin(), ratios.end())).c_str(),
        Json(*std::max_element(ratios.begin(), ratios.end())).c_str());
    if (type == ADAM || type == ADAMW || type == MOMENTUM) {
      // The goal counts 28 bytes per parameter for Adam(W) and 16 for
      // momentum: at least 0.8 of the triad.
      const double goal = fraction * (type == MOMENTUM ? 16.0 : 28.0) / CompulsoryBytes(type);
      const bool pass = goal >= 0.8;
      all_pass = all_pass && pass;
      std::printf(", \"goal_bytes\": %d, \"goal_fraction\": %s, \"goal_pass\": %s",
                  type == MOMENTUM ? 16 : 28, Json(goal).c_str(), pass ? "true" : "false");
    }
    std::printf("}%s\n", k + 1 < std::size(kTypes) ? "," : "");
  }
  std::printf("    ]}%s\n", last ? "" : ",");
  return all_pass;
}

int Run() {
  // Every buffer of 64 KiB or more gets its own mapping, returned on free, so
  // that resident-memory growth measures what a store holds.
  mallopt(M_MMAP_THRESHOLD, 64 * 1024);
  std::vector<int64_t> sizes;
  for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_sizes), ',')) {
    int64_t m;
    if (!absl::SimpleAtoi(part, &m) || m < 1) {
      std::fprintf(stderr, "optimizer_bench: bad --sizes entry '%s'\n", std::string(part).c_str());
      return 2;
    }
    sizes.push_back(m << 20);
  }
  ThreadPool pool(absl::GetFlag(FLAGS_threads));
  std::printf("{\n  \"bench\": \"optimizer_bench\",\n  \"simd\": \"%s\",\n  \"threads\": %d,\n",
              SimdLevel(), pool.parallelism());
  std::printf("  \"sizes\": [\n");
  bool all_pass = true;
  for (size_t si = 0; si < sizes.size(); ++si) {
    all_pass = MeasureSize(sizes[si], pool, si + 1 == sizes.size()) && all_pass;
  }
  std::printf("  ],\n");

  // Bytes per parameter a server holds: its own accounting (as Status
  // reports it) and the growth of its resident memory, for a 4096 x 4096
  // matrix with each optimizer, under BSP (with the round's gradient sum)
  // and ASP.
  std::printf("  \"server_bytes_per_param_4096x4096\": [\n");
  bool mem_pass = true;
  for (size_t k = 0; k < std::size(kTypes); ++k) {
    std::printf("    {\"optimizer\": \"%s\"", OptimizerType_Name(kTypes[k]).c_str());
    for (Consistency mode : {BSP, ASP}) {
      const JobSpec job = MatrixJob(kTypes[k], mode);
      const Partition partition =
          Partition::Make(ModelParams(job.model()), job.chunk_bytes(), 1).value();
      const int64_t rss0 = ResidentBytes();
      double held, rss;
      {
        ChunkStore store(job, partition, 0, MakeOptimizer(job.optimizer()).value(), &pool, nullptr);
        held = static_cast<double>(store.BytesHeld()) / store.NumParams();
        rss = static_cast<double>(ResidentBytes() - rss0) / store.NumParams();
      }
      const char* name = mode == BSP ? "bsp" : "asp";
      std::printf(", \"%s_held\": %s, \"%s_rss_growth\": %s", name, Json(held).c_str(), name,
                  Json(rss).c_str());
      if (kTypes[k] == ADAM) mem_pass = mem_pass && held <= 16.0;
      if (kTypes[k] == ADAFACTOR && mode == ASP) mem_pass = mem_pass && held <= 8.0;
    }
    std::printf("}%s\n", k + 1 < std::size(kTypes) ? "," : "");
  }
  std::printf("  ],\n  \"update_goal_pass\": %s,\n  \"memory_goal_pass\": %s\n}\n",
              all_pass ? "true" : "false", mem_pass ? "true" : "false");
  return 0;
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  pstrain::LogToStderr();
  absl::ParseCommandLine(argc, argv);
  return pstrain::Run();
}
