// ChunkMemory in memory and offloaded to a file: what is written comes back,
// at most the budget is resident, and bad directories or budgets are clear
// errors that leave nothing behind; in memory, the slabs asked for are
// faulted in when made, and two stores' slabs of a chunk swap.
#include "server/chunk_memory.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

std::string TempDir() {
  std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp",
                                 "/chunk_memory_XXXXXX");
  EXPECT_NE(mkdtemp(dir.data()), nullptr);
  return dir;
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// Slabs of 1000 weights + 2000 state + 1000 round floats (16,000 bytes:
// 4 pages each).
std::vector<SlabLayout> Slabs(int n) {
  std::vector<SlabLayout> out;
  for (int i = 0; i < n; ++i) out.push_back({i, 1000, 2000, 1000});
  return out;
}

void Fill(const ChunkMemory::Slab& s, int chunk) {
  for (int i = 0; i < 4000; ++i) s.weights()[i] = static_cast<float>(chunk * 10000 + i);
}

bool Holds(const ChunkMemory::Slab& s, int chunk) {
  for (int i = 0; i < 4000; ++i) {
    if (s.weights()[i] != static_cast<float>(chunk * 10000 + i)) return false;
  }
  return true;
}

TEST(ChunkMemoryTest, InMemoryEverySlabStays) {
  auto m = ChunkMemory::Make(Slabs(3), {});
  ASSERT_TRUE(m.ok()) << m.status();
  for (int c = 0; c < 3; ++c) {
    absl::StatusOr<ChunkMemory::Slab> s = (*m)->Pin(c);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->state()[0], 0.0f);
    Fill(*s, c);
  }
  for (int c = 0; c < 3; ++c) EXPECT_TRUE(Holds(*(*m)->Pin(c), c));
  const ChunkMemoryStats st = (*m)->stats();
  EXPECT_FALSE(st.offloaded);
  EXPECT_EQ(st.resident_bytes, 3 * 16384);
  EXPECT_EQ(st.read_bytes + st.write_bytes, 0);
}

// How many of the pages of `bytes` at `p` (page-aligned) are resident.
int64_t ResidentPages(const void* p, int64_t bytes) {
  std::vector<unsigned char> pages((bytes + 4095) / 4096);
  if (mincore(const_cast<void*>(p), static_cast<size_t>(bytes), pages.data()) != 0) return -1;
  int64_t n = 0;
  for (unsigned char v : pages) n += v & 1;
  return n;
}

TEST(ChunkMemoryTest, TheSlabsAskedForAreFaultedInWhenMade) {
  OffloadOptions o;
  o.fault_in = [](int32_t chunk) { return chunk == 1; };
  auto m = ChunkMemory::Make(Slabs(2), o);
  ASSERT_TRUE(m.ok()) << m.status();
  const int64_t bytes = ChunkMemory::SlabBytes(Slabs(1)[0]);
  EXPECT_EQ(ResidentPages((*m)->Pin(0)->weights(), bytes), 0);
  EXPECT_EQ(ResidentPages((*m)->Pin(1)->weights(), bytes), bytes / 4096);
  EXPECT_EQ((*m)->Pin(1)->state()[1999], 0.0f);  // zeroed still
}

TEST(ChunkMemoryTest, InMemorySlabsOfTheSameSizeSwap) {
  auto a = ChunkMemory::Make(Slabs(2), {});
  auto b = ChunkMemory::Make(Slabs(3), {});
  ASSERT_TRUE(a.ok() && b.ok());
  Fill(*(*a)->Pin(1), 1);
  float* held = (*a)->Pin(1)->weights();
  EXPECT_TRUE((*b)->Swap(1, **a));
  EXPECT_EQ((*b)->Pin(1)->weights(), held);  // the slab itself, not a copy
  EXPECT_TRUE(Holds(*(*b)->Pin(1), 1));
  EXPECT_EQ((*a)->Pin(1)->weights()[0], 0.0f);  // b's, zeroed
  EXPECT_FALSE((*b)->Swap(2, **a));             // a holds no chunk 2
  EXPECT_FALSE((*b)->Swap(1, **b));
  auto other = ChunkMemory::Make({{1, 10, 0, 0}}, {});
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE((*b)->Swap(1, **other));  // another size
  OffloadOptions o;
  o.dir = TempDir();
  o.budget = 1 << 20;
  auto offloaded = ChunkMemory::Make(Slabs(2), o);
  ASSERT_TRUE(offloaded.ok()) << offloaded.status();
  EXPECT_FALSE((*b)->Swap(1, **offloaded));
  EXPECT_TRUE(Holds(*(*b)->Pin(1), 1));  // nothing changed
}

