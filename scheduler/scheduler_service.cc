#include "scheduler/scheduler_service.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/params.h"
#include "common/partition.h"
#include "common/process_stats.h"
#include "common/security.h"
#include "common/rpc.h"

namespace pstrain {

namespace {

// Which servers hold chunks (and so report norms under BSP clipping).
std::vector<bool> ServersWithChunks(const JobSpec& job) {
  std::vector<bool> out(job.num_servers(), false);
  absl::StatusOr<Partition> p =
      Partition::Make(ModelParams(job.model()), job.chunk_bytes(), job.num_servers());
  if (!p.ok()) return out;  // a valid job always partitions
  for (int s = 0; s < job.num_servers(); ++s) out[s] = !p->ServerChunks(s).empty();
  return out;
}

}  // namespace

SchedulerService::SchedulerService(const JobSpec& job, TraceWriter* trace,
                                   bool shrink_on_worker_failure)
    : job_(job),
      shrink_(shrink_on_worker_failure),
      total_clocks_(TotalClocks(job)),
      start_(absl::Now()),
      trace_(trace),
      members_(job.num_servers(), job.num_workers()),
      clocks_(job.num_workers(), EffectiveStaleness(job)),
      norms_(ServersWithChunks(job), TotalClocks(job)) {}

void SchedulerService::SetAddress(const std::string& address) {
  absl::MutexLock lock(&mu_);
  address_ = address;
}

void SchedulerService::Abort(const std::string& message) {
  absl::MutexLock lock(&mu_);
  EndJob(ABORTED, message);
}

JobState SchedulerService::job_state(std::string* message) const {
  absl::MutexLock lock(&mu_);
  if (message != nullptr) *message = message_;
  return state_;
}

bool SchedulerService::MembersToldOfEnd(absl::Duration grace) const {
  absl::MutexLock lock(&mu_);
  if (state_ != DONE && state_ != ABORTED) return false;
  if (absl::Now() - ended_at_ > grace) return true;
  for (const auto* list : {&members_.servers(), &members_.workers()}) {
    for (const MemberRecord& m : *list) {
      const bool gone = m.status.state() == FINISHED || m.status.state() == FAILED ||
                        m.status.state() == DEAD;
      if (!m.saw_job_end && !gone) return false;
    }
  }
  return true;
}

void SchedulerService::CheckLiveness(absl::Time now, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  if (state_ == DONE || state_ == ABORTED) return;
  for (std::vector<MemberRecord>* list : {&members_.servers(), &members_.workers()}) {
    for (MemberRecord& m : *list) {
      const MemberState st = m.status.state();
      if (st == FINISHED || st == FAILED || st == DEAD) continue;
      const absl::Duration silent = now - m.last_seen;
      if (silent <= timeout) continue;
      const std::string why = absl::StrCat(
          "no heartbeat for ", absl::FormatDuration(absl::Trunc(silent, absl::Milliseconds(100))),
          " (--heartbeat_timeout_ms=", absl::ToInt64Milliseconds(timeout), ")");
      m.status.set_state(DEAD);
      m.status.set_message(why);
      m.status.set_declared_dead_unix_ms(absl::ToUnixMillis(now));
      spdlog::error("{} {} at {} declared dead: {}", RoleName(m.role), m.id, m.address, why);
      int live = 0;
      for (const MemberRecord& w : members_.workers()) live += w.status.state() != DEAD;
      if (m.role == WORKER && shrink_ && state_ == RUNNING_JOB && live > 0) {
        clocks_.Remove(m.id);
        dead_workers_.push_back(m.id);
        spdlog::warn("going on with {} workers", live);
        WakeGates();
        MaybeDone();
        continue;
      }
      EndJob(ABORTED, absl::StrCat(RoleName(m.role), " ", m.id, " at ", m.address,
                                   " declared dead: ", why));
    }
  }
}

void SchedulerService::MaybeDone() {
  if (!members_.Complete()) return;
  bool all = true;
  for (const MemberRecord& w : members_.workers()) {
    all = all && (w.status.state() == FINISHED || w.status.state() == DEAD);
  }
  if (all) EndJob(DONE, "");
}

void SchedulerService::EndJob(JobState state, const std::string& message) {
  if (state_ == DONE || state_ == ABORTED) return;
  state_ = state;
  message_ = message;
  ended_at_ = absl::Now();
  if (state == DONE) {
    spdlog::info("job done: every worker finished {} clocks", total_clocks_);
  } else {
    spdlog::error("job aborted: {}", message);
  }
  WakeGates();
  WakeNorms();
}

void SchedulerService::Trace(const char* event, int worker, int64_t clock) {
  if (trace_ == nullptr || !trace_->enabled()) return;
  TraceEvent e;
  e.set_event(event);
  e.set_worker(worker);
  e.set_clock(clock);
  trace_->Write(e);
}

grpc::ServerUnaryReactor* SchedulerService::Register(grpc::CallbackServerContext* ctx,
                                                     const RegisterRequest* req,
                                                     RegisterResponse* resp) {
  if (const grpc::Status auth = Authenticate(*ctx); !auth.ok()) return FinishNow(ctx, auth);
  absl::MutexLock lock(&mu_);
  if (state_ == DONE || state_ == ABORTED) {
    return FinishNow(
        ctx, grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "the job has already ended"));
  }
  const absl::StatusOr<int> id =
      members_.Register(req->role(), req->address(), req->incarnation(), absl::Now());
  if (!id.ok()) {
    spdlog::warn("refused registration from {}: {}", req->address(), id.status().message());
    return FinishNow(ctx, ToGrpc(id.status()));
  }
  resp->set_id(*id);
  *resp->mutable_job() = job_;
  spdlog::info("{} {} registered from {}", RoleName(req->role()), *id, req->address());
  if (state_ == WAITING && members_.Complete()) {
    state_ = RUNNING_JOB;
    spdlog::info("all {} servers and {} workers registered; training {} clocks", job_.num_servers(),
                 job_.num_workers(), total_clocks_);
    WakeGates();
  }
  return FinishNow(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* SchedulerService::Heartbeat(grpc::CallbackServerContext* ctx,
                                                      const HeartbeatRequest* req,
                                                      HeartbeatResponse* resp) {
  if (const grpc::Status auth = Authenticate(*ctx); !auth.ok()) return FinishNow(ctx, auth);
  absl::MutexLock lock(&mu_);
  const NodeStatus& st = req->status();
  absl::StatusOr<MemberRecord*> m = members_.Find(st.role(), st.id(), req->incarnation());
  if (!m.ok()) return FinishNow(ctx, ToGrpc(m.status()));
  MemberRecord& member = **m;
  // A member's last state sticks: a heartbeat overtaken by its final report
  // must not bring it back to RUNNING.
  const MemberState before = member.status.state();
  const bool terminal = before == FINISHED || before == FAILED || before == DEAD;
  member.status = st;
  if (terminal) member.status.set_state(before);
  member.status.set_address(member.address);  // as registered, not as claimed
  member.last_seen = absl::Now();
  if (member.status.state() == FAILED) {
    EndJob(ABORTED, absl::StrCat(RoleName(st.role()), " ", st.id(), " failed: ", st.message()));
  } else if (st.role() == WORKER && member.status.state() == FINISHED) {
    MaybeDone();
  }
  resp->set_job_state(state_);
  resp->set_message(message_);
  for (int32_t w : dead_workers_) resp->add_dead_workers(w);
  if (state_ == DONE || state_ == ABORTED) member.saw_job_end = true;
  return FinishNow(ctx, grpc::Status::OK);
}

bool SchedulerService::GateOpen(int64_t clock) const {
  return state_ == RUNNING_JOB && clocks_.MayStart(clock);
}

void SchedulerService::FillGate(int worker, int64_t clock, AdvanceClockResponse* resp) {
  resp->set_min_clock(clocks_.MinClock());
  *resp->mutable_cluster() = members_.View();
  resp->set_job_state(state_);
  for (int w = 0; w < clocks_.num_workers(); ++w) {
    if (!clocks_.removed(w)) resp->add_live_workers(w);
  }
  if (clock < total_clocks_) Trace("start", worker, clock);
}

grpc::ServerUnaryReactor* SchedulerService::AdvanceClock(grpc::CallbackServerContext* ctx,
                                                         const AdvanceClockRequest* req,
                                                         AdvanceClockResponse* resp) {
  if (const grpc::Status auth = Authenticate(*ctx); !auth.ok()) return FinishNow(ctx, auth);
  absl::MutexLock lock(&mu_);
  absl::StatusOr<MemberRecord*> m = members_.Find(WORKER, req->worker_id(), req->incarnation());
  if (!m.ok()) return FinishNow(ctx, ToGrpc(m.status()));
  if ((*m)->status.state() == DEAD) {
    return FinishNow(ctx, grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                       absl::StrCat("worker ", req->worker_id(),
                                                    " was declared dead: ", (*m)->status.message())));
  }
  if (req->clock() < 0 || req->clock() > total_clocks_) {
    return FinishNow(ctx, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                       absl::StrCat("clock ", req->clock(), " outside [0, ",
                                                    total_clocks_, "]")));
  }
  const int64_t before = clocks_.clock(req->worker_id());
  const absl::Status st = clocks_.Advance(req->worker_id(), req->clock());
  if (!st.ok()) return FinishNow(ctx, ToGrpc(st));
  if (req->clock() != before) {
    Trace("clock", req->worker_id(), req->clock());
    (*m)->status.set_clock(req->clock());
    if ((*m)->status.state() == REGISTERED) (*m)->status.set_state(RUNNING);
    WakeGates();
  }
  if (state_ == ABORTED) {
    return FinishNow(
        ctx, grpc::Status(grpc::StatusCode::ABORTED, absl::StrCat("job aborted: ", message_)));
  }
  // A worker that finished every clock need not wait for anyone.
  if (req->clock() >= total_clocks_ || GateOpen(req->clock())) {
    FillGate(req->worker_id(), req->clock(), resp);
    return FinishNow(ctx, grpc::Status::OK);
  }
  auto* reactor = new ParkedReactor();
  parked_.emplace_back(reactor, PendingGate{req->worker_id(), req->clock(), resp, absl::Now()});
  return reactor;
}

