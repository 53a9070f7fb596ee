#include "server/sparse_table.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "common/job_sizes.h"
#include "absl/strings/str_cat.h"
#include "common/hash.h"
#include "common/status_macros.h"

namespace pstrain {

int RowOptimizer::StateFloats(int width) const {
  switch (type) {
    case Type::kSgd:
      return 0;
    case Type::kAdagrad:
      return width;
    case Type::kAdam:
      return 2 * width;
  }
  return 0;
}

void RowOptimizer::InitState(int width, float* state) const {
  const float start = type == Type::kAdagrad ? static_cast<float>(initial_accumulator) : 0.0f;
  for (int j = 0; j < StateFloats(width); ++j) state[j] = start;
}

void RowOptimizer::Update(int64_t t, int width, const float* g, float* w, float* state) const {
  switch (type) {
    case Type::kSgd: {
      const float alpha = static_cast<float>(-lr);
      for (int j = 0; j < width; ++j) w[j] += alpha * g[j];
      return;
    }
    case Type::kAdagrad: {
      const float alpha = static_cast<float>(-(lr / (1 + (t - 1) * lr_decay)));
      const float e = static_cast<float>(eps);
      for (int j = 0; j < width; ++j) {
        state[j] += g[j] * g[j];
        w[j] += alpha * (g[j] / (std::sqrt(state[j]) + e));
      }
      return;
    }
    case Type::kAdam: {
      const float keep1 = static_cast<float>(1 - beta1), keep2 = static_cast<float>(1 - beta2);
      const double correction1 = 1 - std::pow(beta1, static_cast<double>(t));
      const double correction2 = 1 - std::pow(beta2, static_cast<double>(t));
      const float step = static_cast<float>(-(lr * std::sqrt(correction2) / correction1));
      const float e = static_cast<float>(eps);
      float* m = state;
      float* v = state + width;
      for (int j = 0; j < width; ++j) {
        // In PyTorch's order: the updates first, then the moments from them.
        const float m_update = (g[j] - m[j]) * keep1;
        const float v_update = (g[j] * g[j] - v[j]) * keep2;
        const float numer = m_update + m[j];
        const float denom = std::sqrt(v_update + v[j]) + e;
        m[j] = numer;
        v[j] = v_update + v[j];
        w[j] += step * (numer / denom);
      }
      return;
    }
  }
}

namespace {

// Cells in memory for a table of rows of `stride` floats kept within
// `bytes` (0: no bound).
// Rows in memory at most within `config`'s budget (the filter's bytes
// first), each `row_bytes` and its bookkeeping.
int64_t Capacity(const TableConfig& config, int64_t row_bytes) {
  if (config.resident_bytes <= 0) return INT64_MAX;
  const int64_t filter = config.admit_after > 1 ? kAdmissionFilterBytes : 0;
  return std::max<int64_t>(
      1, (config.resident_bytes - filter) / (row_bytes + kRowBookkeepingBytes));
}

// Reads or writes all of buf at `offset` of fd (retrying short transfers).
absl::Status Transfer(bool write, int fd, float* buf, int64_t bytes, int64_t offset) {
  char* p = reinterpret_cast<char*>(buf);
  while (bytes > 0) {
    const ssize_t n = write ? pwrite(fd, p, bytes, offset) : pread(fd, p, bytes, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return absl::InternalError(absl::StrCat("the table's spill file: ",
                                              write ? "write" : "read", " failed: ",
                                              n < 0 ? std::strerror(errno) : "end of file"));
    }
    p += n;
    bytes -= n;
    offset += n;
  }
  return absl::OkStatus();
}

}  // namespace

int SeenCounts::Add(uint64_t id) {
  size_t at[3];
  uint8_t least = 255;
  for (int i = 0; i < 3; ++i) {
    at[i] = SplitMix64(id ^ (0x9e3779b97f4a7c15ULL * (i + 1))) % counts_.size();
    least = std::min(least, counts_[at[i]]);
  }
  if (least == 255) return 255;
  for (size_t a : at) {
    if (counts_[a] == least) counts_[a] = least + 1;
  }
  return least + 1;
}

SparseTable::SparseTable(TableConfig config)
    : config_(std::move(config)),
      init_key_(TableInitKey(config_.seed, config_.name)),
      stride_(config_.width + config_.optimizer.StateFloats(config_.width)),
      capacity_(Capacity(config_, stride_ * 4)),
      cells_per_block_(std::max<int64_t>(1, (int64_t{1} << 20) / (stride_ * 4))) {
  // The blocks grow with the rows (no reservation of the whole budget,
  // which may be larger than the machine's memory).
  if (config_.admit_after > 1) seen_ = std::make_unique<SeenCounts>(kAdmissionFilterBytes);
}

int64_t SparseTable::memory_bytes() const {
  return (seen_ == nullptr ? 0 : seen_->bytes()) +
         cells_allocated_ * (row_bytes() + kRowBookkeepingBytes);
}

SparseTable::~SparseTable() {
  if (spill_fd_ >= 0) close(spill_fd_);
}

TableRows SparseTable::rows() const {
  TableRows r;
  r.resident = static_cast<int64_t>(cell_ids_.size() - free_cells_.size());
  r.on_disk = num_rows() - r.resident;
  r.spilled = spilled_;
  r.loaded = loaded_;
  r.created = created_;
  r.expired = expired_;
  r.dropped = dropped_;
  return r;
}

void SparseTable::Advance(int64_t clock) {
  clock_ = clock;
  if (config_.expire_after <= 0 || clock < next_sweep_) return;
  next_sweep_ = clock + std::max<int64_t>(1, config_.expire_after / 4);
  Expire();
}

void SparseTable::Expire() {
  for (auto it = index_.begin(); it != index_.end();) {
    if (clock_ - it->second.touched <= config_.expire_after) {
      ++it;
      continue;
    }
    const int64_t where = it->second.where;
    if (where >= 0) {
      free_cells_.push_back(where);
      touched_[where] = false;
    } else {
      free_disk_.push_back(OnDisk(where));  // OnDisk is its own inverse
    }
    ++expired_;
    index_.erase(it++);
  }
}

absl::Status SparseTable::OpenSpill() {
  std::string dir = config_.spill_dir;
  if (dir.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    dir = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
  }
  std::string path = absl::StrCat(dir, "/pstrain-table-", config_.name, "-XXXXXX");
  const int fd = mkstemp(path.data());
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("cannot make the spill file of table '",
                                            config_.name, "' in ", dir, ": ",
                                            std::strerror(errno)));
  }
  unlink(path.c_str());  // the file lives as long as the descriptor
  spill_fd_ = fd;
  return absl::OkStatus();
}

