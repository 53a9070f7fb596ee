// OperatorControl: psctl checkpoint, drain and set-consistency.
#include "scheduler/operator_control.h"

#include "gtest/gtest.h"

namespace pstrain {
namespace {

const absl::Time kNow = absl::FromUnixSeconds(100);

JobSpec Job(Consistency consistency, int64_t checkpoint_every) {
  JobSpec job;
  job.mutable_data()->set_dataset(SYNTHETIC);
  job.set_num_servers(1);
  job.set_num_workers(2);
  job.set_batch_size(8);
  job.set_clocks(100);
  job.set_consistency(consistency);
  if (consistency == SSP) job.set_staleness(2);
  if (checkpoint_every > 0) {
    job.set_checkpoint_every(checkpoint_every);
    job.set_checkpoint_dir("/ckpt");
  }
  ApplyJobDefaults(&job);
  return job;
}

ControlRequest Ask(ControlAction action, Consistency consistency = CONSISTENCY_UNSPECIFIED,
                   int staleness = 0) {
  ControlRequest req;
  req.set_action(action);
  req.set_consistency(consistency);
  req.set_staleness(staleness);
  return req;
}

TEST(OperatorControlTest, ACheckpointIsAskedAFewClocksAheadOfTheFastestWorker) {
  OperatorControl control(Job(BSP, 10));
  const int64_t total = control.total_clocks();
  EXPECT_EQ(control.Ask(Ask(CHECKPOINT), /*fastest=*/5, kNow).value(), 8);
  EXPECT_EQ(control.checkpoint_asked(), 8);
  EXPECT_FALSE(control.draining());
  EXPECT_EQ(control.Ask(Ask(CHECKPOINT), total - 1, kNow).value(), total);  // not past the end
  EXPECT_TRUE(absl::IsInvalidArgument(control.Ask(Ask(STOP), 5, kNow).status()));
}

TEST(OperatorControlTest, ADrainEndsTheJobAtItsCheckpointOnce) {
  OperatorControl control(Job(BSP, 10));
  EXPECT_EQ(control.Ask(Ask(DRAIN), 20, kNow).value(), 23);
  EXPECT_TRUE(control.draining());
  EXPECT_EQ(control.total_clocks(), 23);
  const absl::Status again = control.Ask(Ask(DRAIN), 21, kNow).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(again));
  EXPECT_EQ(again.message(), "the job is already draining to clock 23");
}

TEST(OperatorControlTest, NoCheckpointsNoCheckpointRequests) {
  OperatorControl control(Job(BSP, 0));
  EXPECT_TRUE(absl::IsFailedPrecondition(control.Ask(Ask(CHECKPOINT), 5, kNow).status()));
  EXPECT_EQ(control.checkpoint_asked(), 0);
}

TEST(OperatorControlTest, TheConsistencyChangesFromAClockNoWorkerHasStarted) {
  OperatorControl control(Job(BSP, 0));
  EXPECT_EQ(control.Ask(Ask(SET_CONSISTENCY, SSP, 3), 10, kNow).value(), 13);
  EXPECT_EQ(control.schedule().StalenessAt(12), 0);
  EXPECT_EQ(control.schedule().StalenessAt(13), 3);
  // One at a time, and back to BSP (a job started under BSP keeps round sums).
  EXPECT_TRUE(
      absl::IsFailedPrecondition(control.Ask(Ask(SET_CONSISTENCY, ASP), 10, kNow).status()));
  EXPECT_EQ(control.Ask(Ask(SET_CONSISTENCY, BSP), 11, kNow).value(), 14);
  ASSERT_EQ(control.Snapshot().consistency_changes_size(), 2);
  EXPECT_EQ(control.Snapshot().consistency_changes(1).unix_ms(), absl::ToUnixMillis(kNow));
}

TEST(OperatorControlTest, BadChangesAreRefused) {
  OperatorControl ssp(Job(SSP, 0));
  EXPECT_TRUE(absl::IsFailedPrecondition(ssp.Ask(Ask(SET_CONSISTENCY, BSP), 1, kNow).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ssp.Ask(Ask(SET_CONSISTENCY, SSP, -1), 1, kNow).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ssp.Ask(Ask(SET_CONSISTENCY, ASP, 2), 1, kNow).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ssp.Ask(Ask(SET_CONSISTENCY), 1, kNow).status()));
  EXPECT_TRUE(absl::IsFailedPrecondition(
      ssp.Ask(Ask(SET_CONSISTENCY, ASP), ssp.total_clocks(), kNow).status()));  // too late
  EXPECT_TRUE(ssp.schedule().changes().empty());
}

TEST(OperatorControlTest, RestoreChecksTheClocks) {
  OperatorControl control(Job(BSP, 10));
  ControlState state;
  state.set_total_clocks(50);
  state.set_draining(true);
  state.add_consistency_changes()->set_clock(7);
  state.mutable_consistency_changes(0)->set_consistency(ASP);
  ASSERT_TRUE(control.Restore(state, 100).ok());
  EXPECT_EQ(control.total_clocks(), 50);
  EXPECT_EQ(control.schedule().StalenessAt(7), -1);  // the schedule follows the state
  for (auto damage : std::vector<std::function<void(ControlState*)>>{
           [](ControlState* s) { s->set_total_clocks(101); },
           [](ControlState* s) { s->set_total_clocks(-1); },
           [](ControlState* s) { s->set_checkpoint_asked(-1); },
           [](ControlState* s) { s->mutable_consistency_changes(0)->set_clock(-1); },
       }) {
    ControlState bad = state;
    damage(&bad);
    EXPECT_TRUE(absl::IsInvalidArgument(control.Restore(bad, 100)));
  }
}

}  // namespace
}  // namespace pstrain