TEST(ChunkMemoryTest, OffloadedSlabsStayWithinTheBudgetAndComeBack) {
  const std::string dir = TempDir();
  const int64_t budget = 3 * 16384;
  auto m = ChunkMemory::Make(Slabs(8), {dir, budget, 7});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(Exists(dir + "/server7.slabs"));
  EXPECT_FALSE(Exists(dir + "/server7.slabs.tmp"));
  for (int round = 0; round < 2; ++round) {
    for (int c = 0; c < 8; ++c) {
      absl::StatusOr<ChunkMemory::Slab> s = (*m)->Pin(c);
      ASSERT_TRUE(s.ok()) << s.status();
      if (round == 0) {
        Fill(*s, c);
        s->MarkWritten();
      } else {
        EXPECT_TRUE(Holds(*s, c)) << c;
      }
      (*m)->Prefetch(c + 1);
      EXPECT_LE((*m)->stats().resident_bytes, budget);
    }
  }
  // Threads pinning different slabs at once wait for room, never exceed it.
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&m, t] {
      for (int i = 0; i < 50; ++i) {
        const int c = (t * 3 + i) % 8;
        absl::StatusOr<ChunkMemory::Slab> s = (*m)->Pin(c);
        EXPECT_TRUE(s.ok() && Holds(*s, c)) << c;
        EXPECT_LE((*m)->stats().resident_bytes, 3 * 16384);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const ChunkMemoryStats st = (*m)->stats();
  EXPECT_TRUE(st.offloaded);
  EXPECT_EQ(st.disk_bytes, 8 * 16384);
  EXPECT_GE(st.write_bytes, 5 * 16000);  // at least the slabs that left in round 0
  EXPECT_GE(st.read_bytes, 5 * 16000);
  EXPECT_TRUE((*m)->health().ok());
  m->reset();
  EXPECT_FALSE(Exists(dir + "/server7.slabs"));  // scratch, gone with the server
}

TEST(ChunkMemoryTest, ChangesSurviveReadAheadAndWriteBehindUnderConcurrentPins) {
  // A budget of 3 slabs for 16, requests of one page over 3 threads (a slab
  // is 4 requests), wrong guesses mixed with right ones: every change lands.
  const int64_t budget = 3 * 16384;
  auto m = ChunkMemory::Make(Slabs(16), {TempDir(), budget, 0, true, IoQueueOptions{3, 4096}});
  ASSERT_TRUE(m.ok()) << m.status();
  constexpr int kThreads = 4, kPasses = 12;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&m, t, budget] {
      for (int pass = 0; pass < kPasses; ++pass) {
        for (int c = t; c < 16; c += kThreads) {
          (*m)->Prefetch((c + 1 + pass % 3) % 16);
          absl::StatusOr<ChunkMemory::Slab> s = (*m)->Pin(c);
          ASSERT_TRUE(s.ok()) << s.status();
          ASSERT_EQ(s->weights()[0], static_cast<float>(pass)) << c;
          for (int i = 0; i < 4000; ++i) s->weights()[i] += 1.0f;
          s->MarkWritten();
          EXPECT_LE((*m)->stats().resident_bytes, budget);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int c = 0; c < 16; ++c) {
    absl::StatusOr<ChunkMemory::Slab> s = (*m)->Pin(c);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->weights()[3999], static_cast<float>(kPasses)) << c;
  }
  EXPECT_TRUE((*m)->health().ok());
}

TEST(ChunkMemoryTest, SlabsReadAheadGiveWayToTheOneNeededNow) {
  // A budget of two slabs, both taken by guesses read ahead (0 and 1, after
  // 2 and 3 were used last): a Pin of slab 2 does not wait for them to be
  // used, and what it pins is what was written.
  auto m = ChunkMemory::Make(Slabs(4), {TempDir(), 2 * 16384, 0});
  ASSERT_TRUE(m.ok()) << m.status();
  for (int c = 0; c < 4; ++c) {
    absl::StatusOr<ChunkMemory::Slab> s = (*m)->Pin(c);
    ASSERT_TRUE(s.ok());
    Fill(*s, c);
    s->MarkWritten();
  }
  const int64_t read_before = (*m)->stats().read_bytes;
  (*m)->Prefetch(0);                    // guesses 0 and 1: both read, into the room of 2 and 3
  const int64_t two_slabs = 2 * 16000;  // without O_DIRECT, their floats
  for (int i = 0; i < 400 && (*m)->stats().read_bytes < read_before + two_slabs; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_GE((*m)->stats().read_bytes, read_before + two_slabs);
  for (int c : {2, 3, 2, 0}) {
    absl::StatusOr<ChunkMemory::Slab> s = (*m)->Pin(c);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_TRUE(Holds(*s, c)) << c;
  }
}

TEST(ChunkMemoryTest, ABudgetBelowTheLargestSlabSaysTheMinimum) {
  auto m = ChunkMemory::Make(Slabs(2), {TempDir(), 16383, 0});
  ASSERT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("at least 16384"), std::string::npos) << m.status();
}

TEST(ChunkMemoryTest, AMissingOrUnusableDirectoryIsAClearErrorLeavingNothing) {
  const std::string dir = TempDir();
  auto m = ChunkMemory::Make(Slabs(2), {dir + "/missing", 1 << 20, 0});
  EXPECT_EQ(m.status().code(), absl::StatusCode::kNotFound) << m.status();
  EXPECT_NE(m.status().message().find("--offload_dir"), std::string::npos) << m.status();
  // A file where the directory should be.
  const std::string file = dir + "/plain";
  FILE* f = fopen(file.c_str(), "w");
  ASSERT_NE(f, nullptr);
  fclose(f);
  m = ChunkMemory::Make(Slabs(2), {file, 1 << 20, 0});
  EXPECT_FALSE(m.ok());
  EXPECT_FALSE(Exists(file + "/server0.slabs.tmp"));
}

}  // namespace
}  // namespace pstrain
