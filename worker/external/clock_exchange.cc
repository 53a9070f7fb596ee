#include "worker/external/clock_exchange.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace pstrain {

absl::StatusOr<StepResult> ClockExchange::RunClock(OfferedClock offer, const Ready& ready) {
  absl::MutexLock lock(&mu_);
  if (closed_.has_value()) return absl::CancelledError(closed_->message());
  offer_ = std::move(offer);
  reported_.assign(num_params_, false);
  ready_.clear();
  phase_ = Phase::kOffered;
  auto news = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !ready_.empty() || phase_ == Phase::kDone || closed_.has_value();
  };
  while (true) {
    mu_.Await(absl::Condition(&news));
    if (closed_.has_value()) {
      phase_ = Phase::kIdle;
      return absl::CancelledError(closed_->message());
    }
    // The events in the order they came, handed over outside the lock: a
    // push may take a while to queue.
    std::vector<int> params;
    std::vector<bool> absent;
    std::vector<const float*> at;
    for (const Event& r : ready_) {
      params.push_back(r.param);
      absent.push_back(r.absent);
      at.push_back(r.at);
    }
    ready_.clear();
    if (!params.empty()) {
      mu_.Unlock();
      ready(params, absent, at);
      mu_.Lock();
      continue;  // (the clock may have ended meanwhile: the events go first)
    }
    phase_ = Phase::kIdle;
    return result_;
  }
}

void ClockExchange::End(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  ended_ = status;
}

absl::StatusOr<std::optional<ClockExchange::OfferedClock>> ClockExchange::Await(
    absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  if (phase_ == Phase::kTaken) {
    return absl::FailedPreconditionError("the last clock is not done yet (step() was not called)");
  }
  auto arrived = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return phase_ == Phase::kOffered || ended_.has_value();
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&arrived), timeout)) {
    return absl::DeadlineExceededError("no clock yet");
  }
  if (phase_ == Phase::kOffered) {
    phase_ = Phase::kTaken;
    return std::optional<OfferedClock>(offer_);
  }
  if (!ended_->ok()) return *ended_;
  return std::optional<OfferedClock>();
}

absl::Status ClockExchange::GradsReady(int param) { return Report(param, false, nullptr); }

absl::Status ClockExchange::GradsAbsent(int param) { return Report(param, true, nullptr); }

absl::Status ClockExchange::GradsAt(int param, const float* at) {
  if (at == nullptr) return absl::InvalidArgumentError("a gradient at no address");
  return Report(param, false, at);
}

absl::Status ClockExchange::Report(int param, bool absent, const float* at) {
  absl::MutexLock lock(&mu_);
  if (phase_ != Phase::kTaken) return NotUnderWay("a gradient was reported outside a clock");
  if (param < 0 || param >= num_params_) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter ", param, " outside [0, ", num_params_, ")"));
  }
  if (reported_[param]) {
    return absl::FailedPreconditionError(absl::StrCat(
        "parameter ", param,
        "'s gradient was reported twice in one clock (backward() twice? its first gradient has "
        "left for the servers; turn overlap off to accumulate)"));
  }
  reported_[param] = true;
  ready_.push_back({param, absent, at});
  return absl::OkStatus();
}

absl::Status ClockExchange::ClockDone(const StepResult& result) {
  absl::MutexLock lock(&mu_);
  if (phase_ != Phase::kTaken) return NotUnderWay("no clock is under way");
  result_ = result;
  phase_ = Phase::kDone;
  return absl::OkStatus();
}

absl::Status ClockExchange::NotUnderWay(absl::string_view what) const {
  // A clock the loop gave up (the job aborted, the scheduler lost) or the
  // caller closed: why, rather than the caller's mistake it is not.
  if (ended_.has_value() && !ended_->ok()) return *ended_;
  if (closed_.has_value()) return *closed_;
  return absl::FailedPreconditionError(what);
}

void ClockExchange::Close(const absl::Status& why) {
  absl::MutexLock lock(&mu_);
  if (!closed_.has_value()) closed_ = why;
}

}  // namespace pstrain
