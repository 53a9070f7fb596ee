#include "tools/psctl_status.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/enum_names.h"
#include "common/refused.h"
#include "common/rpc.h"
#include "common/status_json.h"
#include "proto/cluster.grpc.pb.h"
#include "proto/ps.grpc.pb.h"
#include "proto/worker.grpc.pb.h"

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

// The member's row of the table.
void PrintMemberRow(const MemberStatus& n) {
  const bool worker = n.role() == WORKER;
  std::printf(
      "%-9s %3s %-21s %3s %3s %-10s %7lld %9s %8s %8s %8s %8s %7s\n",
      EnumWord(n.role(), "?").c_str(), n.role() == SCHEDULER ? "-" : absl::StrCat(n.id()).c_str(),
      n.address().c_str(), worker ? absl::StrCat(n.worker().replica()).c_str() : "-",
      worker ? absl::StrCat(n.worker().stage()).c_str() : "-", EnumWord(n.state(), "?").c_str(),
      static_cast<long long>(n.clock()),
      worker ? absl::StrFormat("%.0f", n.worker().samples_per_s()).c_str() : "-",
      worker ? absl::StrFormat("%.4f", n.worker().loss()).c_str() : "-",
      worker && n.worker().test_accuracy() >= 0
          ? absl::StrFormat("%.4f", n.worker().test_accuracy()).c_str()
          : "-",
      Bytes(n.bytes_in()).c_str(), Bytes(n.bytes_out()).c_str(), Bytes(n.rss_bytes()).c_str());
}

// A worker's last clock: where its time went, and a pipeline stage's
// waits, a GPT's validation loss and its attention's kernels when it has
// them.
void PrintWorkerClock(const MemberStatus& n) {
  std::printf(
      "          per clock: gate %.1f ms, pull %.1f ms, compute %.1f ms, push %.1f ms, %.1f "
      "calls, %s; peak device memory %s",
      n.worker().gate_ms(), n.worker().pull_ms(), n.worker().compute_ms(), n.worker().push_ms(),
      n.worker().rpcs_per_clock(),
      Bytes(static_cast<int64_t>(n.worker().bytes_per_clock())).c_str(),
      Bytes(n.worker().peak_device_bytes()).c_str());
  if (n.worker().pipeline().activations_in_flight() > 0) {
    std::printf(
        "; stage %d of replica %d: %.0f%% waiting (%.1f ms for activations, %.1f ms for "
        "gradients), activations of %d micro-batches kept, %s of activations and %s of "
        "gradients sent",
        n.worker().stage(), n.worker().replica(), 100.0 * n.worker().pipeline().bubble(),
        n.worker().pipeline().activation_wait_ms(), n.worker().pipeline().gradient_wait_ms(),
        n.worker().pipeline().activations_in_flight(),
        Bytes(n.worker().pipeline().activation_bytes_sent()).c_str(),
        Bytes(n.worker().pipeline().gradient_bytes_sent()).c_str());
  }
  if (n.worker().validation_loss() >= 0 && n.worker().unigram_entropy() > 0) {
    std::printf("; validation loss %.4f (unigram entropy %.4f)", n.worker().validation_loss(),
                n.worker().unigram_entropy());
  }
  if (!n.worker().attention_path().empty())
    std::printf("; attention on %s", n.worker().attention_path().c_str());
  std::printf("\n");
}

// A worker's whole run: clocks, time, and the time of a clock split up.
void PrintWorkerRun(const MemberStatus& n) {
  const ClockSplit& r = n.worker().run_split();
  const double clock_ms =
      1e3 * n.worker().train_s() / static_cast<double>(n.worker().clocks_trained());
  std::printf(
      "          whole run: %lld clocks in %.1f s, %.2f ms each (gate %.2f, pull %.2f, "
      "compute %.2f, push %.2f, idle %.2f ms), %.1f calls, %s\n",
      static_cast<long long>(n.worker().clocks_trained()), n.worker().train_s(), clock_ms,
      r.gate_ms(), r.pull_ms(), r.compute_ms(), r.push_ms(),
      std::max(0.0, clock_ms - r.gate_ms() - r.pull_ms() - r.compute_ms() - r.push_ms()), r.rpcs(),
      Bytes(static_cast<int64_t>(r.bytes())).c_str());
}

