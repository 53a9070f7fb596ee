#include "common/scheduler_client.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/daemon_status.h"
#include "common/logging.h"
#include "common/process_stats.h"
#include "common/retry.h"
#include "common/rpc.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"

namespace pstrain {
namespace {

bool Ended(JobState s) { return s == DONE || s == ABORTED; }

// A call's answer, tagged as the scheduler's (common/daemon_status.h).
absl::Status FromScheduler(const grpc::Status& st) { return FromDaemon(SCHEDULER, FromGrpc(st)); }

}  // namespace

SchedulerClient::SchedulerClient(SchedulerClientOptions options)
    : options_(std::move(options)),
      incarnation_(NewIncarnation()),
      stub_(Scheduler::NewStub(MakeChannel(options_.scheduler))) {}

SchedulerClient::~SchedulerClient() { StopHeartbeats(); }

void SchedulerClient::StopHeartbeats() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
}

absl::Status SchedulerClient::ReportFinal(const MemberStatus& status) {
  StopHeartbeats();
  // Retried for what is left of the members' window since the scheduler
  // last answered (a scheduler taking the job over answers within it); a
  // scheduler already lost, or a job known to have ended (the scheduler may
  // be gone by now), gets one attempt.
  absl::Duration window;
  {
    absl::MutexLock lock(&mu_);
    const bool once = lost_scheduler_ || Ended(job_state_);
    window = once ? absl::ZeroDuration()
                  : std::max(absl::ZeroDuration(),
                             last_heard_ + options_.scheduler_timeout - absl::Now());
  }
  RetryPolicy policy;
  policy.window = window;
  policy.classify = [](const absl::Status&) { return RetryAction::kRetry; };
  const absl::Status st = Retry(policy, [&] { return Heartbeat(status).status(); });
  if (!st.ok()) {
    spdlog::error("could not report {} to the scheduler: {}", MemberState_Name(status.state()),
                  st.message());
  }
  return st;
}

absl::StatusOr<RegisterResponse> SchedulerClient::Register(RegisterRequest declared) {
  RegisterRequest req = std::move(declared);
  req.set_role(options_.role);
  req.set_address(options_.address);
  req.set_incarnation(incarnation_);
  if (options_.id >= 0) req.set_id(options_.id);
  req.set_replace_live(options_.replace_live);
  auto unreachable = [](const absl::Status& st) {
    return IsTransient(st) || absl::IsDeadlineExceeded(st);
  };
  RetryPolicy policy;
  policy.window = options_.connect_timeout;
  policy.classify = [&](const absl::Status& st) {
    return unreachable(st) ? RetryAction::kRetry : RetryAction::kStop;
  };
  policy.on_retry = [this](const absl::Status& st, int attempts) {
    if (attempts == 1 || attempts % 10 == 0) {
      spdlog::warn("scheduler at {} not reachable yet ({}); retrying", options_.scheduler,
                   st.message());
    }
  };
  int attempts = 0;
  const absl::StatusOr<RegisterResponse> resp =
      Retry<RegisterResponse>(policy, [&]() -> absl::StatusOr<RegisterResponse> {
        ++attempts;
        RegisterResponse r;
        auto ctx = ContextWithTimeout(absl::Seconds(5));
        RETURN_IF_ERROR(FromScheduler(stub_->Register(ctx.get(), req, &r)));
        return r;
      });
  if (resp.ok()) {
    absl::MutexLock lock(&mu_);
    last_heard_ = absl::Now();
    return resp;
  }
  const absl::Status& last = resp.status();
  if (!unreachable(last)) {
    return FromDaemon(
        SCHEDULER,
        absl::Status(last.code(), absl::StrCat("scheduler at ", options_.scheduler,
                                               " refused registration: ", last.message())));
  }
  return FromDaemon(SCHEDULER, absl::UnavailableError(absl::StrCat(
                                   "cannot reach the scheduler at ", options_.scheduler, " after ",
                                   absl::FormatDuration(options_.connect_timeout), " (", attempts,
                                   " attempts): ", last.message())));
}

absl::StatusOr<JobSpec> SchedulerClient::CurrentJob() {
  ClusterStatus resp;
  auto ctx = ContextWithTimeout(absl::Seconds(5));
  RETURN_IF_ERROR(FromScheduler(stub_->Status(ctx.get(), StatusRequest(), &resp)));
  return resp.job();
}

absl::Status SchedulerClient::SendLastWords(const MemberStatus& status) const {
  HeartbeatRequest req;
  *req.mutable_status() = status;
  req.set_incarnation(incarnation_);
  HeartbeatResponse resp;
  auto ctx = ContextWithTimeout(absl::Seconds(2));
  return FromScheduler(stub_->Heartbeat(ctx.get(), req, &resp));
}

