// psctl: the operator's command-line client.
//
//   psctl status --scheduler=HOST:PORT [--json]
//       every member of the cluster: role, id, address, state, clock, ...
//   psctl status --target=HOST:PORT [--role=server|worker] [--json]
//       one daemon's own Status
//   psctl watch --scheduler=HOST:PORT [--interval_ms=1000] [--count=N] [--json]
//       the same, refreshed in place, with a progress bar and an ETA
//   psctl checkpoint|drain|stop --scheduler=HOST:PORT [--wait] [--json]
//       a checkpoint now; that checkpoint and the job's end; the end now
//   psctl set-consistency --scheduler=HOST:PORT --mode=bsp|ssp|asp [--staleness=N]
//       the running job's consistency, from a clock a few clocks ahead on
//   psctl export --scheduler=HOST:PORT --out=FILE.safetensors
//   psctl export --checkpoint_dir=DIR [--job=FILE] --out=FILE.safetensors
//       the model's weights (a checkpoint now, or the newest complete one)
//   psctl plot --run_dir=DIR --out=FILE.png|.svg
//       the curves of ps_scheduler --run_dir, drawn by gnuplot
#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/checkpoint_names.h"
#include "common/enum_names.h"
#include "common/flags.h"
#include "common/job_spec.h"
#include "common/rpc.h"
#include "common/security.h"
#include "common/status_json.h"
#include "proto/cluster.grpc.pb.h"
#include "proto/ps.grpc.pb.h"
#include "proto/worker.grpc.pb.h"
#include "tools/export.h"
#include "tools/plot.h"

ABSL_FLAG(std::string, scheduler, "", "the scheduler's HOST:PORT");
ABSL_FLAG(std::string, target, "", "one daemon's HOST:PORT (instead of --scheduler)");
ABSL_FLAG(std::string, role, "server", "with --target: server or worker");
ABSL_FLAG(bool, json, false, "print JSON instead of a table");
ABSL_FLAG(int, timeout_s, 5, "seconds to wait for an answer");
ABSL_FLAG(int, interval_ms, 1000, "watch: milliseconds between refreshes");
ABSL_FLAG(int, count, 0, "watch: refreshes before exiting (0: until the job ends)");
ABSL_FLAG(bool, wait, false,
          "checkpoint, drain: wait until the manifest names the checkpoint (drain: and the job "
          "has ended)");
ABSL_FLAG(int, wait_s, 300, "how long --wait and export wait for a checkpoint");
ABSL_FLAG(std::string, out, "", "export: the safetensors file; plot: the .png or .svg file");
ABSL_FLAG(std::string, checkpoint_dir, "", "export: a checkpoint directory (with --job)");
ABSL_FLAG(std::string, job, "",
          "export --checkpoint_dir: the job spec the checkpoint is of (default: the one the "
          "scheduler wrote into the directory, DIR/job.pbtxt)");
ABSL_FLAG(std::string, run_dir, "", "plot: the scheduler's --run_dir");
ABSL_FLAG(std::string, mode, "", "set-consistency: bsp, ssp or asp");
ABSL_FLAG(std::optional<int>, staleness, std::nullopt, "set-consistency --mode=ssp: the bound s");