// A server's refusals, by what (common/refused.h), when it refused any:
// "refused: 0 chunks, 3 rows, 1 shm".
void PrintRefused(const MemberStatus& n) {
  std::string line;
  int64_t any = 0;
  for (const char* what : kRefusedWhat) {
    absl::StrAppend(&line, line.empty() ? "" : ", ", Refused(n, what), " ", what);
    any += Refused(n, what);
  }
  if (any > 0) std::printf("          refused: %s\n", line.c_str());
}

// The lines under a member's row: a worker's front end, clock and run, a
// server's parameters and refusals, the member's message and what it waits
// on.
void PrintMemberDetails(const MemberStatus& n) {
  const bool worker = n.role() == WORKER;
  if (worker && !n.worker().frontend().empty()) {
    std::printf("          frontend: %s (the model is the script's)\n",
                n.worker().frontend().c_str());
  }
  if (worker && n.clock() > 0) PrintWorkerClock(n);
  if (worker && n.worker().clocks_trained() > 0) PrintWorkerRun(n);
  if (n.role() == SERVER && n.server().params() > 0) {
    std::printf("          %lld params, %.2f bytes/param held, %lld non-finite pushes skipped\n",
                static_cast<long long>(n.server().params()), n.server().bytes_per_param(),
                static_cast<long long>(n.server().nonfinite_skipped()));
  }
  if (n.role() == SERVER) PrintRefused(n);
  if (!n.message().empty()) std::printf("          %s\n", n.message().c_str());
  const int64_t now_ms = absl::ToUnixMillis(absl::Now());
  for (const Wait& w : n.waits()) {
    std::printf("          waiting %.1f s: %s\n", (now_ms - w.since_unix_ms()) / 1000.0,
                w.what().c_str());
  }
}

void PrintTable(const std::vector<MemberStatus>& rows) {
  std::printf("%-9s %3s %-21s %3s %3s %-10s %7s %9s %8s %8s %8s %8s %7s\n", "ROLE", "ID", "ADDRESS",
              "REP", "STG", "STATE", "CLOCK", "SAMPLES/S", "LOSS", "ACCURACY", "IN", "OUT", "RSS");
  for (const MemberStatus& n : rows) {
    PrintMemberRow(n);
    PrintMemberDetails(n);
  }
}

int PrintJson(const google::protobuf::Message& m) {
  const absl::StatusOr<std::string> out = StatusJson(m);
  if (!out.ok()) return 1;
  std::printf("%s", out->c_str());
  return 0;
}

// A server's part of each sparse table: a line, and lines for its rows on
// disk and its expired and dropped rows when it has any.
void PrintServerTables(const MemberStatus& m) {
  for (const TableStatus& t : m.server().tables()) {
    std::printf(
        "server %d table %s (%s, clock %lld): %lld rows (%s), %lld pulled, %lld pushed, "
        "%lld updates, %lld refused, %lld pulls waiting\n",
        m.id(), t.name().c_str(), Consistency_Name(t.consistency()).c_str(),
        static_cast<long long>(t.clock()), static_cast<long long>(t.rows()),
        Bytes(t.bytes()).c_str(), static_cast<long long>(t.rows_pulled()),
        static_cast<long long>(t.rows_pushed()), static_cast<long long>(t.updates()),
        static_cast<long long>(t.refused()), static_cast<long long>(t.pulls_waiting()));
    if (t.rows_on_disk() > 0 || t.rows_spilled() > 0) {
      std::printf(
          "server %d table %s: %lld rows in memory (%s), %lld on disk (%s); %lld "
          "spilled, %lld read back\n",
          m.id(), t.name().c_str(), static_cast<long long>(t.rows_resident()),
          Bytes(t.resident_bytes()).c_str(), static_cast<long long>(t.rows_on_disk()),
          Bytes(t.disk_bytes()).c_str(), static_cast<long long>(t.rows_spilled()),
          static_cast<long long>(t.rows_loaded()));
    }
    if (t.rows_expired() > 0 || t.rows_dropped() > 0) {
      std::printf(
          "server %d table %s: %lld rows made, %lld expired; %lld gradient rows "
          "dropped (not admitted or expired)\n",
          m.id(), t.name().c_str(), static_cast<long long>(t.rows_created()),
          static_cast<long long>(t.rows_expired()), static_cast<long long>(t.rows_dropped()));
    }
  }
}

