// What one server holds of the job's parameters -- its chunks (ChunkStore)
// and its part of every sparse table (SparseTables) -- as one thing: one
// generation (the chunks', which every table follows as it is restored),
// one checkpoint schedule (server/checkpoint_schedule.h) and one writer of
// their files (server/checkpoint.h: written, deleted, reported complete
// together), restored, pruned and rid of a dead worker together, and one
// set of standby parts (server/standby_parts.h) over both. The member
// loop's actions (server/member_loop.h) and the service's Status go
// through it; the request families use the store and the tables it holds.
// No gRPC.
#ifndef PSTRAIN_SERVER_SHARD_H_
#define PSTRAIN_SERVER_SHARD_H_

#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "proto/job.pb.h"
#include "server/answer_room.h"
#include "server/checkpoint.h"
#include "server/checkpoint_schedule.h"
#include "server/chunk_store.h"
#include "server/handover.h"
#include "server/sparse_tables.h"
#include "server/standby_parts.h"

namespace pstrain {

// Where the changes of a server's served chunks and table parts go for
// their standby (server/standby_sender.h).
class StandbySink : public ChunkStore::ChunkSink, public SparseTables::TableSink {};

// Thread-safe as its parts are; Restore, Prune and RemoveWorker come from
// one thread (the server's member loop).
class Shard {
 public:
  // Server `server_id`'s parts of `job` (complete, valid); with
  // job.checkpoint_every() > 0 they write checkpoints into
  // job.checkpoint_dir().
  Shard(const JobSpec& job, int server_id, std::shared_ptr<ChunkStore> store,
        std::shared_ptr<SparseTables> tables);

  const std::shared_ptr<ChunkStore>& store() const { return store_; }
  const std::shared_ptr<SparseTables>& tables() const { return tables_; }
  int64_t generation() const { return store_->generation(); }

  // Its chunks and its parts of the tables as one set: the scheduler's
  // routes, its copies forgotten, what Status reports.
  StandbyParts& standby() { return standby_; }
  const StandbyParts& standby() const { return standby_; }
  // Where the changes of served parts with a standby go; before the first
  // push, outliving the shard.
  void SetStandbySink(StandbySink* sink);
  // A replacement joins a cluster whose generation `generation` goes on
  // (no rollback): every part a standby copy to be filled.
  void JoinAsStandby(int64_t generation);

  // The state of generation `generation` from the checkpoint of `clock` (0:
  // the initial values): the chunks', then every table's; this server's
  // files of later clocks deleted, what was asked forgotten. A server
  // starting a job afresh (generation 0, clock 0) deletes the files an
  // earlier job left without a manifest.
  absl::Status Restore(int64_t generation, int64_t clock);
  // A move's holder giving the chunks `giving` away (as it hears of the
  // move, or as a taker first asks for them): in memory, the rooms their
  // handover answers are written in (server/answer_room.h) made now, on a
  // thread of their own, for those without one yet. Thread-safe.
  void PrepareToGive(const std::vector<int32_t>& giving) const;
  // The move went: the rooms go (as they do with the shard).
  void DropAnswerRooms();
  // Chunk `chunk`'s room once made (null: none, or not yet: its answer
  // takes memory as it comes).
  std::shared_ptr<AnswerRoom> answer_room(int32_t chunk) const;
  // A move's switch: the state of generation `generation` from the switch
  // clock as Restore's, every chunk's and row's from what `before` -- the
  // shard this server served until the switch (null: none) -- keeps under
  // this shard's placement, and from what was handed over to it
  // (`handed`, server/move_intake.h); the chunks kept are taken from
  // `before`'s store, which answers no call on them from then on.
  // INTERNAL for a chunk in neither; the store's and the tables' Adopt
  // errors.
  absl::Status Adopt(int64_t generation, HandedOver handed, Shard* before);
  // Whether every chunk and table part here has applied every update of
  // the iterations before `clock` (a move's switch waits for it: a push of
  // the clock before may still be on its way).
  bool Reached(int64_t clock) const;
  // Deletes this server's files of clocks before `clock` (a newer complete
  // set is named by the manifest).
  void Prune(int64_t clock);
  // The worker was declared dead: left out of the chunks' and the tables'
  // rounds and read guarantees.
  void RemoveWorker(int worker);
  // A checkpoint of `clock` was asked for outside the schedule.
  void AskCheckpoint(int64_t clock) {
    // (Each push names it: the tables hear it once.)
    if (schedule_.Ask(clock)) tables_->CheckpointAsked(clock);
  }
  // The newest clock whose files this server has for its chunks and every
  // table: what it reports complete (0: none).
  int64_t CheckpointClock() const;
  // Gradients the finiteness rule skipped, the chunks' and the tables'.
  int64_t NonfiniteSkipped() const;

 private:
  const JobSpec& job_;
  const std::shared_ptr<ChunkStore> store_;
  // The rooms for a move's handover answers (PrepareToGive), by chunk:
  // those made at once, being made or made.
  using Rooms = std::map<int32_t, std::shared_ptr<AnswerRoom>>;
  mutable absl::Mutex room_mu_;
  mutable std::map<int32_t, std::shared_future<Rooms>> rooms_ ABSL_GUARDED_BY(room_mu_);
  const std::shared_ptr<SparseTables> tables_;
  CheckpointSchedule schedule_;
  std::unique_ptr<CheckpointWriter> checkpoint_;  // null without checkpoints
  StandbyParts standby_;                          // the store's, then the tables'
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_SHARD_H_