absl::StatusOr<HeartbeatResponse> SchedulerClient::Heartbeat(const MemberStatus& status) {
  HeartbeatRequest req;
  *req.mutable_status() = status;
  req.set_incarnation(incarnation_);
  HeartbeatResponse resp;
  auto ctx = ContextWithTimeout(absl::Seconds(5));
  const absl::Status st = FromScheduler(stub_->Heartbeat(ctx.get(), req, &resp));
  if (!st.ok()) return st;
  absl::MutexLock lock(&mu_);
  last_heard_ = absl::Now();
  if (!Ended(job_state_)) {
    job_state_ = resp.job_state();
    job_message_ = resp.message();
  }
  dead_workers_.assign(resp.dead_workers().begin(), resp.dead_workers().end());
  generation_ = resp.generation();
  restore_clock_ = resp.restore_clock();
  manifest_clock_ = resp.manifest_clock();
  link_generation_ = resp.link_generation();
  leave_ = resp.leave();
  next_beat_ = absl::Milliseconds(resp.next_heartbeat_ms());
  if (resp.routes().version() >= routes_.version() && resp.routes().serving_size() > 0) {
    routes_ = resp.routes();
  }
  if (resp.placement().version() > placement_.version()) placement_ = resp.placement();
  move_ = resp.move();
  return resp;
}

ServerRoutes SchedulerClient::routes() const {
  absl::MutexLock lock(&mu_);
  return routes_;
}

Placement SchedulerClient::placement() const {
  absl::MutexLock lock(&mu_);
  return placement_;
}

MoveNews SchedulerClient::move() const {
  absl::MutexLock lock(&mu_);
  return move_;
}

void SchedulerClient::SetPlacement(const Placement& placement) {
  absl::MutexLock lock(&mu_);
  if (placement.version() > placement_.version()) placement_ = placement;
}

void SchedulerClient::SetRoutes(const ServerRoutes& routes) {
  absl::MutexLock lock(&mu_);
  if (routes.version() >= routes_.version()) routes_ = routes;
}

void SchedulerClient::StartHeartbeats(std::function<MemberStatus()> status_fn) {
  {
    absl::MutexLock lock(&mu_);
    last_heard_ = absl::Now();
  }
  heartbeat_thread_ = std::thread([this, fn = std::move(status_fn)] { HeartbeatLoop(fn); });
}

void SchedulerClient::BeatNow() {
  absl::MutexLock lock(&mu_);
  beat_now_ = true;
}

void SchedulerClient::HeartbeatLoop(std::function<MemberStatus()> status_fn) {
  // The first at once: a member started mid-job (a joining server) hears
  // the news without waiting an interval.
  for (bool first = true;; first = false) {
    if (!first) {
      absl::MutexLock lock(&mu_);
      auto wake = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || beat_now_; };
      // Sooner while the scheduler asks (a move or a rollback under way).
      const absl::Duration wait = next_beat_ > absl::ZeroDuration()
                                      ? std::min(next_beat_, options_.heartbeat_interval)
                                      : options_.heartbeat_interval;
      mu_.AwaitWithTimeout(absl::Condition(&wake), wait);
      beat_now_ = false;
      if (stopping_ || Ended(job_state_)) return;
    }
    const absl::StatusOr<HeartbeatResponse> resp = Heartbeat(status_fn());
    if (resp.ok()) continue;
    // Another process registered in this one's place (or the scheduler
    // forgot it): nothing this one does counts any more.
    if (absl::IsFailedPrecondition(resp.status()) || absl::IsNotFound(resp.status())) {
      absl::MutexLock lock(&mu_);
      job_state_ = ABORTED;
      job_message_ =
          absl::StrCat("the scheduler no longer knows this process: ", resp.status().message());
      return;
    }
    absl::MutexLock lock(&mu_);
    if (absl::Now() - last_heard_ > options_.scheduler_timeout) {
      job_state_ = ABORTED;
      lost_scheduler_ = true;
      job_message_ =
          absl::StrCat("lost the scheduler at ", options_.scheduler, ": ", resp.status().message());
      return;
    }
  }
}

JobState SchedulerClient::WaitForJobEnd(std::string* message) {
  absl::MutexLock lock(&mu_);
  auto ended = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return Ended(job_state_); };
  mu_.Await(absl::Condition(&ended));
  if (message != nullptr) *message = job_message_;
  return job_state_;
}

