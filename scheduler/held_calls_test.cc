// HeldCalls: room per member, answers in order, forgetting, the waits.
#include "scheduler/held_calls.h"

#include <optional>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(100);

HeldCall Gate(Ticket t, int worker, int64_t clock, bool stale = false) {
  return HeldCall{t, /*gate=*/true, worker, clock, kT0, stale};
}
HeldCall Norm(Ticket t, int server, int64_t clock) {
  return HeldCall{t, /*gate=*/false, server, clock, kT0};
}

std::vector<Ticket> Tickets(const std::vector<Release>& releases) {
  std::vector<Ticket> out;
  for (const Release& r : releases) out.push_back(r.ticket);
  return out;
}

TEST(HeldCallsTest, AMemberHasRoomForAFewCallsOfEachKind) {
  HeldCalls held;
  for (int i = 0; i < HeldCalls::kMaxPerMember; ++i) ASSERT_TRUE(held.Hold(Gate(i, 0, 5)).ok());
  const absl::Status full = held.Hold(Gate(100, 0, 5));
  EXPECT_TRUE(absl::IsResourceExhausted(full));
  EXPECT_EQ(full.message(), "worker 0 already has 8 gate calls waiting");
  EXPECT_TRUE(held.Hold(Gate(101, 1, 5)).ok());  // another worker
  EXPECT_TRUE(held.Hold(Norm(102, 0, 5)).ok());  // server 0's norm
  held.Forget(3);                                // a cancelled call makes room
  EXPECT_TRUE(held.Hold(Gate(103, 0, 5)).ok());
}

TEST(HeldCallsTest, AnsweredCallsLeaveInOrderAndTheOthersStay) {
  HeldCalls held;
  ASSERT_TRUE(held.Hold(Gate(1, 0, 3)).ok());
  ASSERT_TRUE(held.Hold(Norm(2, 1, 3)).ok());
  ASSERT_TRUE(held.Hold(Gate(3, 1, 4)).ok());
  ASSERT_TRUE(held.Hold(Gate(4, 2, 3)).ok());
  held.Forget(4);
  // Gates of clock 3 may go.
  held.Answer([](const HeldCall& h) -> std::optional<Release> {
    if (!h.gate || h.clock != 3) return std::nullopt;
    Release r;
    r.gate.set_resume_clock(h.clock);
    return r;
  });
  std::vector<Release> out = held.TakeReleases();
  EXPECT_EQ(Tickets(out), std::vector<Ticket>({1}));  // 4 was forgotten
  EXPECT_EQ(out[0].gate.resume_clock(), 3);
  EXPECT_TRUE(held.TakeReleases().empty());
  // Everything else fails (the job ended), oldest first.
  held.Answer([](const HeldCall&) -> std::optional<Release> {
    Release r;
    r.status = absl::AbortedError("job ended");
    return r;
  });
  out = held.TakeReleases();
  EXPECT_EQ(Tickets(out), std::vector<Ticket>({2, 3}));
  EXPECT_TRUE(absl::IsAborted(out[1].status));
}

TEST(HeldCallsTest, AtGateCountsOnlyGateCallsOfTheCurrentGeneration) {
  HeldCalls held;
  ASSERT_TRUE(held.Hold(Gate(1, 0, 3, /*stale=*/true)).ok());
  ASSERT_TRUE(held.Hold(Norm(2, 1, 3)).ok());
  EXPECT_FALSE(held.AtGate(0));
  EXPECT_FALSE(held.AtGate(1));
  ASSERT_TRUE(held.Hold(Gate(3, 1, 3)).ok());
  EXPECT_TRUE(held.AtGate(1));
}

TEST(HeldCallsTest, WaitsListNormsThenGates) {
  HeldCalls held;
  ASSERT_TRUE(held.Hold(Gate(1, 0, 3)).ok());
  ASSERT_TRUE(held.Hold(Norm(2, 1, 2)).ok());
  MemberStatus me;
  held.AddWaits(/*slowest_clock=*/2, &me);
  ASSERT_EQ(me.waits_size(), 2);
  EXPECT_EQ(me.waits(0).what(),
            "server 1's norm of BSP round 2, waiting for the other servers' norms");
  EXPECT_EQ(me.waits(1).what(),
            "worker 0 at the gate of clock 3 (the slowest worker has finished 2 clocks)");
  EXPECT_EQ(me.waits(1).since_unix_ms(), absl::ToUnixMillis(kT0));
}

}  // namespace
}  // namespace pstrain