void SchedulerService::WakeGates() {
  for (auto it = parked_.begin(); it != parked_.end();) {
    if (it->Gone()) {
      it = parked_.erase(it);
      continue;
    }
    const PendingGate& g = it->what;
    if (state_ == ABORTED || state_ == DONE) {
      if (it->Claim()) {
        it->reactor->Finish(
            grpc::Status(grpc::StatusCode::ABORTED, absl::StrCat("job ended: ", message_)));
      }
      it = parked_.erase(it);
    } else if (GateOpen(g.clock) && it->Claim()) {
      FillGate(g.worker, g.clock, g.response);
      it->reactor->Finish(grpc::Status::OK);
      it = parked_.erase(it);
    } else {
      ++it;
    }
  }
}

grpc::ServerUnaryReactor* SchedulerService::ReduceNorm(grpc::CallbackServerContext* ctx,
                                                       const ReduceNormRequest* req,
                                                       ReduceNormResponse* resp) {
  if (const grpc::Status auth = Authenticate(*ctx); !auth.ok()) return FinishNow(ctx, auth);
  absl::MutexLock lock(&mu_);
  absl::StatusOr<MemberRecord*> m = members_.Find(SERVER, req->server_id(), req->incarnation());
  if (!m.ok()) return FinishNow(ctx, ToGrpc(m.status()));
  if (state_ == ABORTED || state_ == DONE) {
    return FinishNow(
        ctx, grpc::Status(grpc::StatusCode::ABORTED, absl::StrCat("job ended: ", message_)));
  }
  const absl::Status st = norms_.Add(req->server_id(), req->clock(), req->sum_squares());
  if (!st.ok()) return FinishNow(ctx, ToGrpc(st));
  if (std::optional<double> total = norms_.Total(req->clock())) {
    resp->set_sum_squares(*total);
    WakeNorms();
    return FinishNow(ctx, grpc::Status::OK);
  }
  auto* reactor = new ParkedReactor();
  parked_norms_.emplace_back(reactor, PendingNorm{req->clock(), resp});
  return reactor;
}

