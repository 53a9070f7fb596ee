// deploy/local_cluster.sh --worker_links, the experiments' slow links: each
// worker runs in a network namespace of its own behind a shaped link
// (deploy/netem.sh), reaches the scheduler and servers on this host through
// it, moves its payloads in gRPC messages over it (no shared memory across
// namespaces), and can go no faster than the link; the namespaces are gone
// when the cluster stops. Bad link options exit 2 before anything starts.
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/cluster.h"
#include "tests/netns.h"

namespace pstrain {
namespace testing {
namespace {

// A 256-1024-4 MLP: 267,268 parameters, 1.07 MB of fp32 a push or pull.
constexpr char kJob[] = R"pb(
  name: "links"
  model {
    layers { type: DENSE units: 1024 }
    layers { type: RELU }
    layers { type: DENSE units: 4 }
    layers { type: SOFTMAX_XENT }
  }
  data {
    dataset: SYNTHETIC
    synthetic_dim: 256
    synthetic_classes: 4
    synthetic_train_size: 1024
    synthetic_test_size: 128
  }
  batch_size: 32
  clocks: 6
  seed: 7
  chunk_bytes: 262144
)pb";

// local_cluster.sh for kJob with 2 servers, 2 workers and `links`; its exit
// code, its output in *out and its folder in *dir.
int RunCluster(const std::string& links, std::string* dir, std::string* out,
               absl::Duration* took) {
  *dir = NewTempDir("links");
  WriteFile(*dir + "/job.pbtxt", kJob);
  const absl::Time start = absl::Now();
  absl::StatusOr<int> code = RunCommand(
      {"/bin/bash", BinaryPath("deploy/local_cluster.sh"), "--job=" + *dir + "/job.pbtxt",
       "--bin=" + BinDir(), "--logs=" + *dir + "/logs", "--servers=2", "--workers=2",
       "--worker_links=" + links},
      out, absl::Seconds(120), "local_cluster");
  *took = absl::Now() - start;
  EXPECT_TRUE(code.ok()) << code.status();
  return code.ok() ? *code : -1;
}

std::string Namespaces() {
  std::string out;
  EXPECT_TRUE(RunCommand({kIp, "netns", "list"}, &out, absl::Seconds(10), "ip").ok());
  return out;
}

// "10.213.N.2:PORT" -> "N".
std::string LinkIndex(const std::string& address) {
  std::vector<std::string> parts = absl::StrSplit(address, absl::ByAnyChar(".:"));
  return parts.size() == 5 ? parts[2] : "";
}

TEST(WorkerLinksTest, WorkersReachTheClusterThroughLinksNoFasterThanThem) {
  if (const std::string why = Netns::Unavailable(); !why.empty()) GTEST_SKIP() << why;
  constexpr double kMbit = 16;  // 2 MB/s each way
  std::string dir, out;
  absl::Duration took;
  ASSERT_EQ(RunCluster(absl::StrCat("--rate=", kMbit), &dir, &out, &took), 0) << out;
  absl::StatusOr<ClusterStatus> st = ReadStatusFile(dir + "/logs/status.json");
  ASSERT_TRUE(st.ok()) << st.status();

  std::set<std::string> links;
  int64_t most_bytes = 0;
  for (const MemberStatus& m : st->members()) {
    EXPECT_EQ(m.shm_bytes(), 0) << m.ShortDebugString();
    if (m.role() != Role::WORKER) continue;
    EXPECT_TRUE(absl::StartsWith(m.address(), "10.213.")) << m.address();
    EXPECT_TRUE(absl::StrContains(m.address(), ".2:")) << m.address();
    links.insert(LinkIndex(m.address()));
    most_bytes = std::max({most_bytes, m.bytes_in(), m.bytes_out()});
  }
  EXPECT_EQ(links.size(), 2u) << "a link of its own per worker";
  for (const MemberStatus& m : st->members()) {
    if (m.role() != Role::SERVER) continue;
    // The host's end of one worker's link.
    EXPECT_TRUE(absl::StrContains(m.address(), ".1:")) << m.address();
    EXPECT_TRUE(links.count(LinkIndex(m.address()))) << m.address();
  }
  // 6 clocks of pushes and pulls of 1.07 MB: at least 6.4 MB each way per
  // worker, which a 2 MB/s link takes over 3 s to carry (over loopback the
  // job takes well under that). The link's 256 KB burst is the slack.
  EXPECT_GT(most_bytes, 6 * 1'000'000);
  const double floor_s = (most_bytes - 256 * 1024) / (kMbit * 1e6 / 8);
  EXPECT_GE(absl::ToDoubleSeconds(took), floor_s) << most_bytes << " bytes";

  const std::string left = Namespaces();
  for (const std::string& n : links) {
    EXPECT_FALSE(absl::StrContains(left, "pstrain-netem-" + n + " ")) << left;
    EXPECT_FALSE(absl::StrContains(left, "pstrain-netem-" + n + "\n")) << left;
  }
}

TEST(WorkerLinksTest, BadLinkOptionsExit2BeforeAnythingStarts) {
  if (const std::string why = Netns::Unavailable(); !why.empty()) GTEST_SKIP() << why;
  const std::string before = Namespaces();
  for (const std::string links : {"--loss=150", "--delay=-3", "--rate=0", "--speed=1"}) {
    std::string dir, out;
    absl::Duration took;
    EXPECT_EQ(RunCluster(links, &dir, &out, &took), 2) << links << ": " << out;
    EXPECT_TRUE(absl::StrContains(out, links)) << out;
    EXPECT_EQ(ReadFile(dir + "/logs/scheduler.log"), "") << "nothing started";
  }
  EXPECT_EQ(Namespaces(), before);
}

}  // namespace
}  // namespace testing
}  // namespace pstrain
