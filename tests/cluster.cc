#include "tests/cluster.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/rpc.h"
#include "common/status_macros.h"
#include "google/protobuf/util/json_util.h"
#include "proto/cluster.grpc.pb.h"
#include "proto/ps.grpc.pb.h"

namespace pstrain {
namespace testing {

std::string BinaryPath(const std::string& relative) {
  const char* workspace_env = std::getenv("TEST_WORKSPACE");
  const std::string workspace = workspace_env != nullptr ? workspace_env : "pstrain";
  for (const char* runfiles : {std::getenv("TEST_SRCDIR"), std::getenv("RUNFILES_DIR")}) {
    if (runfiles != nullptr) return absl::StrCat(runfiles, "/", workspace, "/", relative);
  }
  // Run by hand (bazel-bin/bench/chaos): the runfiles Bazel made beside
  // the binary.
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) {
    const std::string beside = absl::StrCat(self.string(), ".runfiles/", workspace, "/", relative);
    if (std::filesystem::exists(beside, error)) return beside;
  }
  return relative;  // (`bazel run`: the runfiles are the working directory)
}

std::string BinDir() {
  std::string path = BinaryPath("scheduler/ps_scheduler");
  if (path[0] != '/') path = std::filesystem::current_path().string() + "/" + path;
  return std::filesystem::path(path).parent_path().parent_path().string();
}

std::string NewTempDir(const std::string& name) {
  static std::atomic<int> counter{0};
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name, "-", getpid(), "-", counter++);
  mkdir(dir.c_str(), 0755);
  return dir;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

Process::Process(Process&& other) noexcept
    : pid_(other.pid_),
      exited_(other.exited_),
      code_(other.code_),
      log_path_(std::move(other.log_path_)) {
  other.pid_ = -1;
}

Process& Process::operator=(Process&& other) noexcept {
  if (this != &other) {
    if (running()) {
      Kill(SIGKILL);
      (void)Wait(absl::Seconds(5));
    }
    pid_ = other.pid_;
    exited_ = other.exited_;
    code_ = other.code_;
    log_path_ = std::move(other.log_path_);
    other.pid_ = -1;
  }
  return *this;
}

Process::~Process() {
  if (running()) {
    Kill(SIGKILL);
    (void)Wait(absl::Seconds(5));
  }
}

absl::StatusOr<Process> Process::Start(const std::vector<std::string>& argv,
                                       const std::string& log_path) {
  const int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot open ", log_path));
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    close(fd);
    return absl::InternalError("fork failed");
  }
  if (pid == 0) {
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    const int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, STDIN_FILENO);
    execv(args[0], args.data());
    _exit(127);
  }
  close(fd);
  Process p;
  p.pid_ = pid;
  p.log_path_ = log_path;
  return p;
}

