#include "server/shard.h"

#include <chrono>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_names.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace pstrain {

Shard::Shard(const JobSpec& job, int server_id, std::shared_ptr<ChunkStore> store,
             std::shared_ptr<SparseTables> tables)
    : job_(job),
      store_(std::move(store)),
      tables_(std::move(tables)),
      schedule_(job.checkpoint_every()) {
  standby_.AddAll(store_->standby());
  standby_.AddAll(tables_->standby());
  if (!schedule_.enabled()) return;
  std::vector<std::string> names;
  for (const TableSpec& t : job.tables()) names.push_back(t.name());
  checkpoint_ = std::make_unique<CheckpointWriter>(job.checkpoint_dir(), server_id,
                                                   OptimizerType_Name(job.optimizer().type()),
                                                   store_->CheckpointLayout(), std::move(names));
  store_->SetCheckpointing(checkpoint_.get(), &schedule_);
  tables_->SetCheckpointing(job.checkpoint_dir(), &schedule_);
}

absl::Status Shard::Restore(int64_t generation, int64_t clock) {
  if (generation == 0 && clock == 0) {
    if (checkpoint_ != nullptr) checkpoint_->Rollback(0);  // an earlier job's files
    return absl::OkStatus();
  }
  std::optional<CheckpointSet> set;
  if (clock > 0) {
    ASSIGN_OR_RETURN(set, CheckpointSet::Open(job_.checkpoint_dir(), clock));
  }
  // The chunks delete the later files (the tables' too) once every chunk is
  // of the new generation.
  RETURN_IF_ERROR(store_->Restore(generation, clock, set ? &*set : nullptr));
  RETURN_IF_ERROR(tables_->Restore(generation, clock, set ? set->servers() : std::vector<int>{}));
  schedule_.Forget();
  spdlog::warn("generation {}: restored the checkpoint of clock {}", generation, clock);
  return absl::OkStatus();
}

absl::Status Shard::Adopt(int64_t generation, HandedOver handed, Shard* before) {
  const int64_t clock = handed.switch_clock;
  RETURN_IF_ERROR(store_->Adopt(generation, clock, &handed.chunks,
                                before == nullptr ? nullptr : before->store().get()));
  RETURN_IF_ERROR(tables_->Adopt(
      generation, clock, [&](const std::string& table) -> absl::StatusOr<std::vector<TableUpdate>> {
        std::vector<TableUpdate> rows = std::move(handed.rows[table]);
        if (before != nullptr) {
          ASSIGN_OR_RETURN(TableUpdate kept,
                           before->tables()->HandOver(
                               table, clock, [this](uint64_t id) { return tables_->Keeps(id); }));
          rows.push_back(std::move(kept));
        }
        return rows;
      }));
  schedule_.Forget();
  spdlog::info("generation {}: placement {} from clock {} ({} bytes handed over)", generation,
               handed.version, clock, handed.bytes);
  return absl::OkStatus();
}

void Shard::PrepareToGive(const std::vector<int32_t>& giving) const {
  if (store_->memory_stats().offloaded) return;  // (outside its budget)
  absl::MutexLock lock(&room_mu_);
  std::vector<std::pair<int32_t, int64_t>> sizes;
  for (int32_t c : giving) {
    if (rooms_.count(c) > 0 || !store_->CheckChunk(c).ok()) continue;
    sizes.emplace_back(c, AnswerRoom::ChunkBytes(store_->WholeBytes(c), store_->num_workers()));
  }
  if (sizes.empty()) return;
  std::shared_future<Rooms> made = std::async(std::launch::async, [sizes] {
                                     Rooms rooms;
                                     for (const auto& [c, bytes] : sizes) {
                                       rooms[c] = std::make_shared<AnswerRoom>(bytes);
                                     }
                                     return rooms;
                                   }).share();
  for (const auto& [c, bytes] : sizes) rooms_[c] = made;
}

void Shard::DropAnswerRooms() {
  absl::MutexLock lock(&room_mu_);
  rooms_.clear();
}

std::shared_ptr<AnswerRoom> Shard::answer_room(int32_t chunk) const {
  absl::MutexLock lock(&room_mu_);
  const auto it = rooms_.find(chunk);
  if (it == rooms_.end() ||
      it->second.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
    return nullptr;
  }
  return it->second.get().at(chunk);
}

bool Shard::Reached(int64_t clock) const {
  for (int32_t chunk : store_->chunk_ids()) {
    if (!store_->Readable(chunk, clock)) return false;
  }
  return tables_->Reached(clock);
}

void Shard::SetStandbySink(StandbySink* sink) {
  store_->SetChunkSink(sink);
  tables_->SetSink(sink);
}

void Shard::JoinAsStandby(int64_t generation) {
  store_->JoinAsStandby(generation);
  tables_->standby().JoinAsStandby(generation);
}

void Shard::Prune(int64_t clock) {
  if (checkpoint_ != nullptr) checkpoint_->Prune(clock);
  tables_->ForgetCheckpointsBefore(clock);
}

void Shard::RemoveWorker(int worker) {
  store_->RemoveWorker(worker);
  tables_->RemoveWorker(worker);
}

int64_t Shard::CheckpointClock() const {
  return tables_->CheckpointClock(store_->checkpoint_clock());
}

int64_t Shard::NonfiniteSkipped() const {
  return store_->NonfiniteSkipped() + tables_->nonfinite_skipped();
}

}  // namespace pstrain