absl::StatusOr<int64_t> SparseTable::FreeCell() {
  if (!free_cells_.empty()) {
    const int64_t cell = free_cells_.back();
    free_cells_.pop_back();
    return cell;
  }
  const int64_t used = static_cast<int64_t>(cell_ids_.size());
  if (used < capacity_) {
    if (used == cells_allocated_) {  // a new block; the last one may be short of a whole
      const int64_t cells = std::min(cells_per_block_, capacity_ - used);
      blocks_.push_back(std::make_unique<float[]>(static_cast<size_t>(cells * stride_)));
      cells_allocated_ += cells;
    }
    cell_ids_.push_back(0);
    touched_.push_back(false);
    return used;
  }
  while (touched_[hand_]) {  // a second chance for rows touched since
    touched_[hand_] = false;
    hand_ = (hand_ + 1) % used;
  }
  const int64_t cell = hand_;
  hand_ = (hand_ + 1) % used;
  if (spill_fd_ < 0) RETURN_IF_ERROR(OpenSpill());
  int64_t k;
  if (!free_disk_.empty()) {
    k = free_disk_.back();
    free_disk_.pop_back();
  } else {
    k = disk_cells_++;
  }
  if (absl::Status st = Transfer(true, spill_fd_, Cell(cell), row_bytes(), k * row_bytes());
      !st.ok()) {
    free_disk_.push_back(k);  // the row stays in its cell
    return st;
  }
  index_.find(cell_ids_[cell])->second.where = OnDisk(k);
  ++spilled_;
  return cell;
}

absl::StatusOr<float*> SparseTable::Resident(uint64_t id) {
  auto it = index_.find(id);
  if (it != index_.end() && it->second.where >= 0) {
    touched_[it->second.where] = true;
    it->second.touched = clock_;
    return Cell(it->second.where);
  }
  ASSIGN_OR_RETURN(const int64_t cell, FreeCell());
  float* w = Cell(cell);
  it = index_.find(id);      // FreeCell may have changed the map
  if (it != index_.end()) {  // on disk: read back
    const int64_t k = OnDisk(it->second.where);
    if (absl::Status st = Transfer(false, spill_fd_, w, row_bytes(), k * row_bytes()); !st.ok()) {
      free_cells_.push_back(cell);
      return st;
    }
    free_disk_.push_back(k);
    ++loaded_;
    it->second = Entry{cell, clock_};
  } else {  // new
    InitialRow(init_key_, id, config_.width, config_.init_scale, w);
    config_.optimizer.InitState(config_.width, w + config_.width);
    index_.emplace(id, Entry{cell, clock_});
    ++created_;
  }
  cell_ids_[cell] = id;
  touched_[cell] = true;
  return w;
}

