#include "server/chunk_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/fault_in.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace pstrain {
namespace {

constexpr int64_t kPage = 4096;

int64_t Pages(int64_t bytes) { return (bytes + kPage - 1) / kPage * kPage; }

float* MapZeroed(int64_t bytes) {
  void* p = mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  // Transparent huge pages where the kernel gives them (its default,
  // "madvise", gives them only when asked): a slab is read and written
  // with O_DIRECT, which pins every page of the transfer, and swept by the
  // optimizer; in 2 MiB pages both touch 512 times fewer pages. On the
  // 2-core VM of docs/offloading.md an offloaded clock took 0.85 s with
  // them and 2.0-2.5 s without. A kernel without THP refuses; 4 KiB
  // pages then, as before.
  (void)madvise(p, static_cast<size_t>(bytes), MADV_HUGEPAGE);
  return static_cast<float*>(p);
}

}  // namespace

ChunkMemory::ChunkMemory(const std::vector<SlabLayout>& slabs, const OffloadOptions& options)
    : options_(options), offloaded_(!options.dir.empty()) {
  int64_t offset = 0;
  for (const SlabLayout& s : slabs) {
    Entry e;
    e.layout = s;
    e.bytes = SlabBytes(s);
    e.offset = offset;
    offset += e.bytes;
    index_[s.chunk] = static_cast<int>(entries_.size());
    entries_.push_back(e);
  }
  file_bytes_ = offset;
}

int64_t ChunkMemory::SlabBytes(const SlabLayout& layout) {
  return Pages(layout.floats() * static_cast<int64_t>(sizeof(float)));
}

absl::StatusOr<std::unique_ptr<ChunkMemory>> ChunkMemory::Make(const std::vector<SlabLayout>& slabs,
                                                               const OffloadOptions& options) {
  std::unique_ptr<ChunkMemory> m(new ChunkMemory(slabs, options));
  if (!m->offloaded_) {
    // In memory: every slab now, for good.
    absl::MutexLock lock(&m->mu_);
    for (Entry& e : m->entries_) {
      e.data = MapZeroed(e.bytes);
      if (e.data == nullptr) return ErrnoStatus(errno, "cannot allocate a chunk");
      if (options.fault_in != nullptr && options.fault_in(e.layout.chunk)) {
        FaultIn(e.data, e.bytes);
      }
      e.where = Where::kResident;
      m->resident_ += e.bytes;
    }
    return m;
  }
  int64_t largest = 0;
  for (const Entry& e : m->entries_) largest = std::max(largest, e.bytes);
  if (options.budget < largest) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--memory_budget=", options.budget, " is below this server's largest chunk (weights, ",
        "optimizer state and round sum: ", largest, " bytes); give at least ", largest));
  }
  RETURN_IF_ERROR(m->CreateFile());
  m->queue_ = std::make_unique<IoQueue>(options.io);
  // Room for the slabs read ahead and one more for slack; never more than
  // half the budget (with a budget of one slab, each changed slab is
  // written back as soon as it is unpinned).
  m->clean_reserve_ = std::min((kReadAhead + 1) * largest, options.budget / 2);
  for (int i = 0; i < kReaders; ++i) m->readers_.emplace_back([p = m.get()] { p->ReadAhead(); });
  for (int i = 0; i < kWriters; ++i) m->writers_.emplace_back([p = m.get()] { p->WriteBehind(); });
  return m;
}

absl::Status ChunkMemory::CreateFile() {
  path_ = absl::StrCat(options_.dir, "/server", options_.server_id, ".slabs");
  const std::string tmp = path_ + ".tmp";
  const int fd = open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("--offload_dir: cannot create ", tmp));
  // The whole size now: a disk too small fails here, not mid-job.
  const int err = file_bytes_ > 0 ? posix_fallocate(fd, 0, file_bytes_) : 0;
  if (err != 0 || rename(tmp.c_str(), path_.c_str()) != 0) {
    const int why = err != 0 ? err : errno;
    close(fd);
    unlink(tmp.c_str());
    return ErrnoStatus(why, absl::StrCat("--offload_dir: cannot make ", file_bytes_,
                                         " bytes of chunk state in ", tmp));
  }
  fd_ = fd;
  if (options_.direct) direct_ = TryDirect();
  return absl::OkStatus();
}

