#include "server/member_loop.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

// Records what the loop does.
class FakeActions : public ServerActions {
 public:
  std::vector<std::string> calls;
  int64_t held_generation = 0;
  absl::Status restore_result;

  int64_t generation() const override { return held_generation; }
  void RemoveWorker(int w) override { calls.push_back(absl::StrCat("remove ", w)); }
  void WakePulls() override { calls.push_back("wake"); }
  absl::Status Restore(int64_t generation, int64_t clock, const Placement&) override {
    calls.push_back(absl::StrCat("restore ", generation, "@", clock));
    if (restore_result.ok()) held_generation = generation;
    return restore_result;
  }
  void CancelParked(const absl::Status& why, int64_t generation) override {
    calls.push_back(absl::StrCat("cancel ", why.message(), " before ", generation));
  }
  void Prune(int64_t clock) override { calls.push_back(absl::StrCat("prune ", clock)); }
  // "V@G after N": the move of placement V followed in generation G, once
  // N other calls were made.
  std::vector<std::string> follows;
  void FollowMove(const MoveNews& move, int64_t generation) override {
    follows.push_back(absl::StrCat(move.to().version(), "@", generation, " after ", calls.size()));
  }
};

TEST(ServerMemberLoopTest, ADeadWorkerLeavesOnceAndWakesThePulls) {
  FakeActions actions;
  ServerMemberLoop loop(3, &actions);
  ClusterNews news;
  news.job_state = RUNNING_JOB;
  news.dead_workers = {1, 7, -1};  // unknown ids are ignored
  ASSERT_EQ(*loop.Adopt(news), std::nullopt);
  EXPECT_EQ(actions.calls, (std::vector<std::string>{"remove 1", "wake"}));
  actions.calls.clear();
  ASSERT_EQ(*loop.Adopt(news), std::nullopt);  // the same news again: nothing
  EXPECT_TRUE(actions.calls.empty());
}

TEST(ServerMemberLoopTest, TheWorkersLeftOutStayOutOfTheShardARestorePlacesAnew) {
  FakeActions actions;
  ServerMemberLoop loop(2, &actions);
  ClusterNews news;
  news.job_state = RUNNING_JOB;
  news.dead_workers = {1};
  ASSERT_EQ(*loop.Adopt(news), std::nullopt);
  actions.calls.clear();
  news.generation = 1;  // a move's switch: the runtime makes a new shard
  news.restore_clock = 44;
  ASSERT_EQ(*loop.Adopt(news), std::nullopt);
  ASSERT_GE(actions.calls.size(), 2u);
  EXPECT_EQ(actions.calls[0], "restore 1@44");
  EXPECT_EQ(actions.calls[1], "remove 1");
}

TEST(ServerMemberLoopTest, AServerOutOfTheJobLeavesDoneWithoutRestoring) {
  FakeActions actions;
  ServerMemberLoop loop(2, &actions);
  ClusterNews news;
  news.job_state = RUNNING_JOB;
  news.generation = 1;  // the drain's switch
  news.restore_clock = 40;
  news.leave = "server 1 was drained at clock 40 (placement 2)";
  absl::StatusOr<std::optional<JobState>> end = loop.Adopt(news);
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(*end, DONE);
  EXPECT_TRUE(actions.calls.empty());  // its chunks are the others' now
}

TEST(ServerMemberLoopTest, ANewerGenerationRestoresItsCheckpointAndEndsOldCalls) {
  FakeActions actions;
  ServerMemberLoop loop(2, &actions);
  ClusterNews news;
  news.job_state = RUNNING_JOB;
  news.generation = 1;
  news.restore_clock = 90;
  ASSERT_EQ(*loop.Adopt(news), std::nullopt);
  EXPECT_EQ(
      actions.calls,
      (std::vector<std::string>{
          "restore 1@90", "cancel the cluster rolled back to clock 90 (generation 1) before 1"}));
  actions.calls.clear();
  ASSERT_EQ(*loop.Adopt(news), std::nullopt);  // restored already
  EXPECT_TRUE(actions.calls.empty());
}

TEST(ServerMemberLoopTest, AMoveIsFollowedAndItsSwitchRestoresBeforeTheMoveIsDropped) {
  FakeActions actions;
  ServerMemberLoop loop(2, &actions);
  ClusterNews news;
  news.job_state = RUNNING_JOB;
  news.move.mutable_to()->set_version(2);
  news.move.set_switch_clock(40);
  ASSERT_EQ(*loop.Adopt(news), std::nullopt);
  EXPECT_EQ(actions.follows, std::vector<std::string>{"2@0 after 0"});
  // The switch: a new generation, no move; the restore takes the handover
  // of the move followed, which is dropped only then.
  news.move.Clear();
  news.generation = 1;
  news.restore_clock = 40;
  ASSERT_EQ(*loop.Adopt(news), std::nullopt);
  ASSERT_EQ(actions.follows.size(), 2u);
  EXPECT_EQ(actions.follows[1], "0@1 after 2");  // after the restore and the cancel
  EXPECT_EQ(actions.calls[0], "restore 1@40");
}

TEST(ServerMemberLoopTest, AFailedRestoreIsTheLoopsError) {
  FakeActions actions;
  actions.restore_result = absl::InvalidArgumentError("checkpoint x: truncated");
  ServerMemberLoop loop(2, &actions);
  ClusterNews news;
  news.job_state = RUNNING_JOB;
  news.generation = 2;
  const absl::StatusOr<std::optional<JobState>> r = loop.Adopt(news);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ServerMemberLoopTest, ANewerManifestPrunesAndTheJobsEndEndsTheLoop) {
  FakeActions actions;
  ServerMemberLoop loop(2, &actions);
  ClusterNews news;
  news.job_state = RUNNING_JOB;
  news.manifest_clock = 40;
  ASSERT_EQ(*loop.Adopt(news), std::nullopt);
  ASSERT_EQ(*loop.Adopt(news), std::nullopt);
  EXPECT_EQ(actions.calls, (std::vector<std::string>{"prune 40"}));
  news.job_state = DONE;
  EXPECT_EQ(*loop.Adopt(news), DONE);
  news.job_state = ABORTED;
  EXPECT_EQ(*loop.Adopt(news), ABORTED);
}

}  // namespace
}  // namespace pstrain
