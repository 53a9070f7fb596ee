#include "common/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/enum_names.h"
#include "common/refused.h"

namespace pstrain {
namespace {

// Label values escape backslash, double quote and newline; HELP text
// backslash and newline (the exposition format's rules).
std::string Escape(const std::string& s, bool quote) {
  std::string out;
  for (char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && quote) {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

std::string Number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  // The shortest of %.15g and %.17g that reads back exactly ("0.0001", not
  // "0.00010000000000000000479").
  const std::string shorter = absl::StrFormat("%.15g", v);
  return std::strtod(shorter.c_str(), nullptr) == v ? shorter : absl::StrFormat("%.17g", v);
}

}  // namespace

void LatencyHistogram::Observe(absl::Duration d) {
  const double s = absl::ToDoubleSeconds(d);
  const size_t bucket = std::lower_bound(kBounds.begin(), kBounds.end(), s) - kBounds.begin();
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(absl::ToInt64Nanoseconds(d), std::memory_order_relaxed);
}

LatencyHistogram::Snapshot LatencyHistogram::Read() const {
  Snapshot s;
  for (size_t i = 0; i < counts_.size(); ++i)
    s.counts[i] = counts_[i].load(std::memory_order_relaxed);
  s.sum_s = static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) / 1e9;
  return s;
}

Latencies& ProcessLatencies() {
  static Latencies* latencies = new Latencies;
  return *latencies;
}

void PrometheusText::Family(const std::string& name, const std::string& help, const char* type) {
  if (!families_.insert(name).second) return;
  absl::StrAppend(&text_, "# HELP ", name, " ", Escape(help, false), "\n# TYPE ", name, " ", type,
                  "\n");
}

void PrometheusText::Sample(const std::string& name, const Labels& labels, double value) {
  text_ += name;
  if (!labels.empty()) {
    text_ += "{";
    for (size_t i = 0; i < labels.size(); ++i) {
      absl::StrAppend(&text_, i ? "," : "", labels[i].first, "=\"", Escape(labels[i].second, true),
                      "\"");
    }
    text_ += "}";
  }
  absl::StrAppend(&text_, " ", Number(value), "\n");
}

void PrometheusText::Counter(const std::string& name, const std::string& help, const Labels& labels,
                             double value) {
  Family(name, help, "counter");
  Sample(name, labels, value);
}

void PrometheusText::Gauge(const std::string& name, const std::string& help, const Labels& labels,
                           double value) {
  Family(name, help, "gauge");
  Sample(name, labels, value);
}

void PrometheusText::Histogram(const std::string& name, const std::string& help,
                               const Labels& labels, const LatencyHistogram::Snapshot& snapshot) {
  Family(name, help, "histogram");
  uint64_t cumulative = 0;
  for (size_t i = 0; i < snapshot.counts.size(); ++i) {
    cumulative += snapshot.counts[i];
    Labels with_le = labels;
    with_le.emplace_back("le", i < LatencyHistogram::kBounds.size()
                                   ? Number(LatencyHistogram::kBounds[i])
                                   : std::string("+Inf"));
    Sample(name + "_bucket", with_le, static_cast<double>(cumulative));
  }
  Sample(name + "_sum", labels, snapshot.sum_s);
  Sample(name + "_count", labels, static_cast<double>(cumulative));
}

PrometheusText::Labels DaemonLabels(const MemberStatus& status) {
  PrometheusText::Labels labels = {{"role", EnumWord(status.role())}};
  if (status.role() != SCHEDULER) labels.emplace_back("id", absl::StrCat(status.id()));
  return labels;
}

namespace {

// A server's part of each sparse table, labelled by the table's name (one
// family after another: a family's samples must not interleave).
void WriteTableMetrics(const MemberStatus& s, PrometheusText* out) {
  if (s.server().tables_size() == 0) return;
  const PrometheusText::Labels l = DaemonLabels(s);
  struct Field {
    const char* name;
    const char* help;
    bool counter;
    int64_t (TableStatus::*value)() const;
  };
  const Field fields[] = {
      {"pstrain_table_rows", "rows of a sparse table this server holds", false, &TableStatus::rows},
      {"pstrain_table_bytes", "bytes of those rows' weights and optimizer state", false,
       &TableStatus::bytes},
      {"pstrain_table_rows_pulled_total", "rows sent in pulls' replies", true,
       &TableStatus::rows_pulled},
      {"pstrain_table_rows_pushed_total", "rows updated by pushes", true,
       &TableStatus::rows_pushed},
      {"pstrain_table_updates_total", "pushes applied to the table", true, &TableStatus::updates},
      {"pstrain_table_refused_total",
       "pulls and pushes of the table refused: the table's part of "
       "pstrain_requests_refused_total{what=\"rows\"}",
       true, &TableStatus::refused},
      {"pstrain_table_clock", "iterations applied to the table from every live worker", false,
       &TableStatus::clock},
      {"pstrain_table_pulls_waiting", "pulls parked until their read guarantee holds", false,
       &TableStatus::pulls_waiting},
      {"pstrain_table_rows_resident", "rows of the table in memory", false,
       &TableStatus::rows_resident},
      {"pstrain_table_rows_on_disk", "rows of the table in its spill file", false,
       &TableStatus::rows_on_disk},
      {"pstrain_table_rows_spilled_total", "rows written to the spill file", true,
       &TableStatus::rows_spilled},
      {"pstrain_table_rows_loaded_total", "rows read back from the spill file", true,
       &TableStatus::rows_loaded},
      {"pstrain_table_rows_created_total", "rows made (first touch or admission)", true,
       &TableStatus::rows_created},
      {"pstrain_table_rows_expired_total", "rows dropped untouched (expire_after_clocks)", true,
       &TableStatus::rows_expired},
      {"pstrain_table_rows_dropped_total",
       "gradient rows dropped: ids not admitted yet, or expired under way", true,
       &TableStatus::rows_dropped},
      {"pstrain_table_nonfinite_skipped_total",
       "pushes to the table taken but not applied for a NaN or Inf", true,
       &TableStatus::nonfinite_skipped},
  };
  for (const Field& f : fields) {
    for (const TableStatus& t : s.server().tables()) {
      PrometheusText::Labels lt = l;
      lt.emplace_back("table", t.name());
      const double v = static_cast<double>((t.*f.value)());
      if (f.counter) {
        out->Counter(f.name, f.help, lt, v);
      } else {
        out->Gauge(f.name, f.help, lt, v);
      }
    }
  }
}

// A server's refusals, one sample per word of common/refused.h.
void WriteRefusedMetrics(const MemberStatus& s, PrometheusText* out) {
  for (const char* what : kRefusedWhat) {
    PrometheusText::Labels lw = DaemonLabels(s);
    lw.emplace_back("what", what);
    out->Counter("pstrain_requests_refused_total",
                 "requests a server refused, by what: chunks (pushes and pulls refused as "
                 "malformed), rows (sparse table pulls and pushes), shm (connections to the "
                 "shared-memory socket)",
                 lw, Refused(s, what));
  }
}

// A server's part in standby copies (none without them).
void WriteStandbyMetrics(const MemberStatus& s, const PrometheusText::Labels& l,
                         PrometheusText* out) {
  if (s.server().standby().serving_size() == 0 && s.server().standby().standby_of_size() == 0)
    return;
  out->Gauge("pstrain_replication_lag",
             "changes of the chunks this server serves that their standby has not confirmed", l,
             s.server().standby().replication_lag());
  out->Counter("pstrain_replicated_bytes_total", "bytes this server sent to its standbys", l,
               s.server().standby().replicated_bytes());
  out->Gauge("pstrain_standby_ready",
             "1 when every standby copy this server keeps is filled (it can take over)", l,
             s.server().standby().ready());
}

}  // namespace

void WriteDaemonMetrics(const MemberStatus& s, const Latencies& latencies, PrometheusText* out) {
  const PrometheusText::Labels l = DaemonLabels(s);
  out->Gauge("pstrain_up", "1 while the daemon answers", l, 1);
  out->Gauge("pstrain_uptime_seconds", "seconds since the daemon started", l, s.uptime_s());
  out->Gauge("pstrain_resident_memory_bytes", "the process' resident memory", l, s.rss_bytes());
  out->Gauge("pstrain_clock",
             "workers: clocks finished; servers: the slowest worker's clock applied; scheduler: "
             "the slowest live worker's clock",
             l, s.clock());
  out->Gauge("pstrain_parked_calls",
             "calls this daemon holds until they can be answered (parked pulls, gate calls, norm "
             "rounds)",
             l, s.waits_size());
  out->Gauge("pstrain_generation", "the cluster generation this daemon is in (one per rollback)", l,
             s.generation());
  if (s.role() == SCHEDULER) return;
  out->Counter("pstrain_pushes_total", "pushes sent (workers) or applied (servers)", l, s.pushes());
  out->Counter("pstrain_pulls_total", "pulls made (workers) or answered (servers)", l, s.pulls());
  out->Counter("pstrain_received_bytes_total", "payload bytes received", l, s.bytes_in());
  out->Counter("pstrain_sent_bytes_total", "payload bytes sent", l, s.bytes_out());
  const std::string role = s.role() == SERVER ? "server" : "worker";
  auto histogram = [&](const char* name, const char* help, const LatencyHistogram& h) {
    out->Histogram(name, help, l, h.Read());
  };
  histogram("pstrain_push_duration_seconds",
            "push latency: a server's receipt to answer, a worker's call to answer",
            latencies.push);
  histogram("pstrain_pull_duration_seconds",
            "pull latency (a parked pull's wait included): a server's receipt to answer, a "
            "worker's call to answer",
            latencies.pull);
  if (s.role() == SERVER) {
    out->Counter("pstrain_nonfinite_skipped_total",
                 "parts of pushes (chunks', tables') not applied for a NaN or Inf", l,
                 s.server().nonfinite_skipped());
    WriteRefusedMetrics(s, out);
    out->Gauge("pstrain_parameters", "parameters this server holds", l, s.server().params());
    out->Gauge("pstrain_checkpoint_clock", "the newest checkpoint this server wrote", l,
               s.server().checkpoint_clock());
    WriteStandbyMetrics(s, l, out);
    histogram("pstrain_optimizer_update_duration_seconds", "one chunk's optimizer update",
              latencies.optimizer_update);
    WriteTableMetrics(s, out);
    return;
  }
  histogram("pstrain_gate_wait_duration_seconds", "a worker's wait for the gate to open",
            latencies.gate_wait);
  PrometheusText::Labels with_frontend = l;
  with_frontend.emplace_back("frontend",
                             s.worker().frontend().empty() ? "builtin" : s.worker().frontend());
  out->Gauge("pstrain_worker_info",
             "1; frontend: what computes the worker's gradients (builtin: ps_worker's own "
             "models; pytorch: a PyTorch script)",
             with_frontend, 1);
  out->Gauge("pstrain_loss", "the last training loss", l, s.worker().loss());
  if (s.worker().test_accuracy() >= 0) {
    out->Gauge("pstrain_test_accuracy", "the last evaluation's accuracy", l,
               s.worker().test_accuracy());
  }
  if (s.worker().validation_loss() >= 0 && s.worker().unigram_entropy() > 0) {
    out->Gauge("pstrain_validation_loss", "the last validation loss (nats per byte)", l,
               s.worker().validation_loss());
  }
  out->Gauge("pstrain_samples_per_second", "training throughput seen by this worker", l,
             s.worker().samples_per_s());
  const std::pair<const char*, double> phases[] = {{"gate", s.worker().gate_ms()},
                                                   {"pull", s.worker().pull_ms()},
                                                   {"compute", s.worker().compute_ms()},
                                                   {"push", s.worker().push_ms()}};
  for (const auto& [phase, ms] : phases) {
    PrometheusText::Labels with_phase = l;
    with_phase.emplace_back("phase", phase);
    out->Gauge("pstrain_clock_phase_seconds",
               "where a recent clock's time went (mean over the last progress window)", with_phase,
               ms / 1e3);
  }
}

// The placement's part: its version, what each server holds, the move
// under way and the moves ended (ClusterStatus.placement).
void WritePlacementMetrics(const PlacementStatus& p, PrometheusText* out) {
  const PrometheusText::Labels l = {{"role", "scheduler"}};
  out->Gauge("pstrain_placement_version", "the placement in force (1: the job's initial one)", l,
             p.version());
  // Each family's samples together (the text format asks it).
  const std::vector<std::pair<const char*, const char*>> held = {
      {"pstrain_placement_chunks", "the chunks a server holds by the placement"},
      {"pstrain_placement_chunk_bytes", "the fp32 weights of those chunks"},
      {"pstrain_placement_row_buckets", "the row buckets a server holds (of 1024)"}};
  for (size_t f = 0; f < held.size(); ++f) {
    for (const PlacedServer& s : p.servers()) {
      const double v = f == 0 ? s.chunks() : f == 1 ? s.chunk_bytes() : s.row_buckets();
      out->Gauge(held[f].first, held[f].second,
                 {{"role", "scheduler"}, {"server", std::to_string(s.server())}}, v);
    }
  }
  const MoveStatus& m = p.move();
  out->Gauge("pstrain_move_under_way", "1 while a server is added or drained", l, p.has_move());
  out->Gauge("pstrain_move_switch_clock", "the clock the move under way switches at (-1: none)", l,
             p.has_move() ? m.switch_clock() : -1);
  out->Gauge("pstrain_move_bytes_left",
             "the state the move under way has still to hand over (weights and optimizer state)", l,
             p.has_move() ? m.bytes_left() : 0);
  out->Gauge("pstrain_move_waiting_servers", "the servers the move under way waits for", l,
             m.waiting_for_size());
  int64_t switched = 0, abandoned = 0, bytes = 0;
  for (const MoveRecord& r : p.history()) {
    if (r.abandoned().empty()) {
      ++switched;
      bytes += r.bytes();
    } else {
      ++abandoned;
    }
  }
  out->Counter("pstrain_moves_total", "moves ended",
               {{"role", "scheduler"}, {"outcome", "switched"}}, switched);
  out->Counter("pstrain_moves_total", "moves ended",
               {{"role", "scheduler"}, {"outcome", "abandoned"}}, abandoned);
  out->Counter("pstrain_moved_bytes_total", "the state moved by the moves that switched", l, bytes);
}

void WriteClusterMetrics(const ClusterStatus& st, PrometheusText* out) {
  const PrometheusText::Labels l = {{"role", "scheduler"}};
  out->Gauge("pstrain_job_running", "1 while the job runs", l, st.job_state() == RUNNING_JOB);
  out->Gauge("pstrain_job_done", "1 once every worker finished", l, st.job_state() == DONE);
  out->Gauge("pstrain_job_aborted", "1 once the job was aborted", l, st.job_state() == ABORTED);
  out->Gauge("pstrain_total_clocks", "the clocks the job runs", l, st.total_clocks());
  out->Gauge("pstrain_staleness", "the staleness bound in force (0 under BSP, -1 under ASP)", l,
             st.consistency() == BSP   ? 0
             : st.consistency() == SSP ? st.staleness()
                                       : -1);
  out->Counter("pstrain_rollbacks_total", "rollbacks to a checkpoint", l, st.rollbacks_size());
  out->Counter("pstrain_deaths_total", "members declared dead", l, st.deaths());
  WritePlacementMetrics(st.placement(), out);
  if (st.routes().serving_size() > 0) {  // standby copies
    out->Counter("pstrain_promotions_total", "standby copies promoted when a server died", l,
                 st.promotions());
    for (int home = 0; home < st.routes().serving_size(); ++home) {
      out->Gauge("pstrain_serving_server",
                 "the server that serves a server's chunks now (home: the chunks' own server)",
                 {{"role", "scheduler"}, {"home", std::to_string(home)}},
                 st.routes().serving(home));
    }
  }
  int64_t slowest = -1, fastest = -1;  // from the gate's clock table
  for (int64_t c : st.worker_clocks()) {
    if (c < 0) continue;
    slowest = slowest < 0 ? c : std::min(slowest, c);
    fastest = std::max(fastest, c);
  }
  int live_servers = 0, live_workers = 0;
  for (const MemberStatus& m : st.members()) {
    const bool live = m.state() == REGISTERED || m.state() == RUNNING;
    if (m.role() == SERVER) live_servers += live;
    if (m.role() == WORKER) live_workers += live;
  }
  out->Gauge("pstrain_live_members", "members registered or running", {{"member_role", "server"}},
             live_servers);
  out->Gauge("pstrain_live_members", "members registered or running", {{"member_role", "worker"}},
             live_workers);
  out->Gauge("pstrain_slowest_worker_clock", "the slowest worker's clock", l,
             std::max<int64_t>(slowest, 0));
  out->Gauge("pstrain_fastest_worker_clock", "the fastest worker's clock", l,
             std::max<int64_t>(fastest, 0));
}

}  // namespace pstrain