bool ChunkMemory::TryDirect() {
  // After the allocation (which may write through the descriptor): a page
  // written and read back with O_DIRECT, else the page cache.
  const int flags = fcntl(fd_, F_GETFL);
  float* page = file_bytes_ >= kPage ? MapZeroed(kPage) : nullptr;
  const bool direct =
      page != nullptr && flags >= 0 && fcntl(fd_, F_SETFL, flags | O_DIRECT) == 0 &&
      pwrite(fd_, page, kPage, 0) == kPage && pread(fd_, page, kPage, 0) == kPage;
  if (page != nullptr) munmap(page, kPage);
  if (!direct) {
    if (flags >= 0) (void)fcntl(fd_, F_SETFL, flags);
    spdlog::warn("--offload_dir {}: O_DIRECT does not work there; the slab file goes through "
                 "the page cache",
                 options_.dir);
  }
  return direct;
}

ChunkMemory::~ChunkMemory() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : readers_) t.join();
  for (std::thread& t : writers_) t.join();
  for (Entry& e : entries_) {
    if (e.data != nullptr) munmap(e.data, static_cast<size_t>(e.bytes));
  }
  for (const auto& [bytes, data] : spare_) munmap(data, static_cast<size_t>(bytes));
  if (fd_ >= 0) {
    close(fd_);
    unlink(path_.c_str());  // scratch: the job's state outlives it only in checkpoints
  }
}

ChunkMemory::Slab& ChunkMemory::Slab::operator=(Slab&& other) noexcept {
  if (this != &other) {
    if (owner_ != nullptr) owner_->Unpin(index_);
    owner_ = std::exchange(other.owner_, nullptr);
    index_ = other.index_;
    layout_ = other.layout_;
    data_ = other.data_;
  }
  return *this;
}

ChunkMemory::Slab::~Slab() {
  if (owner_ != nullptr) owner_->Unpin(index_);
}

void ChunkMemory::Slab::MarkWritten() const {
  if (!owner_->offloaded_) return;  // nothing is ever written back
  absl::MutexLock lock(&owner_->mu_);
  owner_->entries_[index_].dirty = true;
}

void ChunkMemory::Unpin(int index) {
  if (!offloaded_) return;  // see Pin
  absl::MutexLock lock(&mu_);
  --entries_[index].pins;
  write_behind_wanted_ = true;
}

bool ChunkMemory::Swap(int32_t chunk, ChunkMemory& other) {
  if (offloaded_ || other.offloaded_ || &other == this) return false;
  const auto mine = index_.find(chunk), theirs = other.index_.find(chunk);
  if (mine == index_.end() || theirs == other.index_.end()) return false;
  Entry& a = entries_[mine->second];
  Entry& b = other.entries_[theirs->second];
  if (a.bytes != b.bytes || a.data == nullptr || b.data == nullptr) return false;
  absl::MutexLock lock(&mu_);
  absl::MutexLock other_lock(&other.mu_);
  std::swap(a.data, b.data);
  return true;
}

absl::StatusOr<ChunkMemory::Slab> ChunkMemory::Pin(int32_t chunk) {
  const auto it = index_.find(chunk);
  if (it == index_.end()) return absl::InvalidArgumentError(absl::StrCat("no chunk ", chunk));
  Entry& e = entries_[it->second];
  // In memory every slab stays where Make put it (or Swap, under the
  // store's chunk lock): no lock on the push and pull path, no pin to
  // count.
  if (!offloaded_) return MakeSlab(it->second);
  absl::MutexLock lock(&mu_);
  for (;;) {
    if (!health_.ok()) return health_;
    if (e.where == Where::kResident) break;
    if (e.where == Where::kFile) {
      if (resident_ + e.bytes <= options_.budget) {
        RETURN_IF_ERROR(Load(e));
        break;
      }
      RETURN_IF_ERROR(MakeRoom(e));
      continue;
    }
    auto settled = [this, &e]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return e.where == Where::kResident || e.where == Where::kFile || !health_.ok();
    };
    ++e.waiters;
    mu_.Await(absl::Condition(&settled));
    --e.waiters;
  }
  ++e.pins;
  e.ahead = false;
  write_behind_wanted_ = true;  // fewer clean unpinned bytes now
  e.last_use = ++tick_;
  return MakeSlab(it->second);
}

ChunkMemory::Slab ChunkMemory::MakeSlab(int index) {
  Slab s;
  s.owner_ = this;
  s.index_ = index;
  s.layout_ = &entries_[index].layout;
  s.data_ = entries_[index].data;
  return s;
}

ChunkMemory::Entry* ChunkMemory::OldestDirty() {
  Entry* oldest = nullptr;
  for (Entry& e : entries_) {
    if (e.where != Where::kResident || e.pins > 0 || !e.dirty) continue;
    if (oldest == nullptr || e.last_use < oldest->last_use) oldest = &e;
  }
  return oldest;
}