namespace pstrain {
namespace {

// The job's state in a sentence's words (the others are their enum words).
std::string JobStateText(JobState s) {
  if (s == WAITING) return "waiting for members";
  if (s == RUNNING_JOB) return "running";
  return EnumWord(s, "?");
}

std::string Bytes(int64_t b) {
  if (b >= (int64_t{1} << 30)) return absl::StrFormat("%.1fG", b / double(1 << 30));
  if (b >= (1 << 20)) return absl::StrFormat("%.1fM", b / double(1 << 20));
  if (b >= (1 << 10)) return absl::StrFormat("%.1fK", b / double(1 << 10));
  return absl::StrCat(b);
}

void PrintTable(const std::vector<MemberStatus>& rows) {
  std::printf("%-9s %3s %-21s %3s %3s %-10s %7s %9s %8s %8s %8s %8s %7s\n", "ROLE", "ID", "ADDRESS",
              "REP", "STG", "STATE", "CLOCK", "SAMPLES/S", "LOSS", "ACCURACY", "IN", "OUT", "RSS");
  for (const MemberStatus& n : rows) {
    const bool worker = n.role() == WORKER;
    std::printf(
        "%-9s %3s %-21s %3s %3s %-10s %7lld %9s %8s %8s %8s %8s %7s\n", EnumWord(n.role(), "?").c_str(),
        n.role() == SCHEDULER ? "-" : absl::StrCat(n.id()).c_str(), n.address().c_str(),
        worker ? absl::StrCat(n.replica()).c_str() : "-",
        worker ? absl::StrCat(n.stage()).c_str() : "-", EnumWord(n.state(), "?").c_str(),
        static_cast<long long>(n.clock()),
        worker ? absl::StrFormat("%.0f", n.samples_per_s()).c_str() : "-",
        worker ? absl::StrFormat("%.4f", n.loss()).c_str() : "-",
        worker && n.test_accuracy() >= 0 ? absl::StrFormat("%.4f", n.test_accuracy()).c_str() : "-",
        Bytes(n.bytes_in()).c_str(), Bytes(n.bytes_out()).c_str(), Bytes(n.rss_bytes()).c_str());
    if (worker && !n.frontend().empty()) {
      std::printf("          frontend: %s (the model is the script's)\n", n.frontend().c_str());
    }
    if (worker && n.clock() > 0) {
      std::printf(
          "          per clock: gate %.1f ms, pull %.1f ms, compute %.1f ms, push %.1f ms, %.1f "
          "calls, %s; peak device memory %s",
          n.gate_ms(), n.pull_ms(), n.compute_ms(), n.push_ms(), n.rpcs_per_clock(),
          Bytes(static_cast<int64_t>(n.bytes_per_clock())).c_str(),
          Bytes(n.peak_device_bytes()).c_str());
      if (n.activations_in_flight() > 0) {
        std::printf(
            "; stage %d of replica %d: %.0f%% waiting (%.1f ms for activations, %.1f ms for "
            "gradients), activations of %d micro-batches kept, %s of activations and %s of "
            "gradients sent",
            n.stage(), n.replica(), 100.0 * n.bubble(), n.activation_wait_ms(),
            n.gradient_wait_ms(), n.activations_in_flight(),
            Bytes(n.activation_bytes_sent()).c_str(), Bytes(n.gradient_bytes_sent()).c_str());
      }
      if (n.validation_loss() >= 0 && n.unigram_entropy() > 0) {
        std::printf("; validation loss %.4f (unigram entropy %.4f)", n.validation_loss(),
                    n.unigram_entropy());
      }
      std::printf("\n");
    }
    if (worker && n.clocks_trained() > 0) {
      const ClockSplit& r = n.run_split();
      const double clock_ms = 1e3 * n.train_s() / static_cast<double>(n.clocks_trained());
      std::printf(
          "          whole run: %lld clocks in %.1f s, %.2f ms each (gate %.2f, pull %.2f, "
          "compute %.2f, push %.2f, idle %.2f ms), %.1f calls, %s\n",
          static_cast<long long>(n.clocks_trained()), n.train_s(), clock_ms, r.gate_ms(),
          r.pull_ms(), r.compute_ms(), r.push_ms(),
          std::max(0.0, clock_ms - r.gate_ms() - r.pull_ms() - r.compute_ms() - r.push_ms()),
          r.rpcs(), Bytes(static_cast<int64_t>(r.bytes())).c_str());
    }
    if (n.role() == SERVER && n.params() > 0) {
      std::printf("          %lld params, %.2f bytes/param held, %lld non-finite pushes skipped\n",
                  static_cast<long long>(n.params()), n.bytes_per_param(),
                  static_cast<long long>(n.nonfinite_skipped()));
    }
    if (!n.message().empty()) std::printf("          %s\n", n.message().c_str());
    const int64_t now_ms = absl::ToUnixMillis(absl::Now());
    for (const Wait& w : n.waits()) {
      std::printf("          waiting %.1f s: %s\n", (now_ms - w.since_unix_ms()) / 1000.0,
                  w.what().c_str());
    }
  }
}

int PrintJson(const google::protobuf::Message& m) {
  const absl::StatusOr<std::string> out = StatusJson(m);
  if (!out.ok()) return 1;
  std::printf("%s", out->c_str());
  return 0;
}

int Fail(const std::string& address, const grpc::Status& st) {
  const char* hint = "request failed";
  if (st.error_code() == grpc::StatusCode::UNAVAILABLE) {
    hint = TlsEnabled() ? "is the daemon running, and does it use TLS with this CA?"
                        : "is the daemon running? If it uses TLS, give --tls_ca (and "
                          "--tls_cert/--tls_key for mutual TLS)";
  } else if (st.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
    hint = "give the daemon's token with --auth_token_file";
  }
  std::fprintf(stderr, "psctl: %s: %s (%s)\n", address.c_str(), st.error_message().c_str(), hint);
  return 1;
}

grpc::Status FetchStatus(const std::string& address, ClusterStatus* st) {
  auto stub = Scheduler::NewStub(MakeChannel(address));
  auto ctx = ContextWithTimeout(absl::Seconds(absl::GetFlag(FLAGS_timeout_s)));
  return stub->Status(ctx.get(), StatusRequest(), st);
}

void PrintCluster(const ClusterStatus& st);

int StatusOfCluster(const std::string& address) {
  ClusterStatus st;
  const grpc::Status rpc = FetchStatus(address, &st);
  if (!rpc.ok()) return Fail(address, rpc);
  if (absl::GetFlag(FLAGS_json)) return PrintJson(st);
  PrintCluster(st);
  return 0;
}

// A server's part of each sparse table: a line, and lines for its rows on
// disk and its expired and dropped rows when it has any.
void PrintServerTables(const MemberStatus& m) {
  for (const TableStatus& t : m.tables()) {
    std::printf("server %d table %s (%s, clock %lld): %lld rows (%s), %lld pulled, %lld pushed, "
                "%lld updates, %lld refused, %lld pulls waiting\n",
                m.id(), t.name().c_str(), Consistency_Name(t.consistency()).c_str(),
                static_cast<long long>(t.clock()), static_cast<long long>(t.rows()),
                Bytes(t.bytes()).c_str(), static_cast<long long>(t.rows_pulled()),
                static_cast<long long>(t.rows_pushed()), static_cast<long long>(t.updates()),
                static_cast<long long>(t.refused()), static_cast<long long>(t.pulls_waiting()));
    if (t.rows_on_disk() > 0 || t.rows_spilled() > 0) {
      std::printf("server %d table %s: %lld rows in memory (%s), %lld on disk (%s); %lld "
                  "spilled, %lld read back\n",
                  m.id(), t.name().c_str(), static_cast<long long>(t.rows_resident()),
                  Bytes(t.resident_bytes()).c_str(), static_cast<long long>(t.rows_on_disk()),
                  Bytes(t.disk_bytes()).c_str(), static_cast<long long>(t.rows_spilled()),
                  static_cast<long long>(t.rows_loaded()));
    }
    if (t.rows_expired() > 0 || t.rows_dropped() > 0) {
      std::printf("server %d table %s: %lld rows made, %lld expired; %lld gradient rows "
                  "dropped (not admitted or expired)\n",
                  m.id(), t.name().c_str(), static_cast<long long>(t.rows_created()),
                  static_cast<long long>(t.rows_expired()),
                  static_cast<long long>(t.rows_dropped()));
    }
  }
}

void PrintCluster(const ClusterStatus& st) {
  std::printf("job: %s, %s (staleness %d), %lld clocks", JobStateText(st.job_state()).c_str(),
              Consistency_Name(st.consistency()).c_str(),
              st.staleness(), static_cast<long long>(st.total_clocks()));
  if (!st.message().empty()) std::printf(": %s", st.message().c_str());
  std::printf("\n");
  if (st.stages_size() > 1) {
    std::printf("pipeline: %d stages, %s, %d micro-batches:", st.stages_size(),
                st.pipeline_schedule() == GPIPE ? "GPipe" : "1F1B", st.micro_batches());
    for (const PipelineStage& s : st.stages()) {
      std::printf(" %d=%s (%.3g MFLOP/sample)", s.stage(), s.units().c_str(),
                  s.flops_per_sample() / 1e6);
    }
    std::printf("\n");
  }
  for (const Rollback& r : st.rollbacks()) {
    std::printf(
        "rollback to generation %lld: clock %lld -> %lld (%s), %s\n",
        static_cast<long long>(r.generation()), static_cast<long long>(r.from_clock()),
        static_cast<long long>(r.to_clock()), r.reason().c_str(),
        r.done_unix_ms() > 0
            ? absl::StrCat("restored in ", r.done_unix_ms() - r.begun_unix_ms(), " ms").c_str()
            : "servers restoring");
  }
  for (const PipelineRestart& r : st.pipeline_restarts()) {
    const std::string done =
        r.done_unix_ms() > 0 ? absl::StrCat("back to clock ", r.clock(), " in ",
                                            r.done_unix_ms() - r.begun_unix_ms(), " ms")
                             : std::string("waiting for its stages");
    std::printf("pipeline restart of replica %d (link generation %lld): %s; %s\n", r.replica(),
                static_cast<long long>(r.link_generation()), r.reason().c_str(), done.c_str());
  }
  std::vector<MemberStatus> rows = {st.scheduler()};
  rows.insert(rows.end(), st.members().begin(), st.members().end());
  PrintTable(rows);
  for (const MemberStatus& m : st.members()) {
    if (m.role() != SERVER) continue;
    PrintServerTables(m);
    if (m.offload_disk_bytes() == 0) continue;
    std::printf(
        "server %d offloaded: %s of %s in memory; read %s (%.0f MB/s), wrote %s (%.0f MB/s)\n",
        m.id(), Bytes(m.offload_resident_bytes()).c_str(), Bytes(m.offload_disk_bytes()).c_str(),
        Bytes(m.offload_read_bytes()).c_str(), m.offload_read_mb_per_s(),
        Bytes(m.offload_write_bytes()).c_str(), m.offload_write_mb_per_s());
  }
  for (const ConsistencyChange& c : st.consistency_changes()) {
    std::printf("consistency: %s%s from clock %lld on\n", Consistency_Name(c.consistency()).c_str(),
                c.consistency() == SSP ? absl::StrCat(" (staleness ", c.staleness(), ")").c_str() : "",
                static_cast<long long>(c.clock()));
  }
  if (st.checkpoint_asked() > 0 || st.manifest_clock() > 0) {
    std::printf("checkpoints: newest complete set of clock %lld", static_cast<long long>(st.manifest_clock()));
    if (st.checkpoint_asked() > 0) {
      std::printf("; clock %lld asked for%s", static_cast<long long>(st.checkpoint_asked()),
                  st.draining() ? " (draining: the job ends there)" : "");
    }
    std::printf("\n");
  }
}

int StatusOfDaemon(const std::string& address, const std::string& role) {
  MemberStatus st;
  auto ctx = ContextWithTimeout(absl::Seconds(absl::GetFlag(FLAGS_timeout_s)));
  grpc::Status rpc;
  if (role == "server") {
    rpc = ParameterServer::NewStub(MakeChannel(address))->Status(ctx.get(), StatusRequest(), &st);
  } else if (role == "worker") {
    rpc = Worker::NewStub(MakeChannel(address))->Status(ctx.get(), StatusRequest(), &st);
  } else {
    std::fprintf(stderr, "psctl: --role=%s: expected server or worker\n", role.c_str());
    return 2;
  }
  if (!rpc.ok()) return Fail(address, rpc);
  if (absl::GetFlag(FLAGS_json)) return PrintJson(st);
  PrintTable({st});
  return 0;
}

// ---- watch -------------------------------------------------------------

// "[#####.....]  45.2 %  clock 452 of 1000, ETA 1m12s" from two samples.
std::string Progress(const ClusterStatus& st, int64_t clock0, absl::Time t0) {
  const int64_t total = std::max<int64_t>(1, st.total_clocks());
  const int64_t clock = std::min(st.scheduler().clock(), total);
  const int width = 40;
  const int filled = static_cast<int>(width * clock / total);
  std::string bar = "[" + std::string(filled, '#') + std::string(width - filled, '.') + "]";
  std::string eta = "ETA -";
  const double rate = (clock - clock0) / absl::ToDoubleSeconds(absl::Now() - t0);
  if (rate > 0 && clock < total) {
    eta = "ETA " + absl::FormatDuration(absl::Trunc(absl::Seconds((total - clock) / rate),
                                                    absl::Seconds(1)));
  }
  return absl::StrFormat("%s %5.1f %%  clock %lld of %lld, %.1f clocks/s, %s", bar,
                         100.0 * clock / total, static_cast<long long>(clock),
                         static_cast<long long>(total), std::max(rate, 0.0), eta);
}

int Watch(const std::string& address) {
  const bool json = absl::GetFlag(FLAGS_json);
  const int count = absl::GetFlag(FLAGS_count);
  int64_t clock0 = -1;
  absl::Time t0;
  for (int n = 1;; ++n) {
    ClusterStatus st;
    const grpc::Status rpc = FetchStatus(address, &st);
    if (!rpc.ok()) return Fail(address, rpc);
    if (clock0 < 0) clock0 = st.scheduler().clock(), t0 = absl::Now();
    if (json) {
      absl::StatusOr<std::string> line = StatusJson(st);  // one object per refresh
      if (line.ok()) std::printf("%s\n", line->c_str());
    } else {
      std::printf("\033[H\033[J%s\n", Progress(st, clock0, t0).c_str());  // in place
      PrintCluster(st);
    }
    std::fflush(stdout);
    const bool ended = st.job_state() == DONE || st.job_state() == ABORTED;
    if (ended) return st.job_state() == DONE ? 0 : 1;
    if (count > 0 && n >= count) return 0;
    absl::SleepFor(absl::Milliseconds(absl::GetFlag(FLAGS_interval_ms)));
  }
}

// ---- checkpoint, drain, stop ------------------------------------------------

// Waits until the manifest names `clock` (and, when draining, the job ended).
int WaitForCheckpoint(const std::string& address, int64_t clock, bool drain) {
  const absl::Time until = absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_wait_s));
  while (absl::Now() < until) {
    ClusterStatus st;
    const grpc::Status rpc = FetchStatus(address, &st);
    if (!rpc.ok() && drain && rpc.error_code() == grpc::StatusCode::UNAVAILABLE) return 0;
    if (!rpc.ok()) return Fail(address, rpc);
    if (st.job_state() == ABORTED) {
      std::fprintf(stderr, "psctl: the job was aborted: %s\n", st.message().c_str());
      return 1;
    }
    if (st.manifest_clock() >= clock && (!drain || st.job_state() == DONE)) return 0;
    absl::SleepFor(absl::Milliseconds(200));
  }
  std::fprintf(stderr, "psctl: no complete checkpoint of clock %lld after %d s\n",
               static_cast<long long>(clock), absl::GetFlag(FLAGS_wait_s));
  return 1;
}

