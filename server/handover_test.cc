// A move's handover in process (server/handover.h): the holders' answers
// (AnswerHandOver) only once the state settled at the switch clock, a
// shard's chunks and table rows made anew of what it kept and what was
// handed over to it, bit for bit (ChunkStore::Adopt, SparseTables::Adopt:
// the kept chunks' slabs given to the store made anew, in memory, or copied
// into its file, offloaded),
// and common/placement.h's account of who takes what from whom.
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "common/job_defaults.h"
#include "common/job_parse.h"
#include "common/job_validate.h"
#include "common/placement.h"
#include "common/rows.h"
#include "common/tensor_wire.h"
#include "gtest/gtest.h"
#include "server/handover_requests.h"
#include "server/shard.h"
#include "server/store_testing.h"

namespace pstrain {
namespace {

// Adam (state that must follow), one worker, two servers.
JobSpec Job() {
  JobSpec job = SmallDenseJob(BSP, 1);
  job.mutable_optimizer()->set_type(ADAM);
  job.mutable_optimizer()->set_learning_rate(0.01f);
  job.set_num_servers(2);
  return job;
}

// Every chunk and bucket on server 0: the placement a drain of server 1 makes.
Placement AllOnZero(const Placement& from) {
  Placement to = from;
  to.set_version(from.version() + 1);
  to.clear_servers();
  to.add_servers(0);
  for (int& s : *to.mutable_chunk_server()) s = 0;
  for (int& s : *to.mutable_bucket_server()) s = 0;
  return to;
}

std::unique_ptr<ChunkStore> Store(const JobSpec& job, const Partition& p, int server,
                                  ChunkStore::StartValues start = ChunkStore::StartValues::kSeed) {
  return std::make_unique<ChunkStore>(job, p, server, MakeOptimizer(job.optimizer()).value(),
                                      nullptr, nullptr, OffloadOptions{}, start);
}

// `clocks` clocks of the one worker's pushes to every chunk of `store`.
void Train(ChunkStore& store, int64_t clocks) {
  for (int64_t c = 0; c < clocks; ++c) {
    for (int32_t chunk : store.chunk_ids()) {
      std::vector<float> g(store.ChunkNumel(chunk));
      for (size_t i = 0; i < g.size(); ++i) g[i] = 0.01f * ((c * 5 + i) % 7) - 0.03f;
      ASSERT_TRUE(store.Push(0, c, 8, chunk, g).ok());
    }
  }
}

TEST(HandoverTest, PlacementsSayWhoTakesWhatFromWhom) {
  const JobSpec job = Job();
  const Partition p = Partition::Make(ModelParams(job.model()), job.chunk_bytes(), 2).value();
  const Placement from = InitialPlacement(p);
  const Placement to = AllOnZero(from);
  const Handover h = HandoverTo(from, to, 0);
  ASSERT_EQ(h.chunks.size(), 1u);
  EXPECT_EQ(h.chunks.at(1), ChunksOn(from, 1));
  EXPECT_EQ(h.rows, std::set<int>{1});
  EXPECT_TRUE(HandoverTo(from, to, 1).empty());  // the drained server takes nothing
  EXPECT_EQ(ChunksLeaving(from, to, 1), ChunksOn(from, 1));  // and gives all it holds
  EXPECT_TRUE(ChunksLeaving(from, to, 0).empty());
  EXPECT_EQ(ChunksLeaving(to, from, 0), ChunksOn(from, 1));  // what server 0 takes
  EXPECT_EQ(Takers(from, to), std::vector<int>{0});
  EXPECT_TRUE(Takers(from, from).empty());
}

TEST(HandoverTest, AHolderAnswersOnceItsChunksSettledAtTheSwitchClock) {
  const JobSpec job = Job();
  const Partition p = Partition::Make(ModelParams(job.model()), job.chunk_bytes(), 2).value();
  auto store = std::shared_ptr<ChunkStore>(Store(job, p, 1));
  Shard shard(job, 1, store, std::make_shared<SparseTables>(job, 1, 2));
  Train(*store, 3);
  HandOverRequest req;
  req.set_clock(4);
  req.set_to_server(0);
  for (int32_t c : store->chunk_ids()) req.add_chunks(c);
  grpc::ByteBuffer reply;
  EXPECT_EQ(AnswerHandOver(shard, SerializeSmall(req), &reply).code(),
            absl::StatusCode::kUnavailable);  // clock 3 not applied yet
  req.set_clock(2);
  EXPECT_EQ(AnswerHandOver(shard, SerializeSmall(req), &reply).code(),
            absl::StatusCode::kFailedPrecondition);  // gone past it
  req.set_clock(3);
  req.set_generation(1);
  EXPECT_EQ(AnswerHandOver(shard, SerializeSmall(req), &reply).code(),
            absl::StatusCode::kUnavailable);  // a generation not restored here
  req.set_generation(0);
  ASSERT_TRUE(AnswerHandOver(shard, SerializeSmall(req), &reply).ok());
  HandOverResponse resp;
  ASSERT_TRUE(ParseSmall(reply, &resp));
  ASSERT_EQ(resp.chunks_size(), req.chunks_size());
  EXPECT_TRUE(resp.chunks(0).full());
  EXPECT_EQ(resp.chunks(0).steps(), 3);
  // Each chunk's whole state, as the standby copies' full updates say it.
  for (int i = 0; i < req.chunks_size(); ++i) {
    EXPECT_EQ(resp.chunks(i).SerializeAsString(),
              store->FullUpdate(req.chunks(i)).value().SerializeAsString());
  }
  // Written in the rooms the first ask made, the same bytes.
  for (int polls = 0; polls < 1000 && shard.answer_room(req.chunks(0)) == nullptr; ++polls) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_NE(shard.answer_room(req.chunks(0)), nullptr);
  grpc::ByteBuffer from_room;
  ASSERT_TRUE(AnswerHandOver(shard, SerializeSmall(req), &from_room).ok());
  EXPECT_EQ(FlattenSmall(from_room), FlattenSmall(reply));
  shard.DropAnswerRooms();
  EXPECT_EQ(shard.answer_room(req.chunks(0)), nullptr);
  req.add_chunks(0);  // server 0's
  EXPECT_EQ(AnswerHandOver(shard, SerializeSmall(req), &reply).code(),
            absl::StatusCode::kInvalidArgument);
}

// A chunk's weights and optimizer state, as a store answers for them.
struct Held {
  std::vector<float> weights;
  std::string state;
};

Held HeldIn(const ChunkStore& store, int32_t chunk) {
  Held h;
  h.weights = ReadChunk(store, chunk);
  ChunkState st;
  EXPECT_TRUE(store.ReadState(chunk, &st).ok());
  h.state = st.SerializeAsString();
  return h;
}

// Server 1 drained into server 0: the store of server 0 made anew (in
// memory, or offloaded to `offload_dir`) holds what server 0 kept -- its
// slabs given, or copied into the file -- and what server 1 handed over,
// bit for bit; the store placed before answers no call on a chunk it gave.
void DrainIntoStoreMadeAnew(const std::string& offload_dir) {
  const JobSpec job = Job();
  const Partition p = Partition::Make(ModelParams(job.model()), job.chunk_bytes(), 2).value();
  std::unique_ptr<ChunkStore> kept = Store(job, p, 0), given = Store(job, p, 1);
  Train(*kept, 3);
  Train(*given, 3);
  std::map<int32_t, Held> want;
  for (const ChunkStore* s : {kept.get(), given.get()}) {
    for (int32_t c : s->chunk_ids()) want[c] = HeldIn(*s, c);
  }
  const Placement to = AllOnZero(InitialPlacement(p));
  const Partition placed =
      PlacedPartition(ModelParams(job.model()), job.chunk_bytes(), 2, to).value();
  OffloadOptions offload;
  offload.dir = offload_dir;
  offload.budget = int64_t{1} << 20;
  auto fresh =
      std::make_unique<ChunkStore>(job, placed, 0, MakeOptimizer(job.optimizer()).value(), nullptr,
                                   nullptr, offload, ChunkStore::StartValues::kNone);
  ASSERT_TRUE(fresh->health().ok()) << fresh->health();
  std::map<int32_t, ChunkUpdate> handed;
  EXPECT_EQ(fresh->Adopt(1, 3, &handed, nullptr).code(), absl::StatusCode::kInternal);
  for (int32_t c : given->chunk_ids()) handed[c] = given->FullUpdate(c).value();
  ASSERT_TRUE(fresh->Adopt(1, 3, &handed, kept.get()).ok());
  EXPECT_TRUE(handed.empty());  // taken out
  EXPECT_EQ(fresh->generation(), 1);
  ASSERT_EQ(fresh->chunk_ids().size(), want.size());
  for (int32_t c : fresh->chunk_ids()) {
    const Held got = HeldIn(*fresh, c);
    ASSERT_EQ(got.weights.size(), want[c].weights.size());
    EXPECT_EQ(
        std::memcmp(got.weights.data(), want[c].weights.data(), got.weights.size() * sizeof(float)),
        0)
        << c;
    EXPECT_EQ(got.state, want[c].state) << c;
  }
  // The store placed before: its calls of generation 0 on a chunk given end.
  for (int32_t c : kept->chunk_ids()) {
    std::vector<float> out(kept->ChunkNumel(c));
    PulledClocks clocks;
    EXPECT_EQ(kept->Read(0, 3, 3, c, FP32, reinterpret_cast<char*>(out.data()), &clocks).code(),
              absl::StatusCode::kFailedPrecondition)
        << c;
    EXPECT_EQ(kept->Push(0, 3, 8, c, std::vector<float>(out.size(), 0.01f)).code(),
              absl::StatusCode::kFailedPrecondition)
        << c;
  }
  // Training goes on from the switch clock.
  std::vector<float> g(fresh->ChunkNumel(0), 0.01f);
  EXPECT_TRUE(fresh->Push(0, 3, 8, 0, g, 0, /*generation=*/1).ok());
}

TEST(HandoverTest, AStoreMadeAnewHoldsWhatWasKeptAndHandedOverBitForBit) {
  DrainIntoStoreMadeAnew("");
}

TEST(HandoverTest, AnOffloadedStoreMadeAnewCopiesWhatWasKeptBitForBit) {
  DrainIntoStoreMadeAnew(::testing::TempDir());
}

// Two tables over 2 servers, one worker, BSP.
JobSpec TablesJob() {
  absl::StatusOr<JobSpec> job = ParseJobSpecText(R"pb(
                                                   num_servers: 2
                                                   seed: 7
                                                   tables {
                                                     name: "words"
                                                     width: 4
                                                     num_ids: 1000
                                                     optimizer { type: ADAGRAD learning_rate: 0.5 }
                                                   }
                                                   tables {
                                                     name: "tags"
                                                     width: 2
                                                     optimizer { type: SGD learning_rate: 0.1 }
                                                   }
                                                 )pb",
                                                 "job.pbtxt");
  EXPECT_TRUE(job.ok()) << job.status();
  ApplyJobDefaults(&*job);
  EXPECT_TRUE(ValidateJobSpec(*job).ok());
  return *job;
}

// Server `server`'s rows of `table` pulled and pushed once (clock 0).
std::vector<uint64_t> Touch(SparseTables& tables, int server, const std::string& table, int width) {
  std::vector<uint64_t> ids;
  for (uint64_t id = 0; id < 60; ++id) {
    if (ServerOfRow(id, 2) == server) ids.push_back(id);
  }
  std::vector<float> rows;
  EXPECT_TRUE(tables.Pull(0, 0, table, server, ids, &rows).ok());
  std::vector<float> grads(ids.size() * width, 0.25f);
  EXPECT_TRUE(tables.Push(0, 0, table, server, 0, 4, ids, grads).ok());
  return ids;
}

TEST(HandoverTest, TablesMadeAnewHoldTheRowsKeptAndHandedOver) {
  const JobSpec job = TablesJob();
  SparseTables zero(job, 0, 2), one(job, 1, 2);
  const std::vector<uint64_t> mine = Touch(zero, 0, "words", 4), theirs = Touch(one, 1, "words", 4);
  Touch(zero, 0, "tags", 2);  // (every part at clock 1)
  Touch(one, 1, "tags", 2);
  auto all = [](uint64_t) { return true; };
  EXPECT_EQ(one.HandOver("words", 2, all).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(one.HandOver("nope", 1, all).status().code(), absl::StatusCode::kInvalidArgument);
  const absl::StatusOr<TableUpdate> some =
      one.HandOver("words", 1, [&](uint64_t id) { return id == theirs[0]; });
  ASSERT_TRUE(some.ok()) << some.status();
  EXPECT_EQ(some->ids_size(), 1);

  Partition p = Partition::Make(ModelParams(job.model()), job.chunk_bytes(), 2).value();
  SparseTables merged(job, 0, 2, "", AllOnZero(InitialPlacement(p)));
  const absl::Status adopted =
      merged.Adopt(1, 1, [&](const std::string& t) -> absl::StatusOr<std::vector<TableUpdate>> {
        std::vector<TableUpdate> rows;
        for (SparseTables* s : {&zero, &one}) {
          absl::StatusOr<TableUpdate> u = s->HandOver(t, 1, all);
          if (!u.ok()) return u.status();
          rows.push_back(*std::move(u));
        }
        return rows;
      });
  ASSERT_TRUE(adopted.ok()) << adopted;
  for (const auto& [ids, from, home] : {std::tuple(mine, &zero, 0), std::tuple(theirs, &one, 1)}) {
    std::vector<float> got, want;
    ASSERT_TRUE(merged.Pull(0, 1, "words", 0, ids, &got).ok());
    ASSERT_TRUE(from->Pull(0, 0, "words", home, ids, &want).ok());
    EXPECT_EQ(got, want);
  }
  EXPECT_TRUE(merged.Reached(1));
  EXPECT_FALSE(merged.Reached(2));
}

}  // namespace
}  // namespace pstrain
