#include "scheduler/run_history.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"

namespace pstrain {

absl::StatusOr<std::unique_ptr<RunHistory>> RunHistory::Open(const std::string& run_dir) {
  if (run_dir.empty()) return std::unique_ptr<RunHistory>(new RunHistory(nullptr));
  if (mkdir(run_dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::InvalidArgumentError(
        absl::StrCat("--run_dir=", run_dir, ": ", std::strerror(errno)));
  }
  const std::string path = run_dir + "/curves.jsonl";
  std::FILE* f = std::fopen(path.c_str(), "a");
  if (f == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", std::strerror(errno)));
  }
  return std::unique_ptr<RunHistory>(new RunHistory(f));
}

RunHistory::~RunHistory() {
  if (file_ != nullptr) std::fclose(file_);
}

RunPoint RunHistory::PointOf(const ClusterStatus& status, int64_t unix_ms) {
  RunPoint p;
  p.set_unix_ms(unix_ms);
  p.set_clock(status.scheduler().clock());
  p.set_test_accuracy(-1);
  p.set_validation_loss(-1);
  p.set_samples_per_s(-1);
  double loss = 0;
  int reported = 0;  // live workers that have reported a loss
  for (const MemberStatus& m : status.members()) {
    if (m.role() != WORKER) continue;
    const bool dead = m.state() == DEAD || m.state() == FAILED;
    p.add_worker_clocks(dead ? -1 : m.clock());
    if (dead || m.clock() == 0) continue;  // no loss yet
    // A worker's first heartbeats after its first clock may carry no loss
    // (0) and no rate (0, until its first progress window): not points.
    if (m.worker().loss() > 0) {
      ++reported;
      loss += m.worker().loss();
    }
    if (m.worker().samples_per_s() > 0)
      p.set_samples_per_s(std::max(p.samples_per_s(), m.worker().samples_per_s()));
    p.set_test_accuracy(std::max(p.test_accuracy(), m.worker().test_accuracy()));
    if (m.worker().unigram_entropy() > 0 && m.worker().validation_loss() >= 0) {
      p.set_validation_loss(p.validation_loss() < 0
                                ? m.worker().validation_loss()
                                : std::min(p.validation_loss(), m.worker().validation_loss()));
    }
  }
  p.set_loss(reported > 0 ? loss / reported : -1);
  return p;
}

void RunHistory::Record(const ClusterStatus& status, int64_t unix_ms) {
  RunPoint p = PointOf(status, unix_ms);
  bool trained = false;  // a point before any worker's first clock has no loss
  for (int64_t c : p.worker_clocks()) trained = trained || c > 0;
  if (!trained) return;
  absl::MutexLock lock(&mu_);
  if (!points_.empty()) {
    const RunPoint& last = points_.back();
    // A new evaluation is a point too: the final one comes after the last
    // clock.
    bool same = last.clock() == p.clock() && last.worker_clocks_size() == p.worker_clocks_size() &&
                last.test_accuracy() == p.test_accuracy() &&
                last.validation_loss() == p.validation_loss();
    for (int i = 0; same && i < p.worker_clocks_size(); ++i) {
      same = (last.worker_clocks(i) < 0) == (p.worker_clocks(i) < 0);
    }
    if (same) return;
  }
  if (file_ != nullptr) {
    std::string line;
    google::protobuf::util::JsonPrintOptions options;
    options.preserve_proto_field_names = true;
    options.always_print_primitive_fields = true;
    if (google::protobuf::util::MessageToJsonString(p, &line, options).ok()) {
      std::fprintf(file_, "%s\n", line.c_str());
      std::fflush(file_);
    }
  }
  if (points_.size() >= kMaxPoints) {
    std::vector<RunPoint> kept;
    for (size_t i = 0; i < points_.size(); i += 2) kept.push_back(std::move(points_[i]));
    points_ = std::move(kept);
  }
  points_.push_back(std::move(p));
}

std::vector<RunPoint> RunHistory::Points() const {
  absl::MutexLock lock(&mu_);
  return points_;
}

}  // namespace pstrain
