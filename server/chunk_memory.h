// Where the arrays of a server's chunks live: one slab per chunk holding its
// fp32 master weights, its optimizer state and (BSP) the gradient sum of
// the round being collected.
//
// In memory (the default) every slab is allocated once and stays. Offloaded
// (ps_server --offload_dir --memory_budget) the slabs live in one file per
// server, DIR/server<id>.slabs, and at most `budget` bytes of them are in
// this process's memory at once: a chunk in use is pinned (read from the
// file if it is not resident), and room is made by writing the least
// recently used unpinned slab back (when it changed) and dropping it.
// Background threads read ahead the chunks expected next while the current
// one is updated, and write-behind threads write the least recently used
// changed slabs back while memory is tight, so that room is made by
// dropping a clean slab, not by a write the pinning thread waits for. All
// go through one IoQueue: several slabs in flight each way, reads and
// writes overlapping on the device. Slabs are mapped in transparent huge
// pages where the kernel gives them (see MapZeroed in chunk_memory.cc). Reads and writes are
// explicit (pread/pwrite into anonymous mappings): the budget is then exact and ours, and the file
// is written only when memory is tight.
//
// Thread-safe. One thread pins one slab at a time (so waiting for room
// cannot deadlock while the budget holds the largest slab).
#ifndef PSTRAIN_SERVER_CHUNK_MEMORY_H_
#define PSTRAIN_SERVER_CHUNK_MEMORY_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/io_queue.h"

namespace pstrain {

// What a chunk's slab holds, in floats: the weights, the optimizer state
// and the round's sum, `gap` floats apart (see kArrayGap in
// server/optimizer.h: arrays at the same address modulo 4 KiB slow the
// update down).
struct SlabLayout {
  int32_t chunk = 0;
  int64_t weights = 0;
  int64_t state = 0;
  int64_t grad = 0;
  int64_t gap = 0;
  int64_t state_offset() const { return weights + gap; }
  int64_t grad_offset() const { return state_offset() + state + 2 * gap; }
  int64_t floats() const { return grad_offset() + grad; }
};

struct OffloadOptions {
  std::string dir;     // empty: in memory
  int64_t budget = 0;  // bytes of slabs resident at once
  int server_id = 0;
  // The slab file read and written with O_DIRECT: to and from the device,
  // not through the page cache (whose memory would lie outside the budget).
  // Where a page cannot be written and read back that way, the file is used
  // through the page cache instead (ChunkMemoryStats.direct says which; on
  // tmpfs, which accepts O_DIRECT since Linux 6.6, the file is memory either
  // way).
  bool direct = true;
  // Requests in flight to the file and their largest size (see io_queue.h).
  IoQueueOptions io;
  // In memory: the chunks whose slabs' pages are faulted in when made (as
  // those a shard made ahead of a move's switch takes by handover are:
  // server/placed_shard.h), not at the first write; null: none. Offloaded
  // stores ignore it.
  std::function<bool(int32_t chunk)> fault_in;
};

// Measured by ChunkMemory, for Status.
struct ChunkMemoryStats {
  bool offloaded = false;
  bool direct = false;         // the slab file is read and written with O_DIRECT
  int64_t resident_bytes = 0;  // slabs in memory now
  int64_t disk_bytes = 0;      // the slab file's size
  int64_t read_bytes = 0, write_bytes = 0;
  // Time spent in them, summed over transfers (which overlap: the sums can
  // exceed the wall time).
  double read_s = 0, write_s = 0;
};

class ChunkMemory {
 public:
  // In memory, or offloaded as `options` says: the slab file is made under
  // a temporary name with its whole size allocated and renamed into place;
  // an error (the directory missing, not writable, too small) leaves
  // nothing behind. INVALID_ARGUMENT for a budget below the largest slab
  // (the message gives the minimum).
  static absl::StatusOr<std::unique_ptr<ChunkMemory>> Make(const std::vector<SlabLayout>& slabs,
                                                           const OffloadOptions& options);
  ~ChunkMemory();
  // The bytes a slab of `layout` takes in memory (whole pages).
  static int64_t SlabBytes(const SlabLayout& layout);

  // A chunk's slab, resident while this lives (move-only).
  class Slab {
   public:
    Slab() = default;
    Slab(Slab&& other) noexcept { *this = std::move(other); }
    Slab& operator=(Slab&& other) noexcept;
    ~Slab();
    float* weights() const { return data_; }
    float* state() const { return data_ + layout_->state_offset(); }
    float* grad() const { return data_ + layout_->grad_offset(); }
    // It changed: written back to the file before it leaves memory.
    void MarkWritten() const;

   private:
    friend class ChunkMemory;
    ChunkMemory* owner_ = nullptr;
    int index_ = -1;
    const SlabLayout* layout_ = nullptr;
    float* data_ = nullptr;
  };

  // In memory, both: exchanges chunk `chunk`'s slab with `other`'s of the
  // same size (a move's switch gives a kept chunk's state to the store
  // placed anew without copying it). False, nothing changed, otherwise.
  // The caller keeps every user of the chunk out of both while it runs
  // (the stores' chunk locks: in memory, Pin takes no lock).
  bool Swap(int32_t chunk, ChunkMemory& other);
  // Pins chunk `chunk`'s slab, reading it from the file if it is not
  // resident (and writing others back to make room). An I/O error is
  // returned here and by every later call (see health()).
  absl::StatusOr<Slab> Pin(int32_t chunk);
  // Offloaded: reads `chunk` and the kReadAhead - 1 slabs after it in the
  // file ahead in the background, into room that is free or can be had by
  // dropping clean slabs (the write-behind thread makes such room).
  void Prefetch(int32_t chunk);
  // Slabs read ahead of the one in use.
  static constexpr int kReadAhead = 6;
  // Threads reading ahead: as many slabs in flight from the file.
  static constexpr int kReaders = 2;
  // Threads writing behind: as many changed slabs in flight to the file.
  static constexpr int kWriters = 2;
  // The first I/O error (the store cannot go on), or OK.
  absl::Status health() const;
  ChunkMemoryStats stats() const;
  bool offloaded() const { return offloaded_; }