ChunkMemory::Entry* ChunkMemory::OldestGuess() {
  Entry* oldest = nullptr;
  for (Entry& e : entries_) {
    if (e.where != Where::kResident || e.pins > 0 || !e.ahead || e.waiters > 0) continue;
    if (oldest == nullptr || e.last_use < oldest->last_use) oldest = &e;
  }
  return oldest;
}

absl::Status ChunkMemory::MakeRoom(const Entry& target) {
  const int64_t bytes = target.bytes;
  // Until there is room, or the target was read meanwhile (by the read-ahead).
  while (target.where == Where::kFile && !DropCleanFor(bytes)) {
    // Too few clean slabs: a changed one goes to the file first (while the
    // write-behind thread writes one, wait for it rather than write
    // another), else slabs read ahead give way to the one needed now.
    Entry* v = writing_behind_ > 0 ? nullptr : OldestDirty();
    if (v != nullptr) {
      RETURN_IF_ERROR(WriteBack(*v));
      continue;
    }
    Entry* guess = writing_behind_ > 0 ? nullptr : OldestGuess();
    if (guess != nullptr) {
      guess->ahead = false;
      continue;
    }
    auto room = [this, &target, bytes]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return !health_.ok() || target.where != Where::kFile || FreeOrCleanBytes() >= bytes ||
             (writing_behind_ == 0 && (OldestDirty() != nullptr || OldestGuess() != nullptr));
    };
    mu_.Await(absl::Condition(&room));
    if (!health_.ok()) return health_;
  }
  return absl::OkStatus();
}

absl::Status ChunkMemory::Load(Entry& e) {
  e.where = Where::kLoading;
  float* data = TakeMapping(e.bytes, /*zeroed=*/!e.on_disk);
  resident_ += e.bytes;
  absl::Status st = data == nullptr ? ErrnoStatus(errno, "cannot allocate a chunk's slab")
                                    : absl::OkStatus();
  if (st.ok() && e.on_disk) {
    const int64_t n = IoBytes(e);
    const absl::Time t0 = absl::Now();
    mu_.Unlock();
    st = queue_->Read(fd_, reinterpret_cast<char*>(data), n, e.offset, path_);
    mu_.Lock();
    io_.read_bytes += n;
    io_.read_s += absl::ToDoubleSeconds(absl::Now() - t0);
  }
  if (!st.ok()) {
    if (data != nullptr) munmap(data, static_cast<size_t>(e.bytes));
    e.where = Where::kFile;
    resident_ -= e.bytes;
    health_ = st;
    return st;
  }
  e.data = data;
  e.dirty = false;
  e.where = Where::kResident;
  e.last_use = ++tick_;
  write_behind_wanted_ = true;
  return absl::OkStatus();
}

absl::Status ChunkMemory::WriteBack(Entry& e) {
  e.where = Where::kWriting;
  const int64_t n = IoBytes(e);
  const absl::Time t0 = absl::Now();
  mu_.Unlock();
  const absl::Status st =
      queue_->Write(fd_, reinterpret_cast<const char*>(e.data), n, e.offset, path_);
  mu_.Lock();
  io_.write_bytes += n;
  io_.write_s += absl::ToDoubleSeconds(absl::Now() - t0);
  e.where = Where::kResident;
  if (!st.ok()) {
    health_ = st;
    return st;
  }
  e.dirty = false;
  e.on_disk = true;
  return absl::OkStatus();
}

ChunkMemory::Entry* ChunkMemory::WriteBehindCandidate() {
  return FreeOrCleanBytes() < clean_reserve_ ? OldestDirty() : nullptr;
}

void ChunkMemory::WriteBehind() {
  absl::MutexLock lock(&mu_);
  for (;;) {
    auto work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stopping_ || write_behind_wanted_;
    };
    mu_.Await(absl::Condition(&work));
    if (stopping_) return;
    // One slab a turn, so that the writers share the candidates; the one
    // that finds none goes to sleep until a slab is pinned, unpinned or read.
    Entry* e = health_.ok() ? WriteBehindCandidate() : nullptr;
    if (e == nullptr) {
      write_behind_wanted_ = false;
      continue;
    }
    ++writing_behind_;
    (void)WriteBack(*e);  // an error stays in health_
    --writing_behind_;
  }
}

