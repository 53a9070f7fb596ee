// PlacementMoves: servers added to and drained from a running job -- the
// switch clock held, readiness, the switch, refusals, abandonment and
// the durable state.
#include "scheduler/placement_moves.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

const absl::Time kNow = absl::FromUnixSeconds(1000);

// 20 chunks of 100 floats on `servers` servers.
Partition Chunks(int servers) {
  ParamInfo p;
  p.name = "w";
  p.numel = 2000;
  p.shape = {2000};
  return Partition::Make({p}, 400, servers).value();
}

PlacementMoves Moves(int servers, JobSpec job = JobSpec()) {
  job.set_num_servers(servers);
  return PlacementMoves(job, Chunks(servers));
}

// A move asked for with its switch at `clock`.
PlacementMoves::Context At(int64_t clock) {
  PlacementMoves::Context c;
  c.switch_clock = clock;
  c.total_clocks = 100;
  return c;
}

std::vector<int> Servers(const Placement& p) { return {p.servers().begin(), p.servers().end()}; }

TEST(PlacementMovesTest, AMoveSwitchesOnceItsHandoversAreHeld) {
  PlacementMoves m = Moves(2);
  EXPECT_EQ(m.held_clock(), -1);
  ASSERT_TRUE(m.Ask(ADD_SERVER, 2, At(6), kNow).ok());
  EXPECT_EQ(m.switch_clock(), 6);
  EXPECT_EQ(m.held_clock(), 5);  // the workers stop having pushed clock 5
  EXPECT_EQ(Servers(*m.next()), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(m.placement().version(), 1);        // in force until the switch
  EXPECT_FALSE(m.MaybeSwitch(/*handed_over=*/false, kNow));  // a taker does not hold it all
  EXPECT_TRUE(m.InJob(2));
  ClusterStatus st;
  m.AddStatus(&st);
  EXPECT_EQ(st.placement().move().kind(), ADD_SERVER);
  EXPECT_EQ(st.placement().move().switch_clock(), 6);
  EXPECT_EQ(st.placement().move().version(), 2);
  EXPECT_EQ(st.placement().move().bytes(), 6 * 400);  // 20 chunks over 3: 7, 7, 6
  EXPECT_TRUE(m.MaybeSwitch(/*handed_over=*/true, kNow));
  EXPECT_FALSE(m.moving());
  EXPECT_EQ(m.held_clock(), -1);
  EXPECT_EQ(m.placement().version(), 2);
  EXPECT_EQ(Servers(m.placement()), (std::vector<int>{0, 1, 2}));
  ASSERT_EQ(m.Snapshot().history_size(), 1);
  EXPECT_EQ(m.Snapshot().history(0).abandoned(), "");
  EXPECT_EQ(m.Snapshot().history(0).switch_clock(), 6);
  EXPECT_FALSE(m.MaybeSwitch(true, kNow));  // nothing under way
  EXPECT_TRUE(m.InJob(2));
  EXPECT_EQ(m.WhyOut(2), "");
}

TEST(PlacementMovesTest, ADrainLeavesTheDrainedServerNothing) {
  PlacementMoves m = Moves(3);
  ASSERT_TRUE(m.Ask(DRAIN_SERVER, 1, At(10), kNow).ok());
  EXPECT_TRUE(m.InJob(1));                                       // until the switch
  EXPECT_TRUE(m.MaybeSwitch(/*handed_over=*/true, kNow));
  EXPECT_EQ(Servers(m.placement()), (std::vector<int>{0, 2}));
  EXPECT_FALSE(m.InJob(1));
  EXPECT_EQ(m.WhyOut(1), "server 1 was drained at clock 10 (placement 2)");
  EXPECT_EQ(FreeServerId(m.placement()), 1);  // the next server added takes it
  ClusterStatus st;
  m.AddStatus(&st);
  int chunks = 0, buckets = 0;
  for (const PlacedServer& s : st.placement().servers()) {
    chunks += s.chunks();
    buckets += s.row_buckets();
  }
  EXPECT_EQ(chunks, 20);
  EXPECT_EQ(buckets, kRowBuckets);
  EXPECT_FALSE(st.placement().has_move());
}

void ExpectRefused(PlacementMoves& m, MoveKind kind, int server, const PlacementMoves::Context& c,
                   const std::string& reason) {
  const int64_t version = m.placement().version();
  const bool moving = m.moving();
  const absl::Status st = m.Ask(kind, server, c, kNow);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_NE(st.message().find(reason), absl::string_view::npos) << st;
  EXPECT_EQ(m.placement().version(), version);
  EXPECT_EQ(m.moving(), moving);
}

TEST(PlacementMovesTest, MovesThatCannotBeAreRefusedWithTheReason) {
  PlacementMoves m = Moves(2);
  PlacementMoves::Context c = At(3);
  c.running = false;
  ExpectRefused(m, ADD_SERVER, 2, c, "not running");
  c = At(3);
  c.rolling_back = true;
  ExpectRefused(m, ADD_SERVER, 2, c, "rollback");
  ExpectRefused(m, ADD_SERVER, 1, At(3), "has it already");
  ExpectRefused(m, DRAIN_SERVER, 5, At(3), "does not have it");
  ExpectRefused(m, ADD_SERVER, 2, At(100), "ends at clock 100");
  c = At(3);
  c.limits.budget[0] = 1000;  // it holds 4000
  ExpectRefused(m, DRAIN_SERVER, 1, c, "budget");
  ASSERT_TRUE(m.Ask(ADD_SERVER, 2, At(3), kNow).ok());
  ExpectRefused(m, DRAIN_SERVER, 0, At(3), "adding server 2 is under way");
  EXPECT_EQ(m.Ask(MOVE_KIND_UNSPECIFIED, 0, At(3), kNow).code(),
            absl::StatusCode::kInvalidArgument);

  PlacementMoves one = Moves(1);
  ExpectRefused(one, DRAIN_SERVER, 0, At(3), "last server");
  JobSpec pipeline;
  pipeline.set_pipeline_stages(2);
  PlacementMoves staged = Moves(2, pipeline);
  ExpectRefused(staged, ADD_SERVER, 2, At(3), "pipeline stages");
  JobSpec standby;
  standby.set_standby_copies(1);
  PlacementMoves copied = Moves(2, standby);
  ExpectRefused(copied, ADD_SERVER, 2, At(3), "standby copies");
  JobSpec tables;
  tables.add_tables()->set_name("emb");
  PlacementMoves sparse = Moves(2, tables);
  EXPECT_TRUE(sparse.Ask(ADD_SERVER, 2, At(3), kNow).ok());  // its row buckets move
  // Two chunks cannot give a third server one: its rows would miss the
  // checkpoints asked for (they come with the dense pushes).
  ParamInfo two;
  two.name = "w";
  two.numel = 200;
  two.shape = {200};
  tables.set_num_servers(2);
  PlacementMoves few(tables, Partition::Make({two}, 400, 2).value());
  ExpectRefused(few, ADD_SERVER, 2, At(3), "rows but no chunk");
  tables.mutable_tables(0)->set_admit_after(3);
  PlacementMoves admitted = Moves(2, tables);
  ExpectRefused(admitted, ADD_SERVER, 2, At(3), "admit_after");
}

TEST(PlacementMovesTest, ALostServerAbandonsTheMoveAndThePlacementStays) {
  PlacementMoves m = Moves(2);
  EXPECT_FALSE(m.ServerLost(0, kNow));  // no move
  ASSERT_TRUE(m.Ask(ADD_SERVER, 2, At(5), kNow).ok());
  EXPECT_TRUE(m.ServerLost(2, kNow));
  EXPECT_FALSE(m.moving());
  EXPECT_EQ(m.held_clock(), -1);
  EXPECT_EQ(m.placement().version(), 1);
  EXPECT_EQ(Servers(m.placement()), (std::vector<int>{0, 1}));
  ASSERT_EQ(m.Snapshot().history_size(), 1);
  EXPECT_EQ(m.Snapshot().history(0).abandoned(), "server 2 was lost");
  // Server 2 is out of the job, and told why.
  EXPECT_FALSE(m.InJob(2));
  EXPECT_TRUE(m.InJob(1));
  EXPECT_EQ(m.WhyOut(2), "the move that added server 2 was abandoned: server 2 was lost");
  // The next move starts afresh.
  ASSERT_TRUE(m.Ask(ADD_SERVER, 2, At(7), kNow).ok());
  EXPECT_EQ(m.next()->version(), 2);
  EXPECT_EQ(m.held_clock(), 6);
  EXPECT_TRUE(m.Abandon("a rollback began", kNow));
  EXPECT_FALSE(m.Abandon("again", kNow));
  EXPECT_EQ(m.Snapshot().history_size(), 2);
}

TEST(PlacementMovesTest, TheStateSurvivesATakeover) {
  PlacementMoves m = Moves(2);
  ASSERT_TRUE(m.Ask(ADD_SERVER, 2, At(5), kNow).ok());
  PlacementMoves taken = Moves(2);
  ASSERT_TRUE(taken.Restore(m.Snapshot()).ok());
  EXPECT_EQ(taken.held_clock(), 4);
  EXPECT_TRUE(taken.MaybeSwitch(true, kNow));
  EXPECT_EQ(taken.placement().version(), 2);

  MoveState bad = m.Snapshot();
  bad.mutable_move()->mutable_after()->add_chunk_server(0);  // 21 chunks
  PlacementMoves other = Moves(2);
  EXPECT_EQ(other.Restore(bad).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(other.moving());
}

}  // namespace
}  // namespace pstrain
