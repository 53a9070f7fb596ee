// A server's Adam updates with its chunk state offloaded (ps_server
// --offload_dir --memory_budget), next to the same updates in memory and
// next to the disk's sequential read+write bandwidth, measured by this
// binary in the same run, interleaved: each round times the disk ceiling
// (the faster of writing then reading a file of the state's size and
// writing it while reading it, in slab-sized blocks), one offloaded clock
// and one in-memory clock. A clock is one push of every
// chunk by the one worker of an ASP job: each chunk's slab (weights and
// Adam's two moments, 12 bytes a parameter) is read from the file, updated
// and written back. Reported: medians over rounds and of the paired ratios
// offloaded/ceiling (bytes moved per second) and offloaded/in-memory
// (updates per second); the offloaded store's peak anonymous memory
// (RssAnon) above the process's before it, against the budget; and whether
// the two stores end with bit-identical weights. Prints one JSON object.
// The store's file and the ceiling's are both read and written with
// O_DIRECT (--direct, the default), so both measure the device and not the
// page cache (with --nodirect both go through the page cache, which on a
// machine with memory to spare is memory bandwidth), and both through an
// IoQueue of the same depth and request size (--io_depth, --request_kb),
// from memory of the same kind (huge pages where the kernel gives them): the
// ceiling moves slab-sized transfers, two in flight each way so the queue
// never drains; the store reads ahead and writes behind while it updates
// (ChunkMemory::kReaders and kWriters transfers in flight). Logs go to stderr; stdout is the JSON
// alone.
//
//   bazel run -c opt //bench:offload_bench -- [--state_mb=2048]
//       [--budget_mb=512] [--rounds=3] [--dir=/var/tmp] [--nodirect]
//       [--io_depth=8] [--request_kb=4096]
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/partition.h"
#include "server/chunk_memory.h"
#include "server/chunk_store.h"
#include "server/io_queue.h"
#include "server/optimizer.h"

ABSL_FLAG(int64_t, state_mb, 2048, "the server's chunk state (weights + Adam moments), MB");
ABSL_FLAG(int64_t, budget_mb, 512, "--memory_budget of the offloaded store, MB");
ABSL_FLAG(int, rounds, 3, "interleaved rounds (ceiling, offloaded clock, in-memory clock)");
ABSL_FLAG(std::string, dir, "/var/tmp", "the offload directory (and the ceiling's file)");
ABSL_FLAG(int, io_depth, 8, "requests in flight to the file, for the store and the ceiling alike");
ABSL_FLAG(int64_t, request_kb, 4096,
          "the largest request, KiB, for the store and the ceiling alike");
ABSL_FLAG(bool, direct, true,
          "O_DIRECT for the store's file and the ceiling's (the device); --nodirect: both "
          "through the page cache");

namespace pstrain {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

IoQueueOptions IoOptions() {
  return IoQueueOptions{absl::GetFlag(FLAGS_io_depth), absl::GetFlag(FLAGS_request_kb) << 10};
}

int64_t RssAnon() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("RssAnon:", 0) == 0) return std::stoll(line.substr(8)) * 1024;
  }
  return 0;
}

// One dense layer of `params` weights (a vector model), Adam, ASP, one worker,
// in 16 MiB chunks.
JobSpec Job(int64_t params) {
  JobSpec job;
  job.mutable_data()->set_dataset(SYNTHETIC);
  job.mutable_data()->set_synthetic_dim(static_cast<int>(params / 16));
  job.mutable_data()->set_synthetic_classes(16);
  job.mutable_model()->set_input_dim(static_cast<int>(params / 16));
  LayerSpec* dense = job.mutable_model()->add_layers();
  dense->set_type(DENSE);
  dense->set_units(16);
  job.mutable_model()->add_layers()->set_type(SOFTMAX_XENT);
  job.mutable_optimizer()->set_type(ADAM);
  job.set_consistency(ASP);
  job.set_num_workers(1);
  job.set_num_servers(1);
  job.set_batch_size(8);
  job.set_chunk_bytes(16 << 20);
  ApplyJobDefaults(&job);
  return job;
}

// One clock: every chunk pushed once (the gradient: the first values of `g`).
void PushAll(ChunkStore& store, int64_t clock, const std::vector<float>& g) {
  for (int32_t chunk : store.chunk_ids()) {
    const int64_t n = store.ChunkNumel(chunk);
    const absl::Status st = store.Push(0, clock, 8, chunk, absl::MakeConstSpan(g.data(), n));
    if (!st.ok()) {
      std::fprintf(stderr, "offload_bench: push failed: %s\n", std::string(st.message()).c_str());
      std::exit(1);
    }
  }
}