void SchedulerService::WakeNorms() {
  for (auto it = parked_norms_.begin(); it != parked_norms_.end();) {
    if (it->Gone()) {
      it = parked_norms_.erase(it);
      continue;
    }
    std::optional<double> total = norms_.Total(it->what.clock);
    if (state_ == ABORTED || state_ == DONE) {
      if (it->Claim()) {
        it->reactor->Finish(
            grpc::Status(grpc::StatusCode::ABORTED, absl::StrCat("job ended: ", message_)));
      }
      it = parked_norms_.erase(it);
    } else if (total.has_value() && it->Claim()) {
      it->what.response->set_sum_squares(*total);
      it->reactor->Finish(grpc::Status::OK);
      it = parked_norms_.erase(it);
    } else {
      ++it;
    }
  }
}

ClusterStatus SchedulerService::GetStatus() const {
  absl::MutexLock lock(&mu_);
  ClusterStatus out;
  out.set_job_state(state_);
  out.set_message(message_);
  out.set_consistency(job_.consistency());
  out.set_staleness(job_.staleness());
  out.set_total_clocks(total_clocks_);
  NodeStatus* me = out.mutable_scheduler();
  me->set_role(SCHEDULER);
  me->set_address(address_);
  me->set_state(state_ == DONE ? FINISHED : state_ == ABORTED ? FAILED : RUNNING);
  me->set_uptime_s(absl::ToDoubleSeconds(absl::Now() - start_));
  me->set_clock(clocks_.MinClock());
  me->set_rss_bytes(ResidentBytes());
  me->set_test_accuracy(-1);
  for (const Parked<PendingGate>& p : parked_) {
    if (p.Gone()) continue;
    Wait* w = me->add_waits();
    w->set_what(absl::StrCat("worker ", p.what.worker, " at the gate of clock ", p.what.clock,
                             " (the slowest worker has finished ", clocks_.MinClock(),
                             " clocks)"));
    w->set_since_unix_ms(absl::ToUnixMillis(p.what.since));
  }
  for (const auto* list : {&members_.servers(), &members_.workers()}) {
    for (const MemberRecord& m : *list) *out.add_members() = m.status;
  }
  return out;
}

grpc::ServerUnaryReactor* SchedulerService::Status(grpc::CallbackServerContext* ctx,
                                                   const StatusRequest* /*req*/,
                                                   ClusterStatus* resp) {
  if (const grpc::Status auth = Authenticate(*ctx); !auth.ok()) return FinishNow(ctx, auth);
  *resp = GetStatus();
  return FinishNow(ctx, grpc::Status::OK);
}

}  // namespace pstrain
