#include "common/daemon_status.h"

#include "common/status_macros.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

TEST(DaemonStatusTest, AFailureIsTaggedOnceByTheCallNearestTheDaemon) {
  const absl::Status st = FromDaemon(SERVER, absl::UnavailableError("server 1 unreachable"));
  EXPECT_EQ(DaemonOf(st), SERVER);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(st.message(), "server 1 unreachable");
  // A layer further out (the scheduler's client around it) keeps the first tag.
  EXPECT_EQ(DaemonOf(FromDaemon(SCHEDULER, st)), SERVER);
}

TEST(DaemonStatusTest, OkAndTheCallersOwnErrorsAreUntagged) {
  EXPECT_TRUE(FromDaemon(SCHEDULER, absl::OkStatus()).ok());
  EXPECT_EQ(DaemonOf(FromDaemon(SCHEDULER, absl::OkStatus())), ROLE_UNSPECIFIED);
  EXPECT_EQ(DaemonOf(absl::InvalidArgumentError("bad flag")), ROLE_UNSPECIFIED);
}

TEST(DaemonStatusTest, StatusOrAndPrefixedKeepTheTag) {
  const absl::StatusOr<int> v =
      FromDaemon(SCHEDULER, absl::StatusOr<int>(absl::UnavailableError("no scheduler")));
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(DaemonOf(v.status()), SCHEDULER);
  const absl::Status prefixed = Prefixed("clock 3: ", v.status());
  EXPECT_EQ(prefixed.message(), "clock 3: no scheduler");
  EXPECT_EQ(DaemonOf(prefixed), SCHEDULER);
  EXPECT_EQ(FromDaemon(SERVER, absl::StatusOr<int>(7)).value(), 7);
}

}  // namespace
}  // namespace pstrain
