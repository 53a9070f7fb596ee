#include "scheduler/membership.h"

#include "gtest/gtest.h"

namespace pstrain {
namespace {

TEST(MembershipTest, IdsInOrderAndRetriesIdempotent) {
  Membership m(1, 2);
  const absl::Time now = absl::Now();
  EXPECT_EQ(m.Register(WORKER, "a:1", 10, now).value(), 0);
  EXPECT_EQ(m.Register(SERVER, "b:1", 11, now).value(), 0);
  EXPECT_FALSE(m.Complete());
  EXPECT_EQ(m.Register(WORKER, "c:1", 12, now).value(), 1);
  EXPECT_TRUE(m.Complete());
  EXPECT_EQ(m.Register(WORKER, "a:1", 10, now).value(), 0);  // retry
  ClusterMembers v = m.View();
  ASSERT_EQ(v.servers_size(), 1);
  ASSERT_EQ(v.workers_size(), 2);
  EXPECT_EQ(v.workers(1).address(), "c:1");
}

// A worker that joined without its model keeps the job from starting,
// and so it does after a restore of the durable state.
TEST(MembershipTest, AnUndeclaredWorkerKeepsItIncompleteAcrossARestore) {
  Membership m(1, 2);
  const absl::Time now = absl::Now();
  ASSERT_TRUE(m.Register(SERVER, "s:1", 1, now).ok());
  ASSERT_TRUE(m.Register(WORKER, "a:1", 2, now).ok());
  ASSERT_TRUE(m.Register(WORKER, "b:1", 3, now).ok());
  m.Get(WORKER, 1)->declared = false;
  EXPECT_FALSE(m.Complete());
  Membership restored(1, 2);
  ASSERT_TRUE(restored.Restore(m.Snapshot(), now).ok());
  EXPECT_FALSE(restored.Complete());
  restored.Get(WORKER, 1)->declared = true;
  EXPECT_TRUE(restored.Complete());
}

TEST(MembershipTest, RefusesDuplicatesAndExtras) {
  Membership m(1, 1);
  const absl::Time now = absl::Now();
  ASSERT_TRUE(m.Register(WORKER, "a:1", 10, now).ok());
  EXPECT_EQ(m.Register(WORKER, "a:1", 99, now).status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(m.Register(SERVER, "a:1", 10, now).status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(m.Register(WORKER, "z:1", 13, now).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(m.Register(SCHEDULER, "y:1", 14, now).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.Register(SERVER, "", 14, now).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(MembershipTest, FindChecksTheSender) {
  Membership m(1, 1);
  ASSERT_TRUE(m.Register(WORKER, "a:1", 10, absl::Now()).ok());
  EXPECT_TRUE(m.Find(WORKER, 0, 10).ok());
  EXPECT_EQ(m.Find(WORKER, 0, 11).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(m.Find(WORKER, 1, 10).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(m.Find(SERVER, 0, 10).status().code(), absl::StatusCode::kNotFound);
}

TEST(MembershipTest, ReplaceGivesAnIdToAnotherProcess) {
  Membership m(2, 1);
  ASSERT_TRUE(m.Register(SERVER, "a:1", 10, absl::Now()).ok());
  ASSERT_TRUE(m.Register(SERVER, "b:1", 11, absl::Now()).ok());
  ASSERT_TRUE(m.Replace(SERVER, 1, "c:1", 12, absl::Now()).ok());
  EXPECT_TRUE(m.Find(SERVER, 1, 12).ok());
  EXPECT_EQ(m.Find(SERVER, 1, 11).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(m.View().servers(1).address(), "c:1");
  EXPECT_EQ(m.Get(SERVER, 1)->state, REGISTERED);
  EXPECT_EQ(m.Replace(SERVER, 1, "a:1", 13, absl::Now()).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(m.Replace(SERVER, 2, "d:1", 13, absl::Now()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(m.Replace(SERVER, 1, "c:1", 14, absl::Now()).ok());  // its own address again
}

}  // namespace
}  // namespace pstrain
