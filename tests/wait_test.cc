// The reads of a Status the tests' predicates use, on Statuses written by
// hand, and WaitForStatus giving up on a scheduler that does not answer.
#include "tests/wait.h"

#include "absl/time/clock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace testing {
namespace {

ClusterStatus Status(const std::string& text) {
  ClusterStatus st;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &st)) << text;
  return st;
}

TEST(WaitTest, TheReadsOfAStatusCountWorkersOnly) {
  const ClusterStatus st = Status(
      "members { role: SERVER id: 0 clock: 1 } "
      "members { role: WORKER id: 0 clock: 12 } "
      "members { role: WORKER id: 1 clock: 9 }");
  EXPECT_EQ(SlowestClock(st), 9);
  EXPECT_EQ(WorkerClock(st, 0), 12);
  EXPECT_EQ(WorkerClock(st, 1), 9);
  EXPECT_EQ(WorkerClock(st, 2), -1);
  EXPECT_EQ(WorkersAt(st, 10), 1);
  EXPECT_EQ(WorkersAt(st, 9), 2);
  EXPECT_EQ(WorkersAt(st, 1), 2);  // the server at clock 1 is not counted
  EXPECT_EQ(SlowestClock(Status("members { role: SERVER id: 0 clock: 3 }")), -1);
}

TEST(WaitTest, AStatusThatCannotBeFetchedIsNotDoneAndTheWaitEndsAtItsTimeout) {
  bool asked = false;
  const absl::Time start = absl::Now();
  EXPECT_FALSE(WaitForStatus(
      "127.0.0.1:1",
      [&](const ClusterStatus&) {
        asked = true;
        return true;
      },
      absl::Milliseconds(300)));
  EXPECT_FALSE(asked);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(300));
}

}  // namespace
}  // namespace testing
}  // namespace pstrain
