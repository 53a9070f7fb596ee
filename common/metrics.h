// Prometheus metrics of a daemon (served on /metrics, common/http_server.h).
//
// Counters and gauges are read from the daemon's own MemberStatus at scrape
// time (the numbers psctl status shows, under Prometheus names); latency
// histograms are observed where the work happens, in the process-wide
// Latencies(). Names follow Prometheus' conventions: pstrain_ prefix,
// _total for counters, base units (_seconds, _bytes), labels role and id.
#ifndef PSTRAIN_COMMON_METRICS_H_
#define PSTRAIN_COMMON_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "proto/status.pb.h"

namespace pstrain {

// A latency histogram with fixed buckets (100 us to 60 s); Observe is
// lock-free and may be called from any thread.
class LatencyHistogram {
 public:
  static constexpr std::array<double, 14> kBounds = {1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2,
                                                     2.5e-2, 5e-2, 0.1, 0.5, 1, 5, 60};
  void Observe(absl::Duration d);

  struct Snapshot {
    std::array<uint64_t, kBounds.size() + 1> counts{};  // per bucket, the last +Inf
    double sum_s = 0;
  };
  Snapshot Read() const;

 private:
  std::array<std::atomic<uint64_t>, kBounds.size() + 1> counts_{};
  std::atomic<int64_t> sum_ns_{0};
};

// The latencies a daemon observes: a server's handling of a push (receipt
// to answer), of a pull (receipt to answer, parked time included) and of one
// chunk's optimizer update; a worker's wait at the gate and its push and
// pull calls (send to answer).
struct Latencies {
  LatencyHistogram push, pull, gate_wait, optimizer_update;
};
Latencies& ProcessLatencies();

// Writes the text exposition format (version 0.0.4): HELP and TYPE once
// per metric family, then its samples.
class PrometheusText {
 public:
  using Labels = std::vector<std::pair<std::string, std::string>>;

  void Counter(const std::string& name, const std::string& help, const Labels& labels,
               double value);
  void Gauge(const std::string& name, const std::string& help, const Labels& labels,
             double value);
  void Histogram(const std::string& name, const std::string& help, const Labels& labels,
                 const LatencyHistogram::Snapshot& snapshot);
  const std::string& text() const { return text_; }

 private:
  void Family(const std::string& name, const std::string& help, const char* type);
  void Sample(const std::string& name, const Labels& labels, double value);

  std::set<std::string> families_;
  std::string text_;
};

// The labels of a daemon: role and id (no id for the scheduler).
PrometheusText::Labels DaemonLabels(const MemberStatus& status);

// A daemon's counters and gauges from its MemberStatus, and its latencies.
void WriteDaemonMetrics(const MemberStatus& status, const Latencies& latencies,
                        PrometheusText* out);

// The scheduler's view of the whole job, from its ClusterStatus.
void WriteClusterMetrics(const ClusterStatus& status, PrometheusText* out);

// The content type of the text format.
inline constexpr char kPrometheusContentType[] = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_METRICS_H_