absl::StatusOr<int> Process::Wait(absl::Duration timeout) {
  if (pid_ <= 0) return absl::FailedPreconditionError("not started");
  const absl::Time until = absl::Now() + timeout;
  while (!exited_) {
    int status = 0;
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      exited_ = true;
      code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      break;
    }
    if (absl::Now() > until) {
      return absl::DeadlineExceededError(absl::StrCat(log_path_, ": still running"));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return code_;
}

void Process::Kill(int signal) {
  if (running()) kill(pid_, signal);
}

absl::StatusOr<std::string> WaitForPortFile(const std::string& path, Process& owner,
                                            absl::Duration timeout) {
  const absl::Time until = absl::Now() + timeout;
  while (absl::Now() < until) {
    std::string text = ReadFile(path);
    if (!text.empty() && text.back() == '\n') {
      return std::string(absl::StripTrailingAsciiWhitespace(text));
    }
    if (!owner.running() || owner.Wait(absl::ZeroDuration()).ok()) {
      return absl::InternalError(absl::StrCat("exited before writing ", path, ":\n", owner.Log()));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::DeadlineExceededError(absl::StrCat("no port file ", path));
}

absl::Status Cluster::Start(const ClusterOptions& options) {
  const std::string job = dir_ + "/job.pbtxt";
  WriteFile(job, options.job_text);
  std::vector<std::string> argv = {BinaryPath("scheduler/ps_scheduler"),
                                   "--job=" + job,
                                   "--listen=" + options.host + ":0",
                                   "--port_file=" + dir_ + "/scheduler.port",
                                   "--num_servers=" + std::to_string(options.servers),
                                   "--num_workers=" + std::to_string(options.workers),
                                   "--end_grace_ms=3000",
                                   "--status_file=" + status_file()};
  if (options.trace) argv.push_back("--trace_file=" + scheduler_trace());
  argv.insert(argv.end(), options.scheduler_flags.begin(), options.scheduler_flags.end());
  scheduler_argv_ = argv;
  scheduler_starts_ = 1;
  absl::StatusOr<Process> p = Process::Start(argv, dir_ + "/scheduler.log");
  if (!p.ok()) return p.status();
  scheduler_ = std::move(*p);
  absl::StatusOr<std::string> address =
      WaitForPortFile(dir_ + "/scheduler.port", scheduler_, absl::Seconds(20));
  if (!address.ok()) return address.status();
  scheduler_address_ = *address;
  options_ = options;
  for (int i = 0; i < options.servers; ++i) RETURN_IF_ERROR(AddServer({}));
  for (int i = 0; i < options.workers; ++i) RETURN_IF_ERROR(AddWorker({}));
  return absl::OkStatus();
}

absl::Status Cluster::RestartScheduler() {
  std::vector<std::string> argv = scheduler_argv_;
  for (std::string& a : argv) {
    if (a.rfind("--listen=", 0) == 0) a = "--listen=" + scheduler_address_;
  }
  std::remove((dir_ + "/scheduler.port").c_str());
  ++scheduler_starts_;
  absl::StatusOr<Process> p =
      Process::Start(argv, absl::StrCat(dir_, "/scheduler-", scheduler_starts_, ".log"));
  if (!p.ok()) return p.status();
  scheduler_ = std::move(*p);
  return WaitForPortFile(dir_ + "/scheduler.port", scheduler_, absl::Seconds(20)).status();
}

absl::Status Cluster::AddWorker(const std::vector<std::string>& flags) {
  const int i = static_cast<int>(workers_.size());
  std::vector<std::string> a;
  if (i < static_cast<int>(options_.worker_prefix.size())) a = options_.worker_prefix[i];
  const std::string host =
      i < static_cast<int>(options_.worker_host.size()) ? options_.worker_host[i] : options_.host;
  a.insert(a.end(), {BinaryPath("worker/ps_worker"), "--scheduler=" + scheduler_address_,
                     "--listen=" + host + ":0", "--heartbeat_interval_ms=200",
                     "--port_file=" + port_file(WORKER, i), "--weights_out=" + worker_weights(i)});
  if (i < static_cast<int>(options_.worker_flags.size())) {
    a.insert(a.end(), options_.worker_flags[i].begin(), options_.worker_flags[i].end());
  }
  a.insert(a.end(), flags.begin(), flags.end());
  absl::StatusOr<Process> w = Process::Start(a, absl::StrCat(dir_, "/worker", i, ".log"));
  if (!w.ok()) return w.status();
  workers_.push_back(std::move(*w));
  return absl::OkStatus();
}

absl::Status Cluster::AddServer(const std::vector<std::string>& flags) {
  const int i = static_cast<int>(servers_.size());
  std::vector<std::string> a = options_.server_prefix;
  if (i < static_cast<int>(options_.server_each_prefix.size())) {
    a.insert(a.end(), options_.server_each_prefix[i].begin(), options_.server_each_prefix[i].end());
  }
  const std::string host =
      i < static_cast<int>(options_.server_host.size()) ? options_.server_host[i] : options_.host;
  a.insert(a.end(), {BinaryPath("server/ps_server"), "--scheduler=" + scheduler_address_,
                     "--listen=" + host + ":0", "--heartbeat_interval_ms=200",
                     "--port_file=" + port_file(SERVER, i)});
  if (options_.trace) a.push_back("--trace_file=" + server_trace(i));
  a.insert(a.end(), options_.server_flags.begin(), options_.server_flags.end());
  a.insert(a.end(), flags.begin(), flags.end());
  absl::StatusOr<Process> s = Process::Start(a, absl::StrCat(dir_, "/server", i, ".log"));
  if (!s.ok()) return s.status();
  servers_.push_back(std::move(*s));
  return absl::OkStatus();
}

std::string Cluster::port_file(Role role, int process) const {
  return absl::StrCat(dir_, role == SERVER ? "/server" : "/worker", process, ".port");
}

int Cluster::MemberId(Role role, int process) const {
  const std::string address =
      std::string(absl::StripTrailingAsciiWhitespace(ReadFile(port_file(role, process))));
  if (address.empty()) return -1;
  absl::StatusOr<ClusterStatus> st = SchedulerStatus(scheduler_address_);
  if (!st.ok()) return -1;
  for (const MemberStatus& m : st->members()) {
    if (m.role() == role && m.address() == address) return m.id();
  }
  return -1;
}

int Cluster::ServerProcess(int id) const {
  for (size_t i = 0; i < servers_.size(); ++i) {
    if (MemberId(SERVER, static_cast<int>(i)) == id) return static_cast<int>(i);
  }
  return -1;
}

absl::StatusOr<ClusterStatus> ReadStatusFile(const std::string& path) {
  const std::string json = ReadFile(path);
  ClusterStatus st;
  if (json.empty() || !google::protobuf::util::JsonStringToMessage(json, &st).ok()) {
    return absl::NotFoundError(absl::StrCat("no status in ", path));
  }
  return st;
}

absl::StatusOr<ClusterStatus> Cluster::FinalStatus() const {
  return ReadStatusFile(status_file());
}

TensorSet ReadWeights(const std::string& path) {
  TensorSet set;
  std::ifstream in(path, std::ios::binary);
  if (!set.ParseFromIstream(&in)) set.Clear();
  return set;
}

double MaxDifference(const TensorSet& a, const TensorSet& b) {
  if (a.tensors_size() == 0 || a.tensors_size() != b.tensors_size()) return INFINITY;
  std::map<std::string, const NamedTensor*> by_name;
  for (const NamedTensor& t : b.tensors()) by_name[t.name()] = &t;
  double worst = 0;
  for (const NamedTensor& t : a.tensors()) {
    auto it = by_name.find(t.name());
    if (it == by_name.end() || it->second->values_size() != t.values_size()) return INFINITY;
    for (int i = 0; i < t.values_size(); ++i) {
      worst = std::max(worst, std::fabs(static_cast<double>(t.values(i)) - it->second->values(i)));
    }
  }
  return worst;
}

double MaxMagnitude(const TensorSet& set) {
  double most = 0;
  for (const NamedTensor& t : set.tensors()) {
    for (float v : t.values()) most = std::max(most, std::fabs(static_cast<double>(v)));
  }
  return most;
}

MemberStatus MemberOf(const ClusterStatus& status, Role role, int id) {
  for (const MemberStatus& m : status.members()) {
    if (m.role() == role && m.id() == id) return m;
  }
  return MemberStatus();
}

int64_t SlowestWorkerClock(const std::string& scheduler) {
  absl::StatusOr<ClusterStatus> st = SchedulerStatus(scheduler);
  if (!st.ok()) return -1;
  int64_t slowest = INT64_MAX;
  for (const MemberStatus& m : st->members()) {
    if (m.role() == WORKER) slowest = std::min(slowest, m.clock());
  }
  return slowest == INT64_MAX ? -1 : slowest;
}

absl::StatusOr<ClusterStatus> SchedulerStatus(const std::string& address) {
  auto stub = Scheduler::NewStub(MakeChannel(address));
  auto ctx = ContextWithTimeout(absl::Seconds(2));
  ClusterStatus st;
  const grpc::Status rpc = stub->Status(ctx.get(), StatusRequest(), &st);
  if (!rpc.ok()) return FromGrpc(rpc);
  return st;
}

MemberStatus ServerStatus(const std::string& address) {
  auto stub = ParameterServer::NewStub(MakeChannel(address));
  MemberStatus st;
  (void)stub->Status(ContextWithTimeout(absl::Seconds(5)).get(), StatusRequest(), &st);
  return st;
}

absl::StatusOr<int> Cluster::WaitAll(absl::Duration timeout) {
  const absl::Time until = absl::Now() + timeout;
  for (std::vector<Process>* list : {&workers_, &servers_}) {
    for (Process& p : *list) {
      absl::StatusOr<int> code = p.Wait(std::max(until - absl::Now(), absl::ZeroDuration()));
      if (!code.ok()) return code.status();
    }
  }
  return scheduler_.Wait(std::max(until - absl::Now(), absl::ZeroDuration()));
}

std::string Cluster::Logs() const {
  std::string out;
  for (int i = 1; i < scheduler_starts_; ++i) {
    const std::string log = i == 1 ? dir_ + "/scheduler.log"
                                   : absl::StrCat(dir_, "/scheduler-", i, ".log");
    absl::StrAppend(&out, "--- scheduler (start ", i, ") ---\n", ReadFile(log));
  }
  absl::StrAppend(&out, "--- scheduler ---\n", scheduler_.Log());
  for (size_t i = 0; i < servers_.size(); ++i) {
    absl::StrAppend(&out, "--- server process ", i, " ---\n", servers_[i].Log());
  }
  for (size_t i = 0; i < workers_.size(); ++i) {
    absl::StrAppend(&out, "--- worker process ", i, " ---\n", workers_[i].Log());
  }
  return out;
}

absl::StatusOr<int> RunCommand(const std::vector<std::string>& argv, std::string* output,
                               absl::Duration timeout, const std::string& name) {
  const std::string log = NewTempDir(name) + "/out.log";
  absl::StatusOr<Process> p = Process::Start(argv, log);
  if (!p.ok()) return p.status();
  absl::StatusOr<int> code = p->Wait(timeout);
  *output = ReadFile(log);
  return code;
}

void InProcessWorker::Finish() {
  MemberStatus done;
  done.set_role(WORKER);
  done.set_id(id);
  done.set_state(FINISHED);
  (void)client->ReportFinal(done);
}

absl::StatusOr<InProcessWorker> JoinAsWorker(const std::string& scheduler_address,
                                             const std::string& address) {
  SchedulerClientOptions options;
  options.scheduler = scheduler_address;
  options.role = WORKER;
  options.address = address;  // no Status service of its own
  InProcessWorker w;
  w.client = std::make_unique<SchedulerClient>(options);
  absl::StatusOr<RegisterResponse> reg = w.client->Register();
  if (!reg.ok()) return reg.status();
  w.job = reg->job();
  w.id = reg->id();
  // Alive in the scheduler's eyes for as long as the caller works.
  const int id = w.id;
  w.client->StartHeartbeats([id] {
    MemberStatus st;
    st.set_role(WORKER);
    st.set_id(id);
    st.set_state(RUNNING);
    return st;
  });
  absl::StatusOr<AdvanceClockResponse> gate = w.client->AdvanceClock(w.id, 0);
  if (!gate.ok()) return gate.status();
  w.cluster = gate->cluster();
  return w;
}

}  // namespace testing
}  // namespace pstrain