// The disk's write then read of a file of the state's size through an
// IoQueue of the store's depth and request size, in slab-sized transfers
// (with O_DIRECT, the device's; without, the page cache's), two transfers
// in flight so that the queue stays full between them: made and written
// once (as the store's file is allocated at its start), then rewritten and
// read back in place each round.
class DiskCeiling {
 public:
  static constexpr int kInFlight = 2;
  DiskCeiling(const std::string& dir, int64_t bytes, int64_t block, bool direct)
      : path_(dir + "/offload_bench.ceiling"), bytes_(bytes), block_(block), queue_(IoOptions()) {
    fd_ = open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | (direct ? O_DIRECT : 0),
               0600);
    for (int t = 0; t < kInFlight; ++t) {
      bufs_[t] = Map(block);
      read_bufs_[t] = Map(block);
      // Bytes that do not compress, like the slabs' floats: a disk that
      // compresses or deduplicates (a virtual disk's host may) would move
      // a constant buffer at many times its speed.
      std::mt19937_64 rng(static_cast<uint64_t>(block) + t);
      for (int64_t i = 0; i < block / 8; ++i) reinterpret_cast<uint64_t*>(bufs_[t])[i] = rng();
    }
    if (fd_ < 0 || posix_fallocate(fd_, 0, bytes) != 0) Fail(path_.c_str());
    Pass(/*write=*/true);
  }
  ~DiskCeiling() {
    close(fd_);
    unlink(path_.c_str());
    for (char* buf : bufs_) munmap(buf, static_cast<size_t>(block_));
    for (char* buf : read_bufs_) munmap(buf, static_cast<size_t>(block_));
  }
  // Seconds to write the file and read it back.
  double Time() {
    const Clock::time_point t0 = Clock::now();
    Pass(true);
    Pass(false);
    return Since(t0);
  }
  // Seconds to write the file while reading it (the tier's mix): writes
  // go through the blocks in order, reads half a file ahead, kInFlight
  // transfers each way.
  double TimeMixed() {
    const Clock::time_point t0 = Clock::now();
    const int64_t blocks = (bytes_ + block_ - 1) / block_;
    std::vector<std::thread> threads;
    for (int t = 0; t < 2 * kInFlight; ++t) {
      const bool write = t < kInFlight;
      threads.emplace_back([this, t, write, blocks] {
        for (int64_t b = t % kInFlight; b < blocks; b += kInFlight) {
          const int64_t off = (write ? b : (b + blocks / 2) % blocks) * block_;
          const int64_t n = std::min(block_, bytes_ - off);
          Check(write ? queue_.Write(fd_, bufs_[t % kInFlight], n, off, path_)
                      : queue_.Read(fd_, read_bufs_[t % kInFlight], n, off, path_));
        }
      });
    }
    for (std::thread& t : threads) t.join();
    return Since(t0);
  }

 private:
  static void Fail(const char* what) {
    std::perror(what);
    std::exit(1);
  }
  // Page-aligned, as O_DIRECT needs, in huge pages where the kernel gives
  // them: the memory the store's slabs are (chunk_memory.cc).
  static char* Map(int64_t bytes) {
    void* p = mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) Fail("mmap");
    (void)madvise(p, static_cast<size_t>(bytes), MADV_HUGEPAGE);
    std::memset(p, 0, static_cast<size_t>(bytes));
    return static_cast<char*>(p);
  }
  static void Check(const absl::Status& st) {
    if (st.ok()) return;
    std::fprintf(stderr, "offload_bench: %s\n", std::string(st.message()).c_str());
    std::exit(1);
  }
  // Transfer i of the file goes through buffer i % kInFlight, by that
  // buffer's thread.
  void Pass(bool write) {
    std::vector<std::thread> threads;
    for (int t = 0; t < kInFlight; ++t) {
      threads.emplace_back([this, write, t] {
        for (int64_t off = t * block_; off < bytes_; off += kInFlight * block_) {
          const int64_t n = std::min(block_, bytes_ - off);
          Check(write ? queue_.Write(fd_, bufs_[t], n, off, path_)
                      : queue_.Read(fd_, bufs_[t], n, off, path_));
        }
      });
    }
    for (std::thread& t : threads) t.join();
  }
  const std::string path_;
  const int64_t bytes_;
  const int64_t block_;
  IoQueue queue_;
  char* bufs_[kInFlight] = {};
  char* read_bufs_[kInFlight] = {};  // the mixed pass reads into these
  int fd_ = -1;
};

