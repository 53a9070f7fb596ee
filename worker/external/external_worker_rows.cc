// ExternalWorker's sparse-table rows (pst_pull_rows, pst_push_rows): the
// row clients, the clock's read guarantee and generation on every call, a
// clock made void by a rollback. See worker/external/external_worker.h.
#include <future>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "worker/external/external_worker.h"

namespace pstrain {

absl::StatusOr<RowClient*> ExternalWorker::Rows(const std::string& table, int width) {
  if (!declared_) return absl::FailedPreconditionError("register before pulling or pushing rows");
  const TableSpec* spec = nullptr;
  for (const TableSpec& t : job_.tables()) {
    if (t.name() == table) spec = &t;
  }
  if (spec == nullptr) {
    return absl::NotFoundError(absl::StrCat("the job declares no table '", table, "'"));
  }
  if (spec->width() != width) {
    return absl::InvalidArgumentError(
        absl::StrCat("table '", table, "' has rows of width ", spec->width(), ", not ", width));
  }
  if (rows_ == nullptr) rows_ = NewRowClient();
  return rows_.get();
}

std::unique_ptr<RowClient> ExternalWorker::NewRowClient() {
  // The servers as the loop's latest list of members has them (a
  // replacement's address once the loop reconnected after a rollback).
  // With standby copies each home's rows go where the routes say.
  return std::make_unique<RowClient>(
      job_, [this] { return HomeAddressesNow(); }, id_);
}

std::vector<std::string> ExternalWorker::HomeAddressesNow() const {
  if (job_.standby_copies() == 0) return servers();
  return HomeAddresses(daemon_->client().routes(), servers());
}

StateCalls ExternalWorker::StateCallsNow() const {
  StateCalls calls;
  calls.home_addresses = [this] { return HomeAddressesNow(); };
  calls.generation = daemon_->client().generation();
  calls.abandon = AbandonAfter(calls.generation);
  return calls;
}

std::function<absl::Status()> ExternalWorker::AbandonAfter(int64_t generation) const {
  return [this, generation]() -> absl::Status {
    std::string message;
    if (daemon_->client().job_state(&message) == ABORTED) {
      return absl::AbortedError(absl::StrCat("the job was aborted: ", message));
    }
    if (daemon_->client().generation() > generation) {
      return absl::AbortedError(
          absl::StrCat("the cluster rolled back past generation ", generation));
    }
    return absl::OkStatus();
  };
}

bool ExternalWorker::PushesRowsAsync() const {
  return job_.standby_copies() > 0 && TableConsistency(job_) == BSP;
}

absl::Status ExternalWorker::AwaitRowPushes() {
  absl::Status first;
  for (std::future<absl::Status>& push : row_pushes_) {
    const absl::Status st = push.get();
    if (first.ok() && !st.ok()) first = st;
  }
  row_pushes_.clear();
  return first.ok() ? first : VoidClockOr(first);
}

RowCall ExternalWorker::RowCallNow() {
  RowCall call;
  call.clock = under_way_.has_value() ? under_way_->clock : next_clock_;
  call.generation = under_way_.has_value() ? under_way_generation_ : daemon_->client().generation();
  call.abandon = AbandonAfter(call.generation);
  call.placement = PlacementNow();
  return call;
}

bool ExternalWorker::RolledBackSince(int64_t generation) {
  if (daemon_->client().generation() > generation) return true;
  const absl::StatusOr<HeartbeatResponse> now = daemon_->client().Heartbeat(Status());
  return now.ok() && now->generation() > generation;
}

absl::Status ExternalWorker::VoidClockOr(const absl::Status& failure) {
  if (!under_way_.has_value() || !RolledBackSince(under_way_generation_)) return failure;
  if (!under_way_void_) {
    spdlog::info("clock {}: the cluster rolled back past generation {}; the clock is void ({})",
                 under_way_->clock, under_way_generation_, failure.message());
  }
  under_way_void_ = true;
  return absl::OkStatus();
}

absl::Status ExternalWorker::PullRows(const std::string& table, int width,
                                      absl::Span<const uint64_t> ids, std::vector<float>* rows) {
  ASSIGN_OR_RETURN(RowClient * client, Rows(table, width));
  for (int tries = 1; !under_way_void_; ++tries) {
    const RowCall call = RowCallNow();
    const absl::Status st = client->Pull(table, call, ids, rows);
    if (st.ok()) return st;
    if (under_way_.has_value()) {
      RETURN_IF_ERROR(VoidClockOr(st));
      break;
    }
    // After the last clock (an evaluation), a pull of a generation the
    // cluster rolled back past is asked again in the new one.
    if (tries == 3 || !RolledBackSince(call.generation)) return st;
  }
  rows->assign(ids.size() * static_cast<size_t>(width), 0.0f);  // computed on, thrown away
  return absl::OkStatus();
}

absl::Status ExternalWorker::PushRows(const std::string& table, int width,
                                      absl::Span<const uint64_t> ids,
                                      absl::Span<const float> grads) {
  ASSIGN_OR_RETURN(RowClient * client, Rows(table, width));
  if (!under_way_.has_value()) {
    return absl::FailedPreconditionError("rows are pushed during a clock (after pst_next)");
  }
  if (tables_pushed_.count(table) > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "table '", table, "' was pushed already at clock ", under_way_->clock, " (once a clock)"));
  }
  // Marked once taken (or dropped with a void clock): a push that failed
  // may be tried again.
  const int samples = static_cast<int>(under_way_->indices.size());
  if (!under_way_void_ && PushesRowsAsync()) {
    // On the table's own client, in the background until ClockDone.
    std::unique_ptr<RowClient>& pusher = push_clients_[table];
    if (pusher == nullptr) pusher = NewRowClient();
    row_pushes_.push_back(
        std::async(std::launch::async, [pusher = pusher.get(), table, call = RowCallNow(), samples,
                                        ids = std::vector<uint64_t>(ids.begin(), ids.end()),
                                        grads = std::vector<float>(grads.begin(), grads.end())] {
          return pusher->Push(table, call, samples, ids, grads);
        }));
  } else if (!under_way_void_) {
    const absl::Status st = client->Push(table, RowCallNow(), samples, ids, grads);
    if (!st.ok()) RETURN_IF_ERROR(VoidClockOr(st));
  }
  tables_pushed_.insert(table);
  return absl::OkStatus();
}

}  // namespace pstrain
