#include "tests/chaos.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <random>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "google/protobuf/util/json_util.h"
#include "tests/cluster.h"
#include "tests/test_jobs.h"

namespace pstrain {
namespace testing {
namespace {

std::string ChaosJob(const ChaosOptions& o) {
  return SixteenClassJob(
      absl::StrCat("clocks: ", o.clocks, "\nseed: ", o.seed, "\nchunk_bytes: 512\n"));
}

// deploy/local_cluster.sh for the job in `dir`, supervised, with workers
// slowed by `slowdown_ms` (a sleep: the weights do not depend on it).
absl::StatusOr<Process> StartCluster(const ChaosOptions& o, const std::string& dir,
                                     int slowdown_ms) {
  std::filesystem::create_directories(dir);
  WriteFile(dir + "/job.pbtxt", ChaosJob(o));
  std::vector<std::string> argv = {
      "/bin/bash",
      BinaryPath("deploy/local_cluster.sh"),
      "--job=" + dir + "/job.pbtxt",
      "--bin=" + BinDir(),
      "--logs=" + dir + "/logs",
      "--weights=" + dir + "/weights",
      absl::StrCat("--servers=", o.servers),
      absl::StrCat("--workers=", o.workers),
      absl::StrCat("--worker_flags=--straggler=fixed:", slowdown_ms,
                   " --heartbeat_interval_ms=200"),
      "--server_flags=--heartbeat_interval_ms=200",
      "--supervise",
      "--",
      absl::StrCat("--heartbeat_timeout_ms=", o.heartbeat_timeout_ms),
      "--checkpoint_every=50",
      "--end_grace_ms=3000",
  };
  if (o.standby) argv.push_back("--standby_copies=1");
  return Process::Start(argv, dir + "/local_cluster.log");
}

// The scheduler's Status now.
absl::StatusOr<ClusterStatus> LiveStatus(const std::string& logs) {
  const std::string address = ReadFile(logs + "/scheduler.port");
  if (address.empty()) return absl::UnavailableError("no scheduler");
  return SchedulerStatus(address.substr(0, address.find_first_of("\n")));
}

// Standby copies: every server holds its standby copies (no Status: no).
bool StandbysReady(const std::string& logs) {
  const absl::StatusOr<ClusterStatus> st = LiveStatus(logs);
  if (!st.ok()) return false;
  for (bool ready : st->routes().ready()) {
    if (!ready) return false;
  }
  return true;
}

// The slowest live worker's clock at the gate (-1: no answer).
int64_t SlowestClock(const std::string& logs) {
  const absl::StatusOr<ClusterStatus> st = LiveStatus(logs);
  if (!st.ok() || st->worker_clocks().empty()) return -1;
  int64_t slowest = INT64_MAX;
  for (int64_t c : st->worker_clocks()) {
    if (c >= 0) slowest = std::min(slowest, c);
  }
  return slowest == INT64_MAX ? -1 : slowest;
}

pid_t PidOf(const std::string& logs, const std::string& daemon) {
  const std::string text = ReadFile(logs + "/" + daemon + ".pid");
  return text.empty() ? -1 : static_cast<pid_t>(std::atoll(text.c_str()));
}

std::string ReportJson(const ChaosOptions& o, const ChaosReport& r) {
  std::vector<std::string> faults;
  double worst = 0;
  int recovered = 0;
  for (const Fault& f : r.faults) {
    faults.push_back(absl::StrCat("{\"kind\": \"", f.kind, "\", \"target\": \"", f.target,
                                  "\", \"clock\": ", f.clock, ", \"stopped_s\": ", f.stopped_s,
                                  ", \"recovery_s\": ", f.recovery_s, "}"));
    if (f.recovery_s >= 0) {
      worst = std::max(worst, f.recovery_s);
      ++recovered;
    }
  }
  std::vector<double> sorted;
  for (const Fault& f : r.faults) {
    if (f.recovery_s >= 0) sorted.push_back(f.recovery_s);
  }
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted.empty() ? 0 : sorted[sorted.size() / 2];
  return absl::StrCat(
      "{\"seed\": ", o.seed, ", \"clocks\": ", o.clocks, ", \"servers\": ", o.servers,
      ", \"workers\": ", o.workers, ", \"faults\": ", r.faults.size(),
      ", \"recovered\": ", recovered, ", \"restarts\": ", r.restarts,
      ", \"median_recovery_s\": ", median, ", \"worst_recovery_s\": ", worst,
      ", \"undisturbed_s\": ", r.undisturbed_s, ", \"disturbed_s\": ", r.disturbed_s,
      ", \"exit_code\": ", r.exit_code, ", \"bit_identical\": ", r.bit_identical ? "true" : "false",
      ", \"standby\": ", o.standby ? 1 : 0, ", \"rollbacks\": ", r.rollbacks,
      ", \"redo_rollbacks\": ", r.redo_rollbacks, ", \"promotions\": ", r.promotions,
      ", \"max_abs_difference\": ", r.max_difference, ", \"kept\": \"", r.kept,
      "\", \"fault_list\": [", absl::StrJoin(faults, ", "), "]}");
}

// Waits until the slowest clock passes `clock` + 1 (the job recovered),
// and with standbys until every server's copies are filled again, or the
// cluster ends; the seconds since `since`, or -1.
double AwaitRecovery(Process& cluster, const std::string& logs, int64_t clock, absl::Time since,
                     bool standbys) {
  const absl::Time until = absl::Now() + absl::Minutes(3);
  while (absl::Now() < until) {
    if (!cluster.running() || cluster.Wait(absl::ZeroDuration()).ok()) {
      return absl::ToDoubleSeconds(absl::Now() - since);
    }
    if (SlowestClock(logs) > clock + 1 && (!standbys || StandbysReady(logs))) {
      return absl::ToDoubleSeconds(absl::Now() - since);
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  return -1;
}

// Moves `dir` into `into` (renamed, else copied and removed): where it is.
std::string Keep(const std::string& dir, const std::string& into) {
  std::error_code error;
  std::filesystem::create_directories(into, error);
  const std::string to = (std::filesystem::path(into) / std::filesystem::path(dir).filename());
  std::filesystem::rename(dir, to, error);
  if (!error) return to;
  std::filesystem::copy(dir, to, std::filesystem::copy_options::recursive, error);
  if (error) return dir;
  std::filesystem::remove_all(dir, error);
  return to;
}

// Worker 0's final weights of both runs, compared: the largest difference
// (-1 when a run wrote none).
double WeightsDifference(const std::string& calm, const std::string& disturbed) {
  if (ReadFile(calm).empty() || ReadFile(disturbed).empty()) return -1;
  return MaxDifference(ReadWeights(disturbed), ReadWeights(calm));
}

// The supervisor's restarts and the final status's rollbacks (a
// replacement's redo among them) and promotions, from the run's `logs`.
void CountRecoveries(const std::string& logs, ChaosReport* report) {
  std::istringstream restarts(ReadFile(logs + "/restarts.log"));
  for (std::string line; std::getline(restarts, line);) report->restarts += !line.empty();
  ClusterStatus end;
  if (google::protobuf::util::JsonStringToMessage(ReadFile(logs + "/status.json"), &end).ok()) {
    report->rollbacks = end.rollbacks_size();
    for (const Rollback& r : end.rollbacks()) report->redo_rollbacks += r.redo();
    report->promotions = end.promotions();
  }
}

}  // namespace

absl::StatusOr<ChaosReport> RunChaos(const ChaosOptions& o) {
  ChaosReport report;
  // The undisturbed run: the same job, not slowed (the sleep changes no weight).
  const std::string calm_dir = o.dir + "/undisturbed";
  absl::Time start = absl::Now();
  absl::StatusOr<Process> calm = StartCluster(o, calm_dir, 0);
  if (!calm.ok()) return calm.status();
  const absl::StatusOr<int> calm_code = calm->Wait(absl::Minutes(30));
  report.undisturbed_s = absl::ToDoubleSeconds(absl::Now() - start);
  if (!calm_code.ok() || *calm_code != 0) {
    return absl::InternalError(
        absl::StrCat("the undisturbed run failed: ", ReadFile(calm_dir + "/local_cluster.log")));
  }
  const std::string expected = ReadFile(calm_dir + "/weights/worker0.weights");

  const std::string dir = o.dir + "/disturbed", logs = dir + "/logs";
  start = absl::Now();
  absl::StatusOr<Process> cluster = StartCluster(o, dir, o.slowdown_ms);
  if (!cluster.ok()) return cluster.status();
  std::mt19937 rng(o.seed);
  // Every kind of fault in turn, in a shuffled order, again and again.
  std::vector<std::pair<std::string, std::string>> kinds;  // (kind, role)
  for (const char* kind : {"kill", "stop"}) {
    for (const char* role : {"scheduler", "server", "worker"}) kinds.push_back({kind, role});
  }
  std::shuffle(kinds.begin(), kinds.end(), rng);
  auto uniform = [&rng](absl::Duration lo, absl::Duration hi) {
    return lo + (hi - lo) * std::uniform_real_distribution<double>(0, 1)(rng);
  };
  auto gap = [&rng, &o] { return std::uniform_int_distribution<int64_t>(o.min_gap, o.max_gap)(rng); };
  int64_t next = 20 + gap();  // the slowest clock the next fault waits for
  while (cluster->running() && !cluster->Wait(absl::ZeroDuration()).ok()) {
    absl::SleepFor(absl::Milliseconds(50));
    const int64_t clock = SlowestClock(logs);
    if (clock < next || clock > o.clocks - o.quiet_tail) continue;
    const auto& [kind, role] = kinds[report.faults.size() % kinds.size()];
    Fault f;
    f.kind = kind;
    f.target = role == "scheduler"
                   ? role
                   : absl::StrCat(role, rng() % (role == "server" ? o.servers : o.workers));
    f.clock = clock;
    const pid_t pid = PidOf(logs, f.target);
    if (pid <= 0) continue;  // being restarted right now
    const absl::Time struck = absl::Now();
    if (kind == "kill") {
      kill(pid, SIGKILL);
    } else {
      const absl::Duration stop = uniform(absl::Milliseconds(300), o.max_stop);
      kill(pid, SIGSTOP);
      absl::SleepFor(stop);
      kill(pid, SIGCONT);
      f.stopped_s = absl::ToDoubleSeconds(stop);
    }
    std::fprintf(stderr, "chaos: %s %s at clock %lld\n", f.kind.c_str(), f.target.c_str(),
                 static_cast<long long>(f.clock));
    f.recovery_s = AwaitRecovery(*cluster, logs, f.clock, struck, o.standby);
    report.faults.push_back(f);
    if (f.recovery_s < 0) break;  // stuck: stop making it worse
    next = std::max<int64_t>(SlowestClock(logs), 20) + gap();
  }
  const absl::StatusOr<int> code = cluster->Wait(absl::Minutes(5));
  report.disturbed_s = absl::ToDoubleSeconds(absl::Now() - start);
  report.exit_code = code.ok() ? *code : -1;
  const std::string got = ReadFile(dir + "/weights/worker0.weights");
  report.bit_identical = !expected.empty() && got == expected;
  CountRecoveries(logs, &report);
  if (!report.bit_identical || report.exit_code != 0) {
    report.max_difference =
        WeightsDifference(calm_dir + "/weights/worker0.weights", dir + "/weights/worker0.weights");
    report.kept = o.keep_dir.empty() ? o.dir : Keep(o.dir, o.keep_dir);
    std::fprintf(stderr, "chaos: seed %u not bit-identical (max |dw| %g) or exit %d: kept in %s\n",
                 o.seed, report.max_difference, report.exit_code, report.kept.c_str());
  }
  report.json = ReportJson(o, report);
  return report;
}

}  // namespace testing
}  // namespace pstrain