// The lines above the table: the job, its pipeline, its rollbacks and its
// pipeline restarts.
// The placement once a move changed it, the move under way and the moves
// ended (ClusterStatus.placement).
void PrintPlacement(const PlacementStatus& p) {
  if (p.version() <= 1 && !p.has_move() && p.history_size() == 0) return;
  std::printf("placement %lld:", static_cast<long long>(p.version()));
  for (const PlacedServer& s : p.servers()) {
    std::printf(" server %d %d chunks (%s), %d row buckets;", s.server(), s.chunks(),
                Bytes(s.chunk_bytes()).c_str(), s.row_buckets());
  }
  std::printf("\n");
  auto what = [](MoveKind kind, int server) {
    return absl::StrCat(kind == ADD_SERVER ? "adding" : "draining", " server ", server);
  };
  if (p.has_move()) {
    const MoveStatus& m = p.move();
    std::printf(
        "move under way: %s, switching at clock %lld (%s to move, %s handed over); waiting for "
        "%s\n",
        what(m.kind(), m.server()).c_str(), static_cast<long long>(m.switch_clock()),
        Bytes(m.bytes()).c_str(), Bytes(m.bytes_moved()).c_str(),
        m.waiting_for_size() > 0
            ? absl::StrCat("server ", absl::StrJoin(m.waiting_for(), ", ")).c_str()
            : "the workers");
  }
  for (const MoveRecord& r : p.history()) {
    std::printf("move: %s at clock %lld (%s), %s\n", what(r.kind(), r.server()).c_str(),
                static_cast<long long>(r.switch_clock()), Bytes(r.bytes()).c_str(),
                r.abandoned().empty()
                    ? absl::StrCat("switched ", r.ended_unix_ms() - r.begun_unix_ms(),
                                   " ms after the ask; ", Bytes(r.handed_over_bytes()),
                                   " handed over in ", r.handover_ms(), " ms")
                          .c_str()
                    : absl::StrCat("abandoned: ", r.abandoned()).c_str());
  }
}

void PrintJobLines(const ClusterStatus& st) {
  std::printf("job: %s, %s (staleness %d), %lld clocks", JobStateText(st.job_state()).c_str(),
              Consistency_Name(st.consistency()).c_str(), st.staleness(),
              static_cast<long long>(st.total_clocks()));
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
  if (st.routes().serving_size() > 0) {
    std::printf("standby copies: %lld promotions;", static_cast<long long>(st.promotions()));
    for (int home = 0; home < st.routes().serving_size(); ++home) {
      std::printf(" server %d's chunks on %d%s", home, st.routes().serving(home),
                  home + 1 < st.routes().serving_size() ? "," : "");
    }
    std::printf("\n");
  }
  PrintPlacement(st.placement());
  for (const PipelineRestart& r : st.pipeline_restarts()) {
    const std::string done = r.done_unix_ms() > 0
                                 ? absl::StrCat("back to clock ", r.clock(), " in ",
                                                r.done_unix_ms() - r.begun_unix_ms(), " ms")
                                 : std::string("waiting for its stages");
    std::printf("pipeline restart of replica %d (link generation %lld): %s; %s\n", r.replica(),
                static_cast<long long>(r.link_generation()), r.reason().c_str(), done.c_str());
  }
}

// A server's part in the standby copies: what it serves and keeps.
void PrintServerStandbys(const MemberStatus& m) {
  if (m.server().standby().serving_size() == 0 && m.server().standby().standby_of_size() == 0)
    return;
  std::printf(
      "server %d serves the chunks of server %s; keeps standby copies of %s (%s); %lld "
      "changes not yet confirmed by its standby; %s sent to standbys\n",
      m.id(), absl::StrJoin(m.server().standby().serving(), ", ").c_str(),
      m.server().standby().standby_of_size() > 0
          ? absl::StrJoin(m.server().standby().standby_of(), ", ").c_str()
          : "none",
      m.server().standby().ready() ? "filled" : "filling",
      static_cast<long long>(m.server().standby().replication_lag()),
      Bytes(m.server().standby().replicated_bytes()).c_str());
}