absl::StatusOr<int64_t> AskControl(const std::string& address, ControlAction action,
                                   grpc::Status* rpc) {
  auto stub = Scheduler::NewStub(MakeChannel(address));
  auto ctx = ContextWithTimeout(absl::Seconds(absl::GetFlag(FLAGS_timeout_s)));
  ControlRequest req;
  req.set_action(action);
  ControlResponse resp;
  *rpc = stub->Control(ctx.get(), req, &resp);
  if (!rpc->ok()) return absl::UnknownError("control failed");
  return resp.clock();
}

int Control(const std::string& address, ControlAction action) {
  grpc::Status rpc;
  const absl::StatusOr<int64_t> clock = AskControl(address, action, &rpc);
  if (!clock.ok()) return Fail(address, rpc);
  if (absl::GetFlag(FLAGS_json)) {
    std::printf("{\"action\": \"%s\", \"clock\": %lld}\n", ControlAction_Name(action).c_str(),
                static_cast<long long>(*clock));
  } else if (action == STOP) {
    std::printf("stopped at clock %lld\n", static_cast<long long>(*clock));
  } else {
    std::printf("checkpoint of clock %lld asked for%s\n", static_cast<long long>(*clock),
                action == DRAIN ? "; the job ends there once the manifest names it" : "");
  }
  if (action == STOP || !absl::GetFlag(FLAGS_wait)) return 0;
  return WaitForCheckpoint(address, *clock, action == DRAIN);
}