 private:
  enum class Where { kFile, kLoading, kResident, kWriting };
  struct Entry {
    SlabLayout layout;
    int64_t bytes = 0;   // of its mapping (whole pages)
    int64_t offset = 0;  // in the file
    Where where = Where::kFile;
    int pins = 0;
    bool dirty = false;
    bool on_disk = false;  // written back once (else its file bytes are zeros)
    uint64_t last_use = 0;
    // Read ahead, not yet pinned, and still among the guesses: its room is
    // not taken for other slabs. Set only on a resident entry inside
    // [window_begin_, window_end_); cleared by Pin, by the window moving
    // past it, or by MakeRoom when nothing else can give way.
    bool ahead = false;
    int waiters = 0;  // Pin calls waiting while it is kLoading/kWriting: not dropped either
    float* data = nullptr;
  };

  ChunkMemory(const std::vector<SlabLayout>& slabs, const OffloadOptions& options);
  absl::Status CreateFile();
  void Unpin(int index);
  // The handle of entry `index` (pinned already, or in memory).
  Slab MakeSlab(int index);
  // Room for `target` within the budget: drops clean unpinned slabs,
  // least recently used first; when there are too few, writes the oldest
  // changed one back (or waits for the write-behind's write), then lets
  // slabs read ahead go, and waits while too many are pinned. Releases mu_
  // around writes.
  // Returns early once `target` is no longer in the file (read meanwhile).
  absl::Status MakeRoom(const Entry& target) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The least recently used changed, unpinned, resident slab (or null).
  Entry* OldestDirty() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The least recently read unpinned slab read ahead (or null).
  Entry* OldestGuess() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reads entry `e` (reserved, kLoading) from the file, releasing mu_.
  absl::Status Load(Entry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Turns O_DIRECT on for the slab file when a page written and read back
  // with it works; false (and the page cache) otherwise.
  bool TryDirect();
  // Bytes a read or write of `e`'s slab moves.
  int64_t IoBytes(const Entry& e) const;
  // A mapping of `bytes` for a slab (all zeros if `zeroed`): a spare one of
  // that size, or a new one once spares are unmapped to keep within the
  // budget (null: none).
  float* TakeMapping(int64_t bytes, bool zeroed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReadAhead();
  // Drops droppable slabs, least recently used first, until `bytes`
  // more fit the budget; false (nothing dropped) if they cannot.
  bool DropCleanFor(int64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A resident slab whose room can be had at once: clean, unpinned, not a
  // guess read ahead, not awaited by a Pin.
  static bool Droppable(const Entry& e);
  // The budget not in use plus the droppable slabs' bytes.
  int64_t FreeOrCleanBytes() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes changed slabs back, least recently used first, while less than
  // clean_reserve_ of the budget is free or clean and unpinned.
  void WriteBehind();
  // The least recently used changed, unpinned, resident slab, if memory is
  // tight enough to write it back now (else null).
  Entry* WriteBehindCandidate() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes resident entry `e` back to the file (state kWriting meanwhile:
  // Pin waits), releasing mu_; leaves it resident, and clean unless the
  // write failed (then health_ has the error).
  absl::Status WriteBack(Entry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const OffloadOptions options_;
  const bool offloaded_;
  std::string path_;
  int fd_ = -1;
  bool direct_ = false;  // fd_ has O_DIRECT: whole pages move
  int64_t file_bytes_ = 0;
  int64_t clean_reserve_ = 0;  // bytes kept free or clean (WriteBehind)
  std::unique_ptr<IoQueue> queue_;
  std::vector<Entry> entries_;
  std::unordered_map<int32_t, int> index_;

  mutable absl::Mutex mu_;
  int64_t resident_ ABSL_GUARDED_BY(mu_) = 0;  // bytes of kLoading/kResident/kWriting
  // Mappings of slabs that left, kept for the next of their size (their
  // pages need no fault and no zeroing again); resident_ + their bytes stay
  // within the budget.
  std::vector<std::pair<int64_t, float*>> spare_ ABSL_GUARDED_BY(mu_);
  int64_t spare_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t tick_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status health_ ABSL_GUARDED_BY(mu_);
  ChunkMemoryStats io_ ABSL_GUARDED_BY(mu_);
  std::deque<int> ahead_ ABSL_GUARDED_BY(mu_);  // chunks to read ahead
  // The entries the last Prefetch guessed, [window_begin_, window_end_).
  int window_begin_ ABSL_GUARDED_BY(mu_) = 0;
  int window_end_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool write_behind_wanted_ ABSL_GUARDED_BY(mu_) = false;  // a slab was unpinned or loaded
  int writing_behind_ ABSL_GUARDED_BY(mu_) = 0;            // writes of the write-behind in flight
  std::vector<std::thread> readers_;                       // kReaders of them
  std::vector<std::thread> writers_;                       // kWriters of them
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_CHUNK_MEMORY_H_