// The lines below the table: the servers' tables and offload tiers, the
// consistency changes and the checkpoints.
void PrintClusterLines(const ClusterStatus& st) {
  for (const MemberStatus& m : st.members()) {
    if (m.role() != SERVER) continue;
    PrintServerTables(m);
    PrintServerStandbys(m);
    if (m.server().offload().disk_bytes() == 0) continue;
    std::printf(
        "server %d offloaded: %s of %s in memory; read %s (%.0f MB/s), wrote %s (%.0f MB/s)\n",
        m.id(), Bytes(m.server().offload().resident_bytes()).c_str(),
        Bytes(m.server().offload().disk_bytes()).c_str(),
        Bytes(m.server().offload().read_bytes()).c_str(), m.server().offload().read_mb_per_s(),
        Bytes(m.server().offload().write_bytes()).c_str(), m.server().offload().write_mb_per_s());
  }
  for (const ConsistencyChange& c : st.consistency_changes()) {
    std::printf(
        "consistency: %s%s from clock %lld on\n", Consistency_Name(c.consistency()).c_str(),
        c.consistency() == SSP ? absl::StrCat(" (staleness ", c.staleness(), ")").c_str() : "",
        static_cast<long long>(c.clock()));
  }
  if (st.checkpoint_asked() > 0 || st.manifest_clock() > 0) {
    std::printf("checkpoints: newest complete set of clock %lld",
                static_cast<long long>(st.manifest_clock()));
    if (st.checkpoint_asked() > 0) {
      std::printf("; clock %lld asked for%s", static_cast<long long>(st.checkpoint_asked()),
                  st.draining() ? " (draining: the job ends there)" : "");
    }
    std::printf("\n");
  }
}

void PrintCluster(const ClusterStatus& st) {
  PrintJobLines(st);
  std::vector<MemberStatus> rows = {st.scheduler()};
  rows.insert(rows.end(), st.members().begin(), st.members().end());
  PrintTable(rows);
  PrintClusterLines(st);
}

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
    eta = "ETA " + absl::FormatDuration(
                       absl::Trunc(absl::Seconds((total - clock) / rate), absl::Seconds(1)));
  }
  return absl::StrFormat("%s %5.1f %%  clock %lld of %lld, %.1f clocks/s, %s", bar,
                         100.0 * clock / total, static_cast<long long>(clock),
                         static_cast<long long>(total), std::max(rate, 0.0), eta);
}

}  // namespace

int StatusOfCluster(const Endpoint& scheduler, bool json) {
  ClusterStatus st;
  const grpc::Status rpc = FetchStatus(scheduler, &st);
  if (!rpc.ok()) return FailCall(scheduler.address, rpc);
  if (json) return PrintJson(st);
  PrintCluster(st);
  return 0;
}

int StatusOfDaemon(const Endpoint& daemon, const std::string& role, bool json) {
  MemberStatus st;
  auto ctx = ContextWithTimeout(daemon.timeout);
  grpc::Status rpc;
  if (role == "server") {
    rpc = ParameterServer::NewStub(MakeChannel(daemon.address))
              ->Status(ctx.get(), StatusRequest(), &st);
  } else if (role == "worker") {
    rpc = Worker::NewStub(MakeChannel(daemon.address))->Status(ctx.get(), StatusRequest(), &st);
  } else {
    std::fprintf(stderr, "psctl: --role=%s: expected server or worker\n", role.c_str());
    return 2;
  }
  if (!rpc.ok()) return FailCall(daemon.address, rpc);
  if (json) return PrintJson(st);
  PrintTable({st});
  return 0;
}

int Watch(const Endpoint& scheduler, const WatchOptions& options) {
  int64_t clock0 = -1;
  absl::Time t0;
  for (int n = 1;; ++n) {
    ClusterStatus st;
    const grpc::Status rpc = FetchStatus(scheduler, &st);
    if (!rpc.ok()) return FailCall(scheduler.address, rpc);
    if (clock0 < 0) clock0 = st.scheduler().clock(), t0 = absl::Now();
    if (options.json) {
      absl::StatusOr<std::string> line = StatusJson(st);  // one object per refresh
      if (line.ok()) std::printf("%s\n", line->c_str());
    } else {
      std::printf("\033[H\033[J%s\n", Progress(st, clock0, t0).c_str());  // in place
      PrintCluster(st);
    }
    std::fflush(stdout);
    const bool ended = st.job_state() == DONE || st.job_state() == ABORTED;
    if (ended) return st.job_state() == DONE ? 0 : 1;
    if (options.count > 0 && n >= options.count) return 0;
    absl::SleepFor(options.interval);
  }
}

}  // namespace pstrain