int SetConsistency(const std::string& address) {
  const std::string mode = absl::AsciiStrToLower(absl::GetFlag(FLAGS_mode));
  const std::optional<int> staleness = absl::GetFlag(FLAGS_staleness);
  ControlRequest req;
  req.set_action(SET_CONSISTENCY);
  const std::optional<Consistency> consistency = ParseEnumWord<Consistency>(mode);
  if (!consistency.has_value()) {
    std::fprintf(stderr, "psctl set-consistency: --mode=%s: expected bsp, ssp or asp\n",
                 mode.c_str());
    return 2;
  }
  if ((*consistency == SSP) != staleness.has_value() || (staleness.has_value() && *staleness < 0)) {
    std::fprintf(stderr,
                 "psctl set-consistency: --staleness=N (N >= 0) goes with --mode=ssp, and only "
                 "with it\n");
    return 2;
  }
  req.set_consistency(*consistency);
  req.set_staleness(staleness.value_or(0));
  auto stub = Scheduler::NewStub(MakeChannel(address));
  auto ctx = ContextWithTimeout(absl::Seconds(absl::GetFlag(FLAGS_timeout_s)));
  ControlResponse resp;
  const grpc::Status rpc = stub->Control(ctx.get(), req, &resp);
  if (!rpc.ok()) return Fail(address, rpc);
  if (absl::GetFlag(FLAGS_json)) {
    std::printf("{\"consistency\": \"%s\", \"staleness\": %d, \"clock\": %lld}\n",
                Consistency_Name(req.consistency()).c_str(), req.staleness(),
                static_cast<long long>(resp.clock()));
  } else {
    std::printf("%s from clock %lld on\n", absl::AsciiStrToUpper(mode).c_str(),
                static_cast<long long>(resp.clock()));
  }
  return 0;
}

