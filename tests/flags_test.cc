// Strict flags: every binary refuses an unknown flag, a value that does not
// parse and a value outside its range with exit code 2 and a message naming
// the flag; an override given with any value (the old "unset" sentinels
// included) replaces the spec's, and one not given keeps it.
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "scheduler/scheduler_runtime.h"
#include "tests/cluster.h"
#include "tests/test_jobs.h"

namespace pstrain {
namespace testing {
namespace {

struct BadFlag {
  const char* binary;
  std::vector<std::string> args;  // the bad flag first
};

TEST(FlagsTest, EveryInvalidValueIsExitTwoNamingTheFlag) {
  const std::string dir = NewTempDir("flags");
  const std::string job = dir + "/job.pbtxt";
  WriteFile(job, SmallJob("batch_size: 16\nclocks: 10\n"));
  const std::string sched = "--scheduler=127.0.0.1:1";
  const std::vector<BadFlag> cases = {
      // ps_scheduler: overrides that used to mean "not set", and others.
      {"scheduler/ps_scheduler", {"--batch_size=-5", "--job=" + job}},
      {"scheduler/ps_scheduler", {"--staleness=-3", "--job=" + job}},
      {"scheduler/ps_scheduler", {"--num_workers=0", "--job=" + job}},
      {"scheduler/ps_scheduler", {"--num_servers=-1", "--job=" + job}},
      {"scheduler/ps_scheduler", {"--epochs=-1", "--job=" + job}},
      {"scheduler/ps_scheduler", {"--clocks=-1", "--job=" + job}},
      {"scheduler/ps_scheduler", {"--steps=10", "--job=" + job}},  // now --clocks
      {"scheduler/ps_scheduler", {"--seed=-1", "--job=" + job}},
      {"scheduler/ps_scheduler", {"--checkpoint_every=-1", "--job=" + job}},
      {"scheduler/ps_scheduler", {"--pipeline_stages=0", "--job=" + job}},
      {"scheduler/ps_scheduler", {"--micro_batches=0", "--job=" + job}},
      {"scheduler/ps_scheduler", {"--consistency=", "--job=" + job}},
      {"scheduler/ps_scheduler", {"--consistency=xsp", "--job=" + job}},
      {"scheduler/ps_scheduler", {"--pipeline_schedule=zigzag", "--job=" + job}},
      {"scheduler/ps_scheduler", {"--data_dir=", "--job=" + job}},
      {"scheduler/ps_scheduler", {"--checkpoint_dir=", "--job=" + job}},
      {"scheduler/ps_scheduler", {"--heartbeat_timeout_ms=0", "--job=" + job}},
      {"scheduler/ps_scheduler", {"--replacement_timeout_ms=-1", "--job=" + job}},
      {"scheduler/ps_scheduler", {"--linger_ms=-1", "--job=" + job}},
      {"scheduler/ps_scheduler", {"--metrics_port=70000", "--job=" + job}},
      {"scheduler/ps_scheduler", {"--metrics_port=", "--job=" + job}},
      {"scheduler/ps_scheduler", {"--staleness=three", "--job=" + job}},
      {"scheduler/ps_scheduler", {"--no_such_flag=1", "--job=" + job}},
      {"scheduler/ps_scheduler", {"--on_worker_failure=retry", "--job=" + job}},
      // ps_server
      {"server/ps_server", {"--id=-1", sched}},
      {"server/ps_server", {"--id=x", sched}},
      {"server/ps_server", {"--server_threads=0", sched}},
      {"server/ps_server", {"--rpc_threads=100", sched}},
      {"server/ps_server", {"--memory_budget=100", sched}},
      {"server/ps_server", {"--heartbeat_interval_ms=0", sched}},
      {"server/ps_server", {"--connect_timeout_s=0", sched}},
      {"server/ps_server", {"--offload_dir=", sched}},
      // ps_worker
      {"worker/ps_worker", {"--channels_per_server=0", sched}},
      {"worker/ps_worker", {"--compute_threads=-1", sched}},
      {"worker/ps_worker", {"--device_memory_budget=0", sched}},
      {"worker/ps_worker", {"--straggler=fixed:-5", sched}},
      {"worker/ps_worker", {"--weights_out=", sched}},
      {"worker/ps_worker", {"--wire_dtype=fp8", sched}},
      {"worker/ps_worker", {"--overlap=maybe", sched}},
      {"worker/ps_worker", {"--standalone=perhaps", sched}},
      // psctl
      {"tools/psctl", {"--timeout_s=0", "status", sched}},
      {"tools/psctl", {"--timeout_s=soon", "status", sched}},
      {"tools/psctl", {"--interval_ms=1", "watch", sched}},
      {"tools/psctl", {"--count=-1", "watch", sched}},
      {"tools/psctl", {"--wait_s=0", "drain", sched}},
      {"tools/psctl", {"--role=scheduler", "status", "--target=127.0.0.1:1"}},
      {"tools/psctl", {"--staleness=-2", "set-consistency", sched, "--mode=ssp"}},
  };
  for (const BadFlag& c : cases) {
    std::vector<std::string> argv = {BinaryPath(c.binary)};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    std::string out;
    absl::StatusOr<int> code = RunCommand(argv, &out, absl::Seconds(20), "flags");
    ASSERT_TRUE(code.ok()) << c.binary << " " << c.args[0] << ": " << code.status();
    EXPECT_EQ(*code, 2) << c.binary << " " << c.args[0] << ": " << out;
    // The flag's name, as given (up to its "=").
    const std::string name = c.args[0].substr(0, c.args[0].find('='));
    EXPECT_TRUE(absl::StrContains(out, name)) << c.binary << " " << c.args[0] << ": " << out;
  }
}

// An override no worker could allocate (a GPT's batch of 2e9 sequences):
// exit 2 naming the field, not a worker killed by std::bad_alloc.
TEST(FlagsTest, AnOverrideOfAnImpossibleSizeIsExitTwoNamingTheField) {
  const std::string job = NewTempDir("sizes") + "/job.pbtxt";
  WriteFile(job, "model { kind: GPT }\ndata { dataset: TEXT }\nclocks: 5\n");
  std::string out;
  absl::StatusOr<int> code =
      RunCommand({BinaryPath("scheduler/ps_scheduler"), "--job=" + job, "--listen=127.0.0.1:0",
                  "--batch_size=2000000000"},
                 &out, absl::Seconds(20), "sizes");
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 2) << out;
  EXPECT_TRUE(absl::StrContains(out, "batch_size (2000000000)")) << out;
}

// The spec's clock counts were called steps before issue 25, a member's id
// was set with --rank, a worker's fixed slowdown with --debug_slowdown_ms and
// a server's standby copies with --replicas:
// the old flags and an old job file are exit 2 naming the new names.
TEST(FlagsTest, ARenamedFlagOrFieldIsExitTwoNamingTheNewName) {
  const std::string dir = NewTempDir("renamed");
  const std::string job = dir + "/job.pbtxt";
  WriteFile(job, SmallJob("batch_size: 16\nclocks: 10\n"));
  std::string out;
  absl::StatusOr<int> code = RunCommand(
      {BinaryPath("scheduler/ps_scheduler"), "--job=" + job, "--steps=10"}, &out,
      absl::Seconds(20), "renamed");
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 2) << out;
  EXPECT_TRUE(absl::StrContains(out, "unknown flag --steps (it is now --clocks)")) << out;
  // A member's number within its role is its id: --rank became --id.
  code = RunCommand({BinaryPath("server/ps_server"), "--scheduler=127.0.0.1:1", "--rank=1"}, &out,
                    absl::Seconds(20), "renamed");
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 2) << out;
  EXPECT_TRUE(absl::StrContains(out, "unknown flag --rank (it is now --id)")) << out;
  // A worker's fixed slowdown is a straggler: --debug_slowdown_ms=N became
  // --straggler=fixed:N.
  code = RunCommand({BinaryPath("worker/ps_worker"), "--scheduler=127.0.0.1:1",
                     "--debug_slowdown_ms=5"},
                    &out, absl::Seconds(20), "renamed");
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 2) << out;
  EXPECT_TRUE(absl::StrContains(
      out, "unknown flag --debug_slowdown_ms (it is now --straggler=fixed:MS)"))
      << out;
  // A server's copy is a standby (a replica is a pipeline's): --replicas
  // became --standby_copies.
  code = RunCommand({BinaryPath("scheduler/ps_scheduler"), "--job=" + job, "--replicas=1"}, &out,
                    absl::Seconds(20), "renamed");
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 2) << out;
  EXPECT_TRUE(absl::StrContains(out, "unknown flag --replicas (it is now --standby_copies)"))
      << out;
  const std::string old = dir + "/old.pbtxt";
  WriteFile(old, SmallJob("batch_size: 16\nsteps: 10\n"));
  code = RunCommand({BinaryPath("scheduler/ps_scheduler"), "--job=" + old,
                     "--listen=127.0.0.1:0"},
                    &out, absl::Seconds(20), "renamed");
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 2) << out;
  EXPECT_TRUE(absl::StrContains(out, "old.pbtxt:")) << out;
  EXPECT_TRUE(absl::StrContains(out, "field \"steps\" is now \"clocks\"")) << out;
}

TEST(FlagsTest, AnOverrideGivenReplacesTheSpecAndOneNotGivenKeepsIt) {
  JobSpec job;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      "consistency: SSP staleness: 3 seed: 7 num_workers: 4 checkpoint_every: 10", &job));
  // -1 meant "not set" before, 0 was a value.
  const SpecOverrides given = {{"staleness", "0"}, {"seed", "0"}, {"checkpoint_every", "0"}};
  ASSERT_TRUE(ApplyOverrides(given, &job).ok());
  EXPECT_EQ(job.staleness(), 0);
  EXPECT_EQ(job.seed(), 0u);
  EXPECT_EQ(job.checkpoint_every(), 0);
  EXPECT_EQ(job.num_workers(), 4);  // not given: kept
  const absl::Status st = ApplyOverrides({{"num_workers", "0"}}, &job);
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "--num_workers")) << st;
}

}  // namespace
}  // namespace testing
}  // namespace pstrain
