// The standby layer's decisions over parts of a kind of the test's own:
// the state at start and after a rollback, role changes and their hooks,
// a change shipped or confirmed at once, a copy's answer to its primary's
// changes, copies forgotten, a replacement joining, a dead worker left out,
// and what Status reports.
#include "server/standby_parts.h"

#include <vector>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

// A part that counts its hooks.
struct CountingPart : StandbyPart {
  CountingPart() : StandbyPart({true, true}) {}
  void Promoted() override { ++promoted; }
  void Joined() override { ++joined; }
  void Touched() override { ++touched; }
  int promoted = 0, joined = 0, touched = 0;
};

TEST(StandbyStateTest, StartsServedWhenOwnElseStale) {
  StandbyState own, copy;
  own.Reset(true, {0, 0});
  copy.Reset(false, {0, 0});
  EXPECT_TRUE(own.serving);
  EXPECT_EQ(own.version, 0);
  EXPECT_EQ(own.lag(), 0);
  EXPECT_FALSE(copy.serving);
  EXPECT_TRUE(copy.stale());
  // A rollback keeps a served part's count of changes and confirms them.
  own.version = 7;
  own.Reset(true, {3, 3});
  EXPECT_EQ(own.version, 7);
  EXPECT_EQ(own.confirmed, 7);
  EXPECT_EQ(own.replicated, (std::vector<int64_t>{3, 3}));
  // A demoted part (-1) served again after a rollback counts from 0.
  StandbyState demoted;
  demoted.Reset(false, {});
  demoted.Reset(true, {});
  EXPECT_EQ(demoted.version, 0);
}

TEST(StandbyStateTest, ShipsOnlyWithAStandbyToWaitFor) {
  StandbyState s;
  s.Reset(true, {0});
  EXPECT_EQ(s.Changed(/*sink=*/true, /*whole=*/false, {1}), StandbyState::Ship::kNothing);
  EXPECT_EQ(s.version, 1);
  EXPECT_EQ(s.lag(), 0);  // nothing to wait for: confirmed at once
  s.SetRole(true, /*ship=*/true, {1});
  EXPECT_EQ(s.Changed(true, false, {2}), StandbyState::Ship::kChange);
  EXPECT_EQ(s.Changed(true, /*whole=*/true, {2}), StandbyState::Ship::kWhole);
  EXPECT_EQ(s.lag(), 2);
  EXPECT_FALSE(s.Holds(0, 1));
  s.Confirm(2, {2});
  EXPECT_EQ(s.lag(), 1);
  EXPECT_TRUE(s.Holds(0, 1));
  EXPECT_FALSE(s.Holds(0, 2));
  s.Confirm(1, {1});  // older: ignored
  EXPECT_EQ(s.confirmed, 2);
  EXPECT_EQ(s.Changed(/*sink=*/false, false, {3}), StandbyState::Ship::kNothing);
  EXPECT_EQ(s.lag(), 0);
  StandbyState copy;
  copy.Reset(false, {0});
  EXPECT_EQ(copy.Changed(true, false, {1}), StandbyState::Ship::kNothing);
  EXPECT_EQ(copy.version, -1);  // a copy's changes are its primary's
}

TEST(StandbyStateTest, ACopyFollowsOnlyTheNextChange) {
  StandbyState copy;
  copy.Reset(false, {0});
  EXPECT_EQ(copy.TakeOf(1, /*whole=*/false), StandbyState::Take::kNeedWhole);  // stale
  EXPECT_EQ(copy.TakeOf(4, /*whole=*/true), StandbyState::Take::kWhole);
  copy.version = 4;
  EXPECT_EQ(copy.TakeOf(5, false), StandbyState::Take::kApply);
  EXPECT_EQ(copy.TakeOf(4, false), StandbyState::Take::kHeld);
  EXPECT_EQ(copy.TakeOf(6, false), StandbyState::Take::kNeedWhole);  // one lost
  EXPECT_EQ(copy.TakeOf(3, true), StandbyState::Take::kHeld);        // a late retry
  EXPECT_EQ(copy.TakeOf(4, true), StandbyState::Take::kWhole);
}

TEST(StandbyPartsTest, RoutesPromoteDemoteAndReport) {
  CountingPart own, copy;
  StandbyParts parts;
  parts.Add(1, &own);
  parts.Add(0, &copy);
  {
    absl::MutexLock a(&own.mu), b(&copy.mu);
    own.standby.Reset(true, own.clocks.applied());
    copy.standby.Reset(false, copy.clocks.applied());
  }
  EXPECT_FALSE(parts.Filled());
  EXPECT_EQ(parts.Homes(true), std::vector<int>{1});
  EXPECT_EQ(parts.Homes(false), std::vector<int>{0});
  // Server 0 died: this server serves both, with no standby to wait for.
  EXPECT_TRUE(parts.SetRoles({true, true}, {false, false}));
  EXPECT_EQ(copy.promoted, 1);
  EXPECT_EQ(own.promoted, 0);
  EXPECT_EQ(own.touched, 1);
  EXPECT_TRUE(parts.Filled());
  EXPECT_EQ(parts.Homes(true), (std::vector<int>{1, 0}));
  EXPECT_FALSE(parts.SetRoles({true, true}, {false, false}));  // nothing new
  // Server 0 is back and serves its own again: the copy is stale.
  EXPECT_TRUE(parts.SetRoles({true, true}, {false, true}));  // its own has a standby again
  EXPECT_TRUE(parts.SetRoles({false, true}, {false, true}));
  EXPECT_FALSE(parts.Filled());
  {
    absl::MutexLock a(&own.mu);
    EXPECT_EQ(own.standby.Changed(true, false, own.clocks.applied()), StandbyState::Ship::kChange);
  }
  EXPECT_EQ(parts.Lag(), 1);
}

TEST(StandbyPartsTest, ForgetJoinAndRemoveWorker) {
  CountingPart own, copy;
  StandbyParts parts, both;
  parts.Add(1, &own);
  parts.Add(0, &copy);
  both.AddAll(parts);
  {
    absl::MutexLock a(&own.mu), b(&copy.mu);
    own.standby.Reset(true, own.clocks.applied());
    copy.standby.Reset(false, copy.clocks.applied());
    copy.standby.version = 3;  // filled
  }
  EXPECT_TRUE(both.Filled());
  both.ForgetCopies();
  EXPECT_FALSE(both.Filled());
  {
    absl::MutexLock a(&own.mu);
    EXPECT_TRUE(own.standby.serving);  // a served part is not forgotten
  }
  int removed = 0;
  both.RemoveWorker(1, [&](StandbyPart& p) { ++removed; });
  both.RemoveWorker(1, [&](StandbyPart& p) { ++removed; });  // idempotent
  both.RemoveWorker(5, [&](StandbyPart& p) { ++removed; });  // no such worker
  EXPECT_EQ(removed, 2);
  both.JoinAsStandby(4);
  EXPECT_EQ(own.joined, 1);
  EXPECT_EQ(copy.joined, 1);
  absl::MutexLock a(&own.mu);
  EXPECT_EQ(own.generation, 4);
  EXPECT_TRUE(own.standby.stale());
}

}  // namespace
}  // namespace pstrain
