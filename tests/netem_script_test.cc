// deploy/netem.sh, the slow links of experiments: bad values exit 2 naming
// the problem and change nothing; as root, a namespace comes up shaped (a
// rate alone works on any kernel; delay and loss need sch_netem, and where
// the kernel lacks it the script says so, exits 1 and leaves nothing),
// runs commands, and goes away.
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/cluster.h"
#include "tests/netns.h"

namespace pstrain {
namespace testing {
namespace {

int Script(const std::vector<std::string>& args, std::string* out) {
  std::vector<std::string> argv = {"/bin/bash", BinaryPath("deploy/netem.sh")};
  argv.insert(argv.end(), args.begin(), args.end());
  absl::StatusOr<int> code = RunCommand(argv, out, absl::Seconds(30), "netem");
  EXPECT_TRUE(code.ok()) << code.status();
  return code.ok() ? *code : -1;
}

// This process's namespace index (two runs at once get different ones
// unless their pids agree modulo 90).
std::string Index() { return std::to_string(10 + getpid() % 90); }

bool NamespaceExists(const std::string& name) {
  std::string out;
  absl::StatusOr<int> code = RunCommand({kIp, "netns", "list"}, &out, absl::Seconds(10), "ip");
  return code.ok() && absl::StrContains(out, name);
}

TEST(NetemScriptTest, BadValuesExit2NamingTheProblem) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"up", "97", "--delay=-5"},
                                             {"up", "97", "--jitter=x"},
                                             {"up", "97", "--loss=150"},
                                             {"up", "97", "--rate=0"},
                                             {"up", "97", "--bogus=1"},
                                             {"up", "200"},
                                             {"sideways"}}) {
    std::string out;
    EXPECT_EQ(Script(args, &out), 2) << args.back() << ": " << out;
    if (absl::StartsWith(args.back(), "--")) {
      EXPECT_TRUE(absl::StrContains(out, args.back())) << out;
    }
  }
  EXPECT_FALSE(NamespaceExists("pstrain-netem-97"));
}

TEST(NetemScriptTest, ANamespaceComesUpShapedRunsCommandsAndGoesAway) {
  if (const std::string why = Netns::Unavailable(); !why.empty()) GTEST_SKIP() << why;
  std::string out;
  const std::string n = Index(), ns = "pstrain-netem-" + n;
  ASSERT_EQ(Script({"up", n, "--rate=50"}, &out), 0) << out;
  EXPECT_TRUE(NamespaceExists(ns));
  EXPECT_EQ(Script({"exec", n, "--", kIp, "addr", "show"}, &out), 0);
  EXPECT_TRUE(absl::StrContains(out, "10.213." + n + ".2")) << out;
  ASSERT_EQ(Script({"down", n}, &out), 0) << out;
  EXPECT_FALSE(NamespaceExists(ns));
  // Delay and loss: netem where the kernel has it, else a clear refusal
  // that leaves nothing behind.
  const int code = Script({"up", n, "--delay=20", "--jitter=2", "--loss=1"}, &out);
  if (code == 0) {
    std::string qdisc;
    ASSERT_TRUE(RunCommand({"/usr/sbin/tc", "qdisc", "show", "dev", "pnetem" + n}, &qdisc,
                           absl::Seconds(10), "tc")
                    .ok());
    EXPECT_TRUE(absl::StrContains(qdisc, "netem")) << qdisc;
    EXPECT_TRUE(absl::StrContains(qdisc, "delay 20")) << qdisc;
    Script({"down", n}, &out);
  } else {
    EXPECT_EQ(code, 1) << out;
    EXPECT_TRUE(absl::StrContains(out, "sch_netem")) << out;
  }
  EXPECT_FALSE(NamespaceExists(ns));
}

}  // namespace
}  // namespace testing
}  // namespace pstrain