float* ChunkMemory::TakeMapping(int64_t bytes, bool zeroed) {
  for (size_t i = 0; i < spare_.size(); ++i) {
    if (spare_[i].first != bytes) continue;
    float* data = spare_[i].second;
    spare_.erase(spare_.begin() + static_cast<std::ptrdiff_t>(i));
    spare_bytes_ -= bytes;
    if (zeroed) std::memset(data, 0, static_cast<size_t>(bytes));
    return data;
  }
  while (!spare_.empty() && resident_ + spare_bytes_ + bytes > options_.budget) {
    munmap(spare_.back().second, static_cast<size_t>(spare_.back().first));
    spare_bytes_ -= spare_.back().first;
    spare_.pop_back();
  }
  return MapZeroed(bytes);
}

void ChunkMemory::Prefetch(int32_t chunk) {
  if (!offloaded_) return;
  const auto it = index_.find(chunk);
  if (it == index_.end()) return;
  absl::MutexLock lock(&mu_);
  const int last = std::min<int>(it->second + kReadAhead, static_cast<int>(entries_.size()));
  // Slabs read ahead for earlier guesses are ordinary slabs now.
  for (int i = window_begin_; i < window_end_; ++i) {
    if (i < it->second || i >= last) entries_[i].ahead = false;
  }
  window_begin_ = it->second;
  window_end_ = last;
  for (int i = it->second; i < last; ++i) {
    if (entries_[i].where != Where::kFile) continue;
    if (std::find(ahead_.begin(), ahead_.end(), i) != ahead_.end()) continue;
    ahead_.push_back(i);
  }
  while (ahead_.size() > static_cast<size_t>(kReadAhead)) ahead_.pop_front();  // the newest matter
}

bool ChunkMemory::Droppable(const Entry& e) {
  return e.where == Where::kResident && e.pins == 0 && !e.dirty && !e.ahead && e.waiters == 0;
}

int64_t ChunkMemory::FreeOrCleanBytes() const {
  int64_t room = options_.budget - resident_;
  for (const Entry& e : entries_) {
    if (Droppable(e)) room += e.bytes;
  }
  return room;
}

bool ChunkMemory::DropCleanFor(int64_t bytes) {
  int64_t room = options_.budget - resident_;
  std::vector<Entry*> clean;
  for (Entry& e : entries_) {
    if (Droppable(e)) clean.push_back(&e);
  }
  std::sort(clean.begin(), clean.end(),
            [](const Entry* a, const Entry* b) { return a->last_use < b->last_use; });
  size_t n = 0;
  for (; room < bytes && n < clean.size(); ++n) room += clean[n]->bytes;
  if (room < bytes) return false;
  for (size_t i = 0; i < n; ++i) {
    Entry& v = *clean[i];
    spare_.emplace_back(v.bytes, v.data);
    spare_bytes_ += v.bytes;
    v.data = nullptr;
    v.where = Where::kFile;
    resident_ -= v.bytes;
  }
  return true;
}

void ChunkMemory::ReadAhead() {
  absl::MutexLock lock(&mu_);
  for (;;) {
    auto work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stopping_ || !ahead_.empty();
    };
    mu_.Await(absl::Condition(&work));
    if (stopping_) return;
    Entry& e = entries_[ahead_.front()];
    ahead_.pop_front();
    // Wait for room without writing (that is the write-behind's): until
    // there is room, or the slab is no longer wanted (loaded or pinned by another
    // thread, or newer guesses came), or the store fails or stops.
    const int index = static_cast<int>(&e - entries_.data());
    auto guessed = [this, index]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return index >= window_begin_ && index < window_end_;
    };
    auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stopping_ || !health_.ok() || e.where != Where::kFile || !guessed() ||
             FreeOrCleanBytes() >= e.bytes;
    };
    mu_.Await(absl::Condition(&ready));
    if (stopping_) return;
    if (e.where == Where::kFile && health_.ok() && guessed() && DropCleanFor(e.bytes) &&
        Load(e).ok()) {
      e.ahead = guessed();  // the window may have moved while it was read
    }
  }
}

absl::Status ChunkMemory::health() const {
  absl::MutexLock lock(&mu_);
  return health_;
}

int64_t ChunkMemory::IoBytes(const Entry& e) const {
  // O_DIRECT moves whole pages between page-aligned memory (the slab's
  // mapping) and page-aligned file offsets; the slab's pages are its own.
  return direct_ ? e.bytes : e.layout.floats() * static_cast<int64_t>(sizeof(float));
}

ChunkMemoryStats ChunkMemory::stats() const {
  absl::MutexLock lock(&mu_);
  ChunkMemoryStats s = io_;
  s.offloaded = offloaded_;
  s.direct = direct_;
  s.resident_bytes = resident_;
  s.disk_bytes = offloaded_ ? file_bytes_ : 0;
  return s;
}

}  // namespace pstrain
