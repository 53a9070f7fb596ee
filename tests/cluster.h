// Test harness: real pstrain daemons as child processes on OS-chosen loopback
// ports, each with its own log file under the test's temporary folder. The
// destructor kills whatever is still running.
#ifndef PSTRAIN_TESTS_CLUSTER_H_
#define PSTRAIN_TESTS_CLUSTER_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/scheduler_client.h"
#include "proto/member.pb.h"
#include "proto/status.pb.h"
#include "proto/tensor.pb.h"

namespace pstrain {
namespace testing {

// Path of a built binary in the runfiles, e.g. "scheduler/ps_scheduler":
// a test's or `bazel run`'s, or, for a binary run by hand from bazel-bin,
// those Bazel made beside it.
std::string BinaryPath(const std::string& relative);
// The folder holding scheduler/, server/ and worker/ with the daemons, as an
// absolute path (local_cluster.sh --bin).
std::string BinDir();
// A fresh folder under TEST_TMPDIR.
std::string NewTempDir(const std::string& name);
std::string ReadFile(const std::string& path);
void WriteFile(const std::string& path, const std::string& text);

class Process {
 public:
  Process() = default;
  Process(Process&& other) noexcept;
  Process& operator=(Process&& other) noexcept;
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  ~Process();

  // Starts argv[0] with stdout and stderr to `log_path`.
  static absl::StatusOr<Process> Start(const std::vector<std::string>& argv,
                                       const std::string& log_path);
  // Waits up to `timeout` for the exit; returns the exit code (128 + signal
  // for a signal), or DEADLINE_EXCEEDED.
  absl::StatusOr<int> Wait(absl::Duration timeout);
  void Kill(int signal);
  bool running() const { return pid_ > 0 && !exited_; }
  pid_t pid() const { return pid_; }
  const std::string& log_path() const { return log_path_; }
  std::string Log() const { return ReadFile(log_path_); }

 private:
  pid_t pid_ = -1;
  bool exited_ = false;
  int code_ = 0;
  std::string log_path_;
};

struct ClusterOptions {
  std::string job_text;  // the job spec, text format
  int servers = 1;
  int workers = 1;
  std::vector<std::string> scheduler_flags;
  std::vector<std::string> server_flags;
  // Flags of the i-th worker process launched (not its id).
  std::vector<std::vector<std::string>> worker_flags;
  bool trace = false;              // --trace_file for the scheduler and every server
  std::string host = "127.0.0.1";  // where the daemons listen
  // Per worker process: what its command line starts with (e.g. `ip netns
  // exec NS`), and the host it listens on (default: `host`).
  std::vector<std::vector<std::string>> worker_prefix;
  std::vector<std::string> worker_host;
  // What every server's command line starts with (e.g. a memory limit's
  // prefix, tests/memory_limit.h).
  std::vector<std::string> server_prefix;
  // Per server process, after server_prefix (e.g. `ip netns exec NS`), and
  // the host it listens on (default: `host`).
  std::vector<std::vector<std::string>> server_each_prefix;
  std::vector<std::string> server_host;
};

class Cluster {
 public:
  explicit Cluster(std::string name) : dir_(NewTempDir(name)) {}

  // Starts the scheduler, waits for its port file, then starts the servers
  // and workers.
  absl::Status Start(const ClusterOptions& options);
  // Starts the scheduler again, as it was started but on the address it
  // bound then (a takeover from its --state_dir), logging to
  // scheduler-N.log; waits for its port file.
  absl::Status RestartScheduler();
  // Starts one more server or worker process (a replacement) with `flags`
  // added.
  absl::Status AddServer(const std::vector<std::string>& flags);
  absl::Status AddWorker(const std::vector<std::string>& flags);
  // The id the scheduler gave the `process`-th server or worker process
  // started (matched by the address in its port file; -1 if the scheduler
  // does not list it).
  int MemberId(Role role, int process) const;
  // The index of the server process that has server id `id` (-1).
  int ServerProcess(int id) const;
  // The scheduler's --status_file: its Status as it ended the job.
  absl::StatusOr<ClusterStatus> FinalStatus() const;
  // Waits for every process to exit; returns the scheduler's exit code.
  absl::StatusOr<int> WaitAll(absl::Duration timeout);
  // Every log, for failure messages.
  std::string Logs() const;

  const std::string& dir() const { return dir_; }
  const std::string& scheduler_address() const { return scheduler_address_; }
  Process& scheduler() { return scheduler_; }
  std::vector<Process>& servers() { return servers_; }
  std::vector<Process>& workers() { return workers_; }
  std::string scheduler_trace() const { return dir_ + "/scheduler.trace"; }
  std::string status_file() const { return dir_ + "/status.json"; }
  std::string port_file(Role role, int process) const;
  std::string server_trace(int i) const { return dir_ + "/server" + std::to_string(i) + ".trace"; }
  std::string worker_weights(int i) const {
    return dir_ + "/worker" + std::to_string(i) + ".weights";
  }

 private:
  std::string dir_;
  std::string scheduler_address_;
  ClusterOptions options_;
  std::vector<std::string> scheduler_argv_;
  int scheduler_starts_ = 0;
  Process scheduler_;
  std::vector<Process> servers_;
  std::vector<Process> workers_;
};

// Waits for a port file a daemon writes; the address in it.
absl::StatusOr<std::string> WaitForPortFile(const std::string& path, Process& owner,
                                            absl::Duration timeout);

// Runs a command to completion (stdout and stderr together); returns its
// exit code and sets *output.
absl::StatusOr<int> RunCommand(const std::vector<std::string>& argv, std::string* output,
                               absl::Duration timeout, const std::string& name);

// This process as a worker of a cluster (started with one worker fewer than
// the scheduler expects): registered and past the gate of clock 0.
// The scheduler's Status.
absl::StatusOr<ClusterStatus> SchedulerStatus(const std::string& address);
// A server's own Status (ParameterServer.Status); an empty one when it
// does not answer within 5 s.
MemberStatus ServerStatus(const std::string& address);
// A ClusterStatus written as JSON (a scheduler's --status_file).
absl::StatusOr<ClusterStatus> ReadStatusFile(const std::string& path);
// The slowest worker's clock as the scheduler's Status shows it (members'
// heartbeats); -1 without an answer.
int64_t SlowestWorkerClock(const std::string& scheduler);

// A worker's --weights_out file (empty if unreadable).
TensorSet ReadWeights(const std::string& path);
// max |a - b| over every weight, the tensors taken by name; infinity when
// the sets differ in names or shapes.
double MaxDifference(const TensorSet& a, const TensorSet& b);
// The largest |weight| of the set.
double MaxMagnitude(const TensorSet& set);

// Member `id` of `role` in `status` (an empty MemberStatus if it lists none).
MemberStatus MemberOf(const ClusterStatus& status, Role role, int id);

struct InProcessWorker {
  std::unique_ptr<SchedulerClient> client;
  JobSpec job;  // complete, from the scheduler
  int id = 0;
  ClusterMembers cluster;
  // Reports FINISHED; once every worker has, the job ends and the daemons exit.
  void Finish();
};
// `address`: what it registers as (it serves nothing there); two workers
// of one job need two.
absl::StatusOr<InProcessWorker> JoinAsWorker(const std::string& scheduler_address,
                                             const std::string& address = "127.0.0.1:1");

}  // namespace testing
}  // namespace pstrain

#endif  // PSTRAIN_TESTS_CLUSTER_H_