std::string SchedulerClient::leave() const {
  absl::MutexLock lock(&mu_);
  return leave_;
}

int64_t SchedulerClient::link_generation() const {
  absl::MutexLock lock(&mu_);
  return link_generation_;
}

int64_t SchedulerClient::generation(int64_t* restore_clock) const {
  absl::MutexLock lock(&mu_);
  if (restore_clock != nullptr) *restore_clock = restore_clock_;
  return generation_;
}

int64_t SchedulerClient::manifest_clock() const {
  absl::MutexLock lock(&mu_);
  return manifest_clock_;
}

std::vector<int> SchedulerClient::dead_workers() const {
  absl::MutexLock lock(&mu_);
  return dead_workers_;
}

JobState SchedulerClient::job_state(std::string* message) const {
  absl::MutexLock lock(&mu_);
  if (message != nullptr) *message = job_message_;
  return job_state_;
}

absl::StatusOr<AdvanceClockResponse> SchedulerClient::AdvanceClock(int worker, int64_t clock,
                                                                   int64_t generation) {
  AdvanceClockRequest req;
  req.set_worker_id(worker);
  req.set_clock(clock);
  req.set_generation(generation);
  return AdvanceClock(std::move(req));
}

absl::StatusOr<AdvanceClockResponse> SchedulerClient::AdvanceClock(AdvanceClockRequest req) {
  req.set_incarnation(incarnation_);
  const int64_t clock = req.clock();
  const absl::Time start = absl::Now();
  const RetryPolicy policy = WaitingCallPolicy([&] {
    spdlog::info("waiting at the gate for clock {} ({:.0f} s so far)", clock,
                 absl::ToDoubleSeconds(absl::Now() - start));
  });
  return Retry<AdvanceClockResponse>(policy, [&]() -> absl::StatusOr<AdvanceClockResponse> {
    std::string message;
    if (job_state(&message) == ABORTED) {
      return absl::AbortedError(absl::StrCat("job aborted: ", message));
    }
    AdvanceClockResponse resp;
    auto ctx = ContextWithTimeout(absl::Seconds(10));
    RETURN_IF_ERROR(FromScheduler(stub_->AdvanceClock(ctx.get(), req, &resp)));
    return resp;
  });
}

absl::StatusOr<double> SchedulerClient::ReduceNorm(int server, int64_t generation, int64_t clock,
                                                   double sum_squares) {
  ReduceNormRequest req;
  req.set_server_id(server);
  req.set_generation(generation);
  req.set_clock(clock);
  req.set_sum_squares(sum_squares);
  req.set_incarnation(incarnation_);
  const absl::Time start = absl::Now();
  const RetryPolicy policy = WaitingCallPolicy([&] {
    spdlog::info("waiting for the other servers' norms of round {} ({:.0f} s so far)", clock,
                 absl::ToDoubleSeconds(absl::Now() - start));
  });
  return Retry<double>(policy, [&]() -> absl::StatusOr<double> {
    std::string message;
    const JobState state = job_state(&message);
    if (state == ABORTED || state == DONE) {
      return absl::AbortedError(absl::StrCat("job ended: ", message));
    }
    ReduceNormResponse resp;
    auto ctx = ContextWithTimeout(absl::Seconds(10));
    RETURN_IF_ERROR(FromScheduler(stub_->ReduceNorm(ctx.get(), req, &resp)));
    return resp.sum_squares();
  });
}

RetryPolicy SchedulerClient::WaitingCallPolicy(std::function<void()> still_waiting) const {
  // A call the scheduler holds (the gate, a norm round) ends with
  // DEADLINE_EXCEEDED while it still waits: ask again at once. An
  // unreachable scheduler, or one that ended the call as it went away, is
  // retried for the members' window (a scheduler taking the job over
  // answers).
  RetryPolicy policy;
  policy.window = options_.scheduler_timeout;
  policy.classify = [](const absl::Status& st) {
    if (absl::IsDeadlineExceeded(st)) return RetryAction::kRetryNow;
    return IsTransient(st) ? RetryAction::kRetry : RetryAction::kStop;
  };
  policy.on_retry = [still_waiting = std::move(still_waiting)](const absl::Status& st, int) {
    if (absl::IsDeadlineExceeded(st)) still_waiting();
  };
  // Heartbeats may learn of the job's end while this call backs off.
  policy.abandon = [this]() -> absl::Status {
    std::string message;
    if (job_state(&message) != ABORTED) return absl::OkStatus();
    return absl::AbortedError(absl::StrCat("job aborted: ", message));
  };
  return policy;
}

}  // namespace pstrain