absl::Status SparseTable::Pull(absl::Span<const uint64_t> ids, float* out) {
  for (size_t i = 0; i < ids.size(); ++i) {
    float* to = out + i * config_.width;
    if (seen_ != nullptr && !index_.contains(ids[i])) {  // not admitted (yet)
      std::fill(to, to + config_.width, 0.0f);
      continue;
    }
    ASSIGN_OR_RETURN(const float* w, Resident(ids[i]));
    std::copy(w, w + config_.width, to);
  }
  return absl::OkStatus();
}

absl::Status SparseTable::Check(absl::Span<const uint64_t> ids,
                                absl::Span<const float> grads) const {
  if (grads.size() != ids.size() * static_cast<size_t>(config_.width)) {
    return absl::InvalidArgumentError(
        absl::StrCat("table ", config_.name, ": ", grads.size(), " gradient floats for ",
                     ids.size(), " rows of width ", config_.width));
  }
  absl::flat_hash_set<uint64_t> seen;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!seen.insert(ids[i]).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("table ", config_.name, ": row ", ids[i], " pushed twice in one update"));
    }
    if (!Lenient() && !index_.contains(ids[i])) {
      return absl::FailedPreconditionError(absl::StrCat(
          "table ", config_.name, ": a push for row ", ids[i], ", which no pull created"));
    }
  }
  return absl::OkStatus();
}

absl::Status SparseTable::CheckPush(absl::Span<const uint64_t> ids,
                                    absl::Span<const float> grads) const {
  return Check(ids, grads);
}

absl::Status SparseTable::Push(absl::Span<const uint64_t> ids, absl::Span<const float> grads) {
  RETURN_IF_ERROR(Check(ids, grads));  // whole, before anything is applied
  ++updates_;
  for (size_t i = 0; i < ids.size(); ++i) {
    // An id with no row (Lenient only): admitted by this sighting, or its
    // gradient dropped (not admitted yet; expired under way).
    if (!index_.contains(ids[i]) &&
        (seen_ == nullptr || seen_->Add(ids[i]) < config_.admit_after)) {
      ++dropped_;
      continue;
    }
    ASSIGN_OR_RETURN(float* w, Resident(ids[i]));
    config_.optimizer.Update(updates_, config_.width, grads.data() + i * config_.width, w,
                             w + config_.width);
  }
  return absl::OkStatus();
}

const float* SparseTable::Row(uint64_t id) const {
  auto it = index_.find(id);
  if (it == index_.end() || it->second.where < 0) return nullptr;
  return Cell(it->second.where);
}

absl::Status SparseTable::ForEachRow(
    const std::function<absl::Status(uint64_t id, const float* row, int64_t touched)>& f) {
  std::vector<float> scratch(static_cast<size_t>(stride_));
  for (const auto& [id, entry] : index_) {
    const float* row = entry.where >= 0 ? Cell(entry.where) : scratch.data();
    if (entry.where < 0) {
      RETURN_IF_ERROR(Transfer(false, spill_fd_, scratch.data(), row_bytes(),
                               OnDisk(entry.where) * row_bytes()));
    }
    RETURN_IF_ERROR(f(id, row, entry.touched));
  }
  return absl::OkStatus();
}

void SparseTable::Reset(int64_t updates, int64_t clock) {
  index_.clear();
  free_cells_.clear();
  for (int64_t s = static_cast<int64_t>(cell_ids_.size()) - 1; s >= 0; --s) {
    free_cells_.push_back(s);
    touched_[s] = false;
  }
  free_disk_.clear();
  disk_cells_ = 0;
  updates_ = updates;
  clock_ = clock;
  next_sweep_ = 0;
  if (seen_ != nullptr) seen_->Clear();
}

absl::Status SparseTable::Put(uint64_t id, const float* row, int64_t touched) {
  if (index_.contains(id)) {
    return absl::InvalidArgumentError(
        absl::StrCat("table ", config_.name, ": row ", id, " given twice"));
  }
  ASSIGN_OR_RETURN(const int64_t cell, FreeCell());
  std::copy(row, row + stride_, Cell(cell));
  index_.emplace(id, Entry{cell, touched});
  cell_ids_[cell] = id;
  touched_[cell] = false;
  return absl::OkStatus();
}

}  // namespace pstrain
