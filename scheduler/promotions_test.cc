// Promotions: which server serves each server's chunks as servers die,
// fill their standby copies, are replaced, and the cluster rolls back.
#include "scheduler/promotions.h"

#include <string>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

JobSpec Job(int servers, int standby_copies = 1) {
  JobSpec job;
  job.set_num_servers(servers);
  job.set_standby_copies(standby_copies);
  return job;
}

// A server's heartbeat Status saying its copies are (not) filled for `routes`.
MemberStatus Ready(const Promotions& p, bool ready = true) {
  MemberStatus st;
  st.mutable_server()->mutable_standby()->set_ready(ready);
  st.mutable_server()->mutable_standby()->set_routes_version(p.routes().version());
  return st;
}

Promotions Registered(int servers) {
  Promotions p(Job(servers));
  for (int s = 0; s < servers; ++s) p.Registered(s, "host:" + std::to_string(s));
  for (int s = 0; s < servers; ++s) p.Reported(s, Ready(p));
  return p;
}

TEST(PromotionsTest, WithoutReplicasThereAreNoRoutes) {
  Promotions p(Job(3, 0));
  EXPECT_FALSE(p.enabled());
  EXPECT_EQ(p.routes().serving_size(), 0);
  std::string why;
  EXPECT_FALSE(p.Promote(1, &why));
}

TEST(PromotionsTest, EachServerServesItsOwnChunksAtFirst) {
  Promotions p = Registered(3);
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(p.routes().serving(s), s);
    EXPECT_EQ(p.routes().addresses(s), "host:" + std::to_string(s));
    EXPECT_TRUE(p.routes().ready(s));
  }
}

TEST(PromotionsTest, ADeadServersChunksGoToTheNextServer) {
  Promotions p = Registered(3);
  const int64_t version = p.routes().version();
  std::string why;
  ASSERT_TRUE(p.Promote(1, &why)) << why;
  EXPECT_EQ(p.routes().serving(1), 2);
  EXPECT_EQ(p.routes().serving(0), 0);
  EXPECT_EQ(p.routes().addresses(1), "");
  EXPECT_FALSE(p.routes().ready(1));
  EXPECT_GT(p.routes().version(), version);
  // Counted once the server it promoted took it up (reported the routes).
  EXPECT_EQ(p.promotions(), 0);
  p.Reported(0, Ready(p));
  EXPECT_EQ(p.promotions(), 0);
  MemberStatus older = Ready(p);
  older.mutable_server()->mutable_standby()->set_routes_version(version);
  p.Reported(2, older);
  EXPECT_EQ(p.promotions(), 0);
  p.Reported(2, Ready(p));
  EXPECT_EQ(p.promotions(), 1);
  p.Reported(2, Ready(p));
  EXPECT_EQ(p.promotions(), 1);
}

// Both servers of a pair lost together: the first death promotes onto the
// other, which is dead too but not declared yet; it never takes the
// promotion up, and at its own death nothing is counted.
TEST(PromotionsTest, APromotionOntoAServerThatDiedTooIsNotCounted) {
  Promotions p = Registered(2);
  std::string why;
  ASSERT_TRUE(p.Promote(0, &why)) << why;
  EXPECT_EQ(p.routes().serving(0), 1);
  EXPECT_FALSE(p.Promote(1, &why));
  EXPECT_NE(why.find("is gone too"), std::string::npos) << why;
  EXPECT_EQ(p.promotions(), 0);
  EXPECT_EQ(p.Snapshot().pending_size(), 0);
}

TEST(PromotionsTest, AStandbyThatHasNotFilledItsCopiesCannotTakeOver) {
  Promotions p = Registered(2);
  p.Reported(1, Ready(p, /*ready=*/false));
  std::string why;
  EXPECT_FALSE(p.Promote(0, &why));
  EXPECT_NE(why.find("has not filled"), std::string::npos) << why;
  EXPECT_EQ(p.routes().serving(0), 0);  // nothing moved
  EXPECT_EQ(p.promotions(), 0);
}

TEST(PromotionsTest, AReadinessReportedForOlderRoutesDoesNotCount) {
  Promotions p = Registered(2);
  std::string why;
  ASSERT_TRUE(p.Promote(1, &why));
  MemberStatus stale = Ready(p);
  p.Registered(1, "host:1b");  // the replacement: routes change again
  p.Reported(1, stale);
  EXPECT_FALSE(p.routes().ready(1));
  p.Reported(1, Ready(p));
  EXPECT_TRUE(p.routes().ready(1));
}

TEST(PromotionsTest, AReplacementFilledInTakesOverAtTheSecondDeath) {
  std::string why;
  {
    Promotions alone = Registered(2);
    ASSERT_TRUE(alone.Promote(1, &why));  // server 0 serves both
    EXPECT_EQ(alone.routes().serving(1), 0);
    EXPECT_FALSE(alone.Promote(0, &why)) << "server 1 is gone: no standby";
  }
  Promotions p = Registered(2);
  ASSERT_TRUE(p.Promote(1, &why));
  p.Registered(1, "host:1b");
  EXPECT_FALSE(p.routes().ready(1));
  p.Reported(1, Ready(p));
  p.Reported(0, Ready(p));  // server 0 took the first promotion up
  ASSERT_TRUE(p.Promote(0, &why)) << why;
  EXPECT_EQ(p.routes().serving(0), 1);
  EXPECT_EQ(p.routes().serving(1), 1);
  EXPECT_EQ(p.promotions(), 1);
  p.Reported(1, Ready(p));
  EXPECT_EQ(p.promotions(), 2);
}

TEST(PromotionsTest, ARollbackServesEveryServersChunksFromItselfAgain) {
  Promotions p = Registered(3);
  std::string why;
  ASSERT_TRUE(p.Promote(2, &why));
  p.Registered(2, "host:2b");
  p.Reset();
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(p.routes().serving(s), s);
    EXPECT_FALSE(p.routes().ready(s));
  }
}

TEST(PromotionsTest, RestoreChecksTheRoutesAgainstTheJob) {
  Promotions p = Registered(2);
  PromotionState bad = p.Snapshot();
  bad.mutable_routes()->set_serving(0, 7);
  EXPECT_FALSE(p.Restore(bad).ok());
  PromotionState shorter = p.Snapshot();
  shorter.mutable_routes()->mutable_serving()->RemoveLast();
  EXPECT_FALSE(p.Restore(shorter).ok());
  std::string why;
  ASSERT_TRUE(p.Promote(1, &why));
  Promotions taken(Job(2));
  ASSERT_TRUE(taken.Restore(p.Snapshot()).ok());
  EXPECT_EQ(taken.routes().serving(1), 0);
  EXPECT_EQ(taken.routes().version(), p.routes().version());
  EXPECT_EQ(taken.promotions(), 0);  // not yet taken up: kept across a takeover
  taken.Reported(0, Ready(taken));
  EXPECT_EQ(taken.promotions(), 1);
  PromotionState out_of_range = p.Snapshot();
  out_of_range.mutable_pending(0)->set_to(0, 9);
  EXPECT_FALSE(p.Restore(out_of_range).ok());
}

}  // namespace
}  // namespace pstrain