bool SameWeights(const ChunkStore& a, const ChunkStore& b) {
  for (int32_t chunk : a.chunk_ids()) {
    std::vector<float> x(a.ChunkNumel(chunk)), y(x.size());
    PulledClocks clocks;
    if (!a.Read(0, 0, 0, chunk, FP32, reinterpret_cast<char*>(x.data()), &clocks).ok() ||
        !b.Read(0, 0, 0, chunk, FP32, reinterpret_cast<char*>(y.data()), &clocks).ok() ||
        std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) != 0) {
      return false;
    }
  }
  return true;
}

// The offloaded store's anonymous memory above the process's before it,
// over its creation and its first two clocks; the store, to go on with.
std::unique_ptr<ChunkStore> OffloadedStore(const JobSpec& job, const Partition& partition,
                                           int64_t budget, const std::vector<float>& g,
                                           int64_t* rss_above) {
  const int64_t rss_before = RssAnon();
  std::atomic<bool> sampling{true};
  std::atomic<int64_t> rss_peak{rss_before};
  std::thread sampler([&] {
    while (sampling) {
      rss_peak = std::max<int64_t>(rss_peak, RssAnon());
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  auto store = std::make_unique<ChunkStore>(
      job, partition, 0, MakeOptimizer(job.optimizer()).value(), nullptr, nullptr,
      OffloadOptions{absl::GetFlag(FLAGS_dir), budget, 0, absl::GetFlag(FLAGS_direct),
                     IoOptions()});
  if (store->health().ok()) {
    for (int64_t c = 0; c < 2; ++c) PushAll(*store, c, g);
  }
  sampling = false;
  sampler.join();
  *rss_above = rss_peak - rss_before;
  return store;
}

struct Rounds {
  // The ceiling a round: the faster of its two passes (phased, mixed).
  std::vector<double> ceiling_s, phased_s, mixed_s, offload_s, memory_s, vs_ceiling, vs_memory;
  double moved = 0;  // bytes read and written by the offloaded store a clock
};

// The interleaved rounds, from clock 2 (both stores have done clocks 0, 1).
Rounds Measure(ChunkStore& offloaded, ChunkStore& memory, int64_t state,
               const std::vector<float>& g) {
  const int64_t slab = static_cast<int64_t>(16 << 20) * 3;  // a chunk's slab
  DiskCeiling ceiling(absl::GetFlag(FLAGS_dir), state, slab, absl::GetFlag(FLAGS_direct));
  Rounds out;
  const ChunkMemoryStats before = offloaded.memory_stats();
  const int rounds = absl::GetFlag(FLAGS_rounds);
  for (int r = 0; r < rounds; ++r) {
    out.phased_s.push_back(ceiling.Time());
    out.mixed_s.push_back(ceiling.TimeMixed());
    out.ceiling_s.push_back(std::min(out.phased_s.back(), out.mixed_s.back()));
    Clock::time_point t0 = Clock::now();
    PushAll(offloaded, 2 + r, g);
    out.offload_s.push_back(Since(t0));
    t0 = Clock::now();
    PushAll(memory, 2 + r, g);
    out.memory_s.push_back(Since(t0));
    // The ceiling and the offloaded clock each move 2 x state bytes.
    out.vs_ceiling.push_back(out.ceiling_s.back() / out.offload_s.back());
    out.vs_memory.push_back(out.memory_s.back() / out.offload_s.back());
  }
  const ChunkMemoryStats after = offloaded.memory_stats();
  out.moved = static_cast<double>(after.read_bytes - before.read_bytes + after.write_bytes -
                                  before.write_bytes) /
              rounds;
  return out;
}

std::string JsonList(const std::vector<double>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) absl::StrAppend(&out, i ? ", " : "", absl::SixDigits(v[i]));
  return out + "]";
}

void Print(int64_t params, int64_t state, int64_t budget, size_t chunks, bool direct,
           const Rounds& m, int64_t rss_above, bool identical) {
  const IoQueueOptions io = IoOptions();
  const int64_t slab = static_cast<int64_t>(16 << 20) * 3;
  std::printf(
      "{\n  \"bench\": \"offload_bench\",\n  \"params\": %lld,\n  \"state_bytes\": %lld,\n"
      "  \"budget_bytes\": %lld,\n  \"chunks\": %zu,\n  \"rounds\": %zu,\n"
      "  \"o_direct\": %s,\n",
      static_cast<long long>(params), static_cast<long long>(state), static_cast<long long>(budget),
      chunks, m.offload_s.size(), direct ? "true" : "false");
  std::printf(
      "  \"ceiling_io\": {\"queue_depth\": %d, \"request_bytes\": %lld, \"transfer_bytes\": "
      "%lld, \"transfers_in_flight\": %d, \"pattern\": \"the faster of: write the file then read "
      "it; write it while reading it\"},\n"
      "  \"offloaded_io\": {\"queue_depth\": %d, \"request_bytes\": %lld, \"transfer_bytes\": "
      "%lld, \"reads_in_flight\": %d, \"writes_in_flight\": %d, \"slabs_read_ahead\": %d, "
      "\"pattern\": \"read ahead, write behind, while updating\"},\n",
      io.depth, static_cast<long long>(io.request_bytes), static_cast<long long>(slab),
      DiskCeiling::kInFlight, io.depth, static_cast<long long>(io.request_bytes),
      static_cast<long long>(slab), ChunkMemory::kReaders, ChunkMemory::kWriters,
      ChunkMemory::kReadAhead);
  std::printf(
      "  \"disk_read_write_gb_per_s\": %.3f,\n  \"offloaded_gb_per_s\": %.3f,\n"
      "  \"offloaded_clock_s\": %.3f,\n  \"in_memory_clock_s\": %.3f,\n"
      "  \"offloaded_updates_per_s\": %.4g,\n  \"in_memory_updates_per_s\": %.4g,\n"
      "  \"bytes_moved_per_clock\": %.4g,\n",
      2.0 * state / Median(m.ceiling_s) / 1e9, m.moved / Median(m.offload_s) / 1e9,
      Median(m.offload_s), Median(m.memory_s), params / Median(m.offload_s),
      params / Median(m.memory_s), m.moved);
  std::printf(
      "  \"per_round\": {\"ceiling_s\": %s, \"ceiling_phased_s\": %s, \"ceiling_mixed_s\": %s, "
      "\"offloaded_s\": %s, \"in_memory_s\": %s, \"offloaded_vs_ceiling\": %s},\n",
      JsonList(m.ceiling_s).c_str(), JsonList(m.phased_s).c_str(), JsonList(m.mixed_s).c_str(),
      JsonList(m.offload_s).c_str(), JsonList(m.memory_s).c_str(), JsonList(m.vs_ceiling).c_str());
  std::printf(
      "  \"offloaded_vs_ceiling\": %.3f,\n  \"offloaded_vs_ceiling_range\": [%.3f, %.3f],\n"
      "  \"offloaded_vs_in_memory\": %.3f,\n  \"goal_vs_ceiling\": 0.7,\n  \"goal_pass\": %s,\n"
      "  \"rss_anon_above_start_bytes\": %lld,\n  \"bit_identical\": %s\n}\n",
      Median(m.vs_ceiling), *std::min_element(m.vs_ceiling.begin(), m.vs_ceiling.end()),
      *std::max_element(m.vs_ceiling.begin(), m.vs_ceiling.end()), Median(m.vs_memory),
      Median(m.vs_ceiling) >= 0.7 ? "true" : "false", static_cast<long long>(rss_above),
      identical ? "true" : "false");
}

int Main() {
  const int64_t state = absl::GetFlag(FLAGS_state_mb) << 20;
  const int64_t budget = absl::GetFlag(FLAGS_budget_mb) << 20;
  const int64_t params = state / 12 / 16 * 16;  // Adam: weights + 2 moments
  const JobSpec job = Job(params);
  const Partition partition =
      Partition::Make(ModelParams(job.model()), job.chunk_bytes(), 1).value();
  std::vector<float> g(16 << 20 >> 2);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1e-3f);
  for (float& v : g) v = normal(rng);
  int64_t rss_above = 0;
  std::unique_ptr<ChunkStore> offloaded = OffloadedStore(job, partition, budget, g, &rss_above);
  if (!offloaded->health().ok()) {
    std::fprintf(stderr, "offload_bench: %s\n", std::string(offloaded->health().message()).c_str());
    return 1;
  }
  ChunkStore memory(job, partition, 0, MakeOptimizer(job.optimizer()).value(), nullptr, nullptr);
  for (int64_t c = 0; c < 2; ++c) PushAll(memory, c, g);
  const Rounds m = Measure(*offloaded, memory, state, g);
  const bool identical = SameWeights(*offloaded, memory);
  Print(params, state, budget, offloaded->chunk_ids().size(), offloaded->memory_stats().direct,
        m, rss_above, identical);
  return identical ? 0 : 1;
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  pstrain::LogToStderr();
  absl::ParseCommandLine(argc, argv);
  return pstrain::Main();
}