// ---- export --------------------------------------------------------------

int ExportFrom(const std::string& dir, const JobSpec& job, const std::string& out) {
  const absl::StatusOr<int64_t> clock = ExportCheckpoint(dir, job, out);
  if (!clock.ok()) {
    std::fprintf(stderr, "psctl export: %s\n", std::string(clock.status().message()).c_str());
    return 1;
  }
  std::printf("wrote %s: the weights of clock %lld\n", out.c_str(), static_cast<long long>(*clock));
  return 0;
}

// A checkpoint now, then its weights (the checkpoint directory must be
// readable from here: the same machine or a shared file system).
int ExportLive(const std::string& address, const std::string& out) {
  grpc::Status rpc;
  const absl::StatusOr<int64_t> clock = AskControl(address, CHECKPOINT, &rpc);
  if (!clock.ok()) return Fail(address, rpc);
  if (const int code = WaitForCheckpoint(address, *clock, false); code != 0) return code;
  ClusterStatus st;
  if (const grpc::Status s = FetchStatus(address, &st); !s.ok()) return Fail(address, s);
  return ExportFrom(st.job().checkpoint_dir(), st.job(), out);
}

int Export() {
  const std::string out = absl::GetFlag(FLAGS_out);
  const std::string scheduler = absl::GetFlag(FLAGS_scheduler);
  const std::string dir = absl::GetFlag(FLAGS_checkpoint_dir);
  if (out.empty() || scheduler.empty() == dir.empty()) {
    std::fprintf(stderr,
                 "psctl export: give --out and either --scheduler or --checkpoint_dir with --job\n");
    return 2;
  }
  if (!scheduler.empty()) return ExportLive(scheduler, out);
  const std::string job_file = absl::GetFlag(FLAGS_job).empty() ? CheckpointJobPath(dir)
                                                                 : absl::GetFlag(FLAGS_job);
  absl::StatusOr<JobSpec> job = LoadJobSpec(job_file);
  if (!job.ok()) {
    std::fprintf(stderr, "psctl export: --job: %s\n", std::string(job.status().message()).c_str());
    return 2;
  }
  ApplyJobDefaults(&*job);
  return ExportFrom(dir, *job, out);
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "psctl status|watch|checkpoint|drain|stop --scheduler=HOST:PORT [--json]\n"
      "       psctl set-consistency --scheduler=HOST:PORT --mode=bsp|ssp|asp [--staleness=N]\n"
      "       psctl status --target=HOST:PORT --role=server|worker [--json]\n"
      "       psctl export (--scheduler=HOST:PORT | --checkpoint_dir=DIR --job=FILE) --out=F\n"
      "       psctl plot --run_dir=DIR --out=FILE.png|.svg");
  std::vector<char*> args = pstrain::ParseFlagsOrExit(argc, argv);
  pstrain::ExitOnBadFlag(pstrain::CheckFlagRanges({
      {"timeout_s", absl::GetFlag(FLAGS_timeout_s), 1, 3600},
      {"interval_ms", absl::GetFlag(FLAGS_interval_ms), 50, 3600000},
      {"count", absl::GetFlag(FLAGS_count), 0, std::numeric_limits<int>::max()},
      {"wait_s", absl::GetFlag(FLAGS_wait_s), 1, 86400},
      {"staleness", absl::GetFlag(FLAGS_staleness), 0, std::numeric_limits<int>::max()},
  }));
  pstrain::ExitOnBadFlag(pstrain::CheckFlagChoice("role", absl::GetFlag(FLAGS_role),
                                                  {"server", "worker"}));
  if (const absl::Status st = pstrain::ConfigureSecurityFromFlags(); !st.ok()) {
    std::fprintf(stderr, "psctl: %s\n", std::string(st.message()).c_str());
    return 2;
  }
  const std::string command = args.size() == 2 ? args[1] : "";
  if (command == "export") return pstrain::Export();
  if (command == "plot") return pstrain::Plot(absl::GetFlag(FLAGS_run_dir), absl::GetFlag(FLAGS_out));
  const std::string scheduler = absl::GetFlag(FLAGS_scheduler);
  const std::string target = absl::GetFlag(FLAGS_target);
  if (command == "status") {
    if (scheduler.empty() == target.empty()) {
      std::fprintf(stderr, "psctl status: give exactly one of --scheduler and --target\n");
      return 2;
    }
    return scheduler.empty() ? pstrain::StatusOfDaemon(target, absl::GetFlag(FLAGS_role))
                             : pstrain::StatusOfCluster(scheduler);
  }
  const std::map<std::string, pstrain::ControlAction> actions = {
      {"checkpoint", pstrain::CHECKPOINT}, {"drain", pstrain::DRAIN}, {"stop", pstrain::STOP}};
  if (command == "watch" || command == "set-consistency" || actions.count(command)) {
    if (scheduler.empty()) {
      std::fprintf(stderr, "psctl %s: --scheduler=HOST:PORT is required\n", command.c_str());
      return 2;
    }
    if (command == "watch") return pstrain::Watch(scheduler);
    if (command == "set-consistency") return pstrain::SetConsistency(scheduler);
    return pstrain::Control(scheduler, actions.at(command));
  }
  std::fprintf(stderr, "psctl: %s\nusage: %s\n",
               args.size() < 2 ? "no command" : absl::StrCat("unknown command '", command, "'").c_str(),
               absl::ProgramUsageMessage().data());
  return 2;
}
