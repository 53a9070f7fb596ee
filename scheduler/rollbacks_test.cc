// Rollbacks: a generation's clock, its end, the manifest, takeovers.
#include "scheduler/rollbacks.h"

#include "gtest/gtest.h"

namespace pstrain {
namespace {

// Complete checkpoint sets at fixed clocks.
class FakeCatalog : public CheckpointCatalog {
 public:
  std::vector<int64_t> complete;  // ascending
  int64_t NewestCompleteSet(const std::vector<int>& servers, int64_t at_most) override {
    asked_servers = servers;
    int64_t best = 0;
    for (int64_t c : complete) {
      if (c <= at_most) best = c;
    }
    return best;
  }
  std::vector<int> asked_servers;
};

JobSpec WithCheckpoints(int64_t every) {
  JobSpec job;
  job.set_num_servers(2);
  job.set_checkpoint_every(every);
  job.set_checkpoint_dir("/ckpt");
  return job;
}

class RollbacksTest : public ::testing::Test {
 protected:
  RollbacksTest() : members_(2, 1) {
    for (int s = 0; s < 2; ++s) {
      EXPECT_TRUE(members_.Register(SERVER, "s" + std::to_string(s), 1, now_).ok());
    }
  }
  // Server `s` reports generation `g` and a checkpoint of `clock`.
  void Report(int s, int64_t g, int64_t clock = 0) {
    members_.Get(SERVER, s)->status.set_generation(g);
    members_.Get(SERVER, s)->status.mutable_server()->set_checkpoint_clock(clock);
  }

  absl::Time now_ = absl::FromUnixSeconds(100);
  FakeCatalog catalog_;
  Membership members_;
};

TEST_F(RollbacksTest, ARollbackGoesToTheNewestCompleteSetAndEndsWhenEveryServerRestored) {
  catalog_.complete = {10, 20, 30};
  Rollbacks rollbacks(WithCheckpoints(10), {0, 1}, &catalog_, /*start_clock=*/0);
  EXPECT_EQ(rollbacks.Begin("server 1 declared dead", /*from=*/27, now_), 20);
  EXPECT_EQ(catalog_.asked_servers, std::vector<int>({0, 1}));
  EXPECT_EQ(rollbacks.generation(), 1);
  EXPECT_EQ(rollbacks.restore_clock(), 20);
  EXPECT_TRUE(rollbacks.rolling_back());
  ASSERT_EQ(rollbacks.history().size(), 1);
  EXPECT_EQ(rollbacks.history()[0].from_clock(), 27);
  MemberStatus me;
  Report(0, 1);
  members_.Get(SERVER, 1)->state = DEAD;
  rollbacks.AddWait(members_, &me);
  EXPECT_EQ(me.waits(0).what(),
            "rolling back to the checkpoint of clock 20 (generation 1): waiting for a "
            "replacement of server 1 (ps_server --id=1)");
  EXPECT_FALSE(rollbacks.MaybeEnd(members_, now_));
  members_.Get(SERVER, 1)->state = RUNNING;
  EXPECT_FALSE(rollbacks.MaybeEnd(members_, now_));  // still at generation 0
  Report(1, 1);
  now_ += absl::Seconds(3);
  EXPECT_TRUE(rollbacks.MaybeEnd(members_, now_));
  EXPECT_FALSE(rollbacks.rolling_back());
  EXPECT_EQ(rollbacks.history()[0].done_unix_ms(), absl::ToUnixMillis(now_));
  EXPECT_FALSE(rollbacks.MaybeEnd(members_, now_));  // once
}

TEST_F(RollbacksTest, ARollbackNeverGoesBehindTheManifestNorHasAClockWithoutCheckpoints) {
  Rollbacks resumed(WithCheckpoints(10), {0, 1}, &catalog_, /*start_clock=*/40);
  EXPECT_EQ(resumed.Begin("why", 45, now_), 40);  // the catalog has nothing: the manifest's
  Rollbacks none(WithCheckpoints(0), {0, 1}, &catalog_, 0);
  EXPECT_EQ(none.Begin("why", 45, now_), 0);
}

TEST_F(RollbacksTest, TheManifestNamesTheClockEveryChunkServerHasOneAtATime) {
  Rollbacks rollbacks(WithCheckpoints(10), {0, 1}, &catalog_, 0);
  Report(0, 0, 20);
  Report(1, 0, 10);
  EXPECT_EQ(rollbacks.TakeManifestToWrite(members_), 10);
  Report(1, 0, 20);
  EXPECT_FALSE(rollbacks.TakeManifestToWrite(members_).has_value());  // one in flight
  EXPECT_FALSE(rollbacks.ManifestWritten(10, absl::InternalError("disk full")));
  EXPECT_EQ(rollbacks.manifest_clock(), 0);
  EXPECT_EQ(rollbacks.TakeManifestToWrite(members_), 20);
  EXPECT_TRUE(rollbacks.ManifestWritten(20, absl::OkStatus()));
  EXPECT_EQ(rollbacks.manifest_clock(), 20);
  EXPECT_FALSE(rollbacks.TakeManifestToWrite(members_).has_value());  // nothing newer
  rollbacks.Begin("why", 25, now_);
  Report(0, 1, 30);
  Report(1, 0, 30);  // not restored yet: its checkpoints are of the old generation
  EXPECT_FALSE(rollbacks.TakeManifestToWrite(members_).has_value());
}

TEST_F(RollbacksTest, RestoreChecksTheClocksAndNeverMovesTheManifestBack) {
  Rollbacks rollbacks(WithCheckpoints(10), {0, 1}, &catalog_, /*start_clock=*/30);
  RollbackState state;
  state.set_generation(2);
  state.set_restore_clock(20);
  state.set_manifest_clock(20);  // the directory's manifest (30) is newer
  ASSERT_TRUE(rollbacks.Restore(state, /*max_clock=*/100).ok());
  EXPECT_EQ(rollbacks.generation(), 2);
  EXPECT_EQ(rollbacks.manifest_clock(), 30);
  for (auto damage : std::vector<std::function<void(RollbackState*)>>{
           [](RollbackState* s) { s->set_restore_clock(101); },
           [](RollbackState* s) { s->set_manifest_clock(-1); },
           [](RollbackState* s) { s->set_generation(-1); },
           [](RollbackState* s) { s->set_rolling_back(true); },  // no rollback in the history
       }) {
    RollbackState bad = state;
    damage(&bad);
    EXPECT_TRUE(absl::IsInvalidArgument(rollbacks.Restore(bad, 100)));
  }
  EXPECT_EQ(rollbacks.generation(), 2);
}

}  // namespace
}  // namespace pstrain
