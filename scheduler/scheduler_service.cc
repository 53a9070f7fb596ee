#include "scheduler/scheduler_service.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/params.h"
#include "common/partition.h"
#include "common/process_stats.h"
#include "common/rpc.h"
#include "common/security.h"
#include "scheduler/manifest.h"

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

SchedulerService::SchedulerService(const JobSpec& job, TraceWriter* trace, SchedulerPolicy policy)
    : job_(job),
      policy_(policy),
      total_clocks_(TotalClocks(job)),
      start_(absl::Now()),
      trace_(trace),
      members_(job.num_servers(), job.num_workers()),
      clocks_(job.num_workers(), EffectiveStaleness(job)),
      norms_(ServersWithChunks(job), TotalClocks(job)) {
  const std::vector<bool> with_chunks = ServersWithChunks(job);
  for (int s = 0; s < static_cast<int>(with_chunks.size()); ++s) {
    if (with_chunks[s]) chunk_servers_.push_back(s);
  }
  absl::MutexLock lock(&mu_);
  clocks_.Reset(policy.start_clock);
  norms_.Reset(policy.start_clock);
  restore_clock_ = manifest_clock_ = policy.start_clock;
}

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
      const bool gone =
          m.status.state() == FINISHED || m.status.state() == FAILED || m.status.state() == DEAD;
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
      if (m.role == SERVER && state_ == RUNNING_JOB && job_.checkpoint_every() > 0) {
        BeginRollback(absl::StrCat("server ", m.id, " at ", m.address, " declared dead: ", why));
        continue;
      }
      if (m.role == WORKER && state_ == RUNNING_JOB && KeepsPlace(WORKER)) {
        spdlog::warn("waiting for worker {} to come back or be replaced (ps_worker --rank={})",
                     m.id, m.id);
        continue;
      }
      int live = 0;
      for (const MemberRecord& w : members_.workers()) live += w.status.state() != DEAD;
      if (m.role == WORKER && policy_.on_worker_failure == WorkerFailure::kShrink &&
          state_ == RUNNING_JOB && live > 0) {
        clocks_.Remove(m.id);
        dead_workers_.push_back(m.id);
        spdlog::warn("going on with {} workers", live);
        WakeGates();
        MaybeDone();
        continue;
      }
      EndJob(ABORTED,
             absl::StrCat(RoleName(m.role), " ", m.id, " at ", m.address, " declared dead: ", why));
    }
  }
  // A dead member whose place was kept, neither back nor replaced in time.
  for (const auto* list : {&members_.servers(), &members_.workers()}) {
    for (const MemberRecord& m : *list) {
      if (state_ != RUNNING_JOB || m.status.state() != DEAD || !KeepsPlace(m.role)) continue;
      const absl::Time dead_since = absl::FromUnixMillis(m.status.declared_dead_unix_ms());
      if (now - dead_since > policy_.replacement_timeout) {
        EndJob(ABORTED,
               absl::StrCat(RoleName(m.role), " ", m.id,
                            " died and neither came back nor was replaced within ",
                            absl::FormatDuration(policy_.replacement_timeout),
                            " (start one with ps_", RoleName(m.role), " --rank=", m.id, ")"));
      }
    }
  }
}

bool SchedulerService::KeepsPlace(Role role) const {
  return role == SERVER ? job_.checkpoint_every() > 0
                        : policy_.on_worker_failure == WorkerFailure::kWait;
}

void SchedulerService::Revive(MemberRecord& m) {
  spdlog::warn("{} {} at {} is back after it was declared dead; it rejoins", RoleName(m.role), m.id,
               m.address);
  m.status.set_state(RUNNING);
  m.status.set_message("came back after it was declared dead");
  m.last_seen = absl::Now();
  WakeGates();
}

void SchedulerService::BeginRollback(const std::string& reason) {
  ++generation_;
  rolling_back_ = true;
  int64_t from = 0;
  for (int w = 0; w < clocks_.num_workers(); ++w) {
    if (clocks_.removed(w)) continue;
    from = std::max(from, clocks_.clock(w));
    // A worker that already finished and left cannot go back: the others
    // go on without it.
    if (members_.workers()[w].status.state() == FINISHED) {
      clocks_.Remove(w);
      dead_workers_.push_back(w);
    }
  }
  const int64_t to = job_.checkpoint_every() > 0
                         ? std::max(manifest_clock_,
                                    NewestCompleteSet(job_.checkpoint_dir(), chunk_servers_, from))
                         : 0;
  clocks_.Reset(to);
  norms_.Reset(to);
  restore_clock_ = to;
  Rollback r;
  r.set_generation(generation_);
  r.set_reason(reason);
  r.set_from_clock(from);
  r.set_to_clock(to);
  r.set_begun_unix_ms(absl::ToUnixMillis(absl::Now()));
  rollbacks_.push_back(r);
  spdlog::warn(
      "generation {}: {}; rolling the cluster back from clock {} to the checkpoint of clock {}",
      generation_, reason, from, to);
  if (to == 0 && from >= job_.checkpoint_every() && job_.checkpoint_every() > 0) {
    spdlog::warn(
        "no complete checkpoint set in {} (is it shared with the scheduler?): back to "
        "the initial weights",
        job_.checkpoint_dir());
  }
  // Rounds of the old generation never complete.
  for (Parked<PendingNorm>& p : parked_norms_) {
    if (p.Claim()) {
      p.reactor->Finish(
          grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                       absl::StrCat("the cluster rolled back (generation ", generation_, ")")));
    }
  }
  parked_norms_.clear();
}

void SchedulerService::MaybeEndRollback() {
  if (!rolling_back_ || state_ != RUNNING_JOB) return;
  for (const MemberRecord& m : members_.servers()) {
    if (m.status.state() == DEAD || m.status.generation() != generation_) return;
  }
  rolling_back_ = false;
  rollbacks_.back().set_done_unix_ms(absl::ToUnixMillis(absl::Now()));
  spdlog::warn("generation {}: every server restored the checkpoint of clock {}; training resumes",
               generation_, restore_clock_);
  WakeGates();
}

void SchedulerService::MaybeWriteManifest() {
  if (job_.checkpoint_every() <= 0 || rolling_back_ || chunk_servers_.empty()) return;
  int64_t complete = INT64_MAX;
  for (int s : chunk_servers_) {
    if (s >= static_cast<int>(members_.servers().size())) return;
    const NodeStatus& st = members_.servers()[s].status;
    if (st.generation() != generation_) return;
    complete = std::min(complete, st.checkpoint_clock());
  }
  if (complete <= manifest_clock_) return;
  const absl::Status st =
      WriteManifest(job_.checkpoint_dir(), complete, job_.num_servers(), chunk_servers_);
  if (!st.ok()) {
    if (!manifest_error_logged_) spdlog::error("cannot write the manifest: {}", st.message());
    manifest_error_logged_ = true;
    return;
  }
  manifest_clock_ = complete;
}

grpc::Status SchedulerService::ReplaceMember(Role role, int id, const RegisterRequest& req) {
  MemberRecord& old = (role == SERVER ? members_.servers() : members_.workers())[id];
  if (old.incarnation == req.incarnation() && old.address == req.address()) {
    return grpc::Status::OK;  // a retry
  }
  if (role == WORKER && state_ == RUNNING_JOB && !KeepsPlace(WORKER)) {
    return grpc::Status(
        grpc::StatusCode::FAILED_PRECONDITION,
        absl::StrCat("worker ", id, " cannot be replaced: the job ",
                     policy_.on_worker_failure == WorkerFailure::kShrink
                         ? "goes on without a dead worker"
                         : "ends when a worker dies",
                     " (the scheduler's --on_worker_failure=wait keeps its place)"));
  }
  if (role == WORKER && old.status.state() == FINISHED) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        absl::StrCat("worker ", id, " has finished"));
  }
  const bool was_dead = old.status.state() == DEAD;
  const std::string old_address = old.address;
  const absl::Status st = members_.Replace(role, id, req.address(), req.incarnation(), absl::Now());
  if (!st.ok()) return ToGrpc(st);
  spdlog::warn("{} {} at {} replaced by a new process at {}", RoleName(role), id, old_address,
               req.address());
  // A worker's replacement takes over at its clock: nothing else changes.
  // A server that died has started its rollback already.
  if (role == SERVER && state_ == RUNNING_JOB && !was_dead) {
    if (job_.checkpoint_every() <= 0) {
      EndJob(ABORTED, absl::StrCat("server ", id,
                                   " was replaced and the job writes no "
                                   "checkpoints (checkpoint_every) to restore it from"));
    } else {
      BeginRollback(
          absl::StrCat("server ", id, " at ", old_address, " replaced by ", req.address()));
    }
  }
  return grpc::Status::OK;
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
  // A member in place of a registered one: the one named by --rank, else
  // a dead one once every id is taken.
  int slot = -1;
  const bool server = req->role() == SERVER;
  const std::vector<MemberRecord>& list = server ? members_.servers() : members_.workers();
  const int expected = server ? job_.num_servers() : job_.num_workers();
  const int registered = static_cast<int>(list.size());
  if (req->has_rank()) {
    if (req->role() != SERVER && req->role() != WORKER) {
      return FinishNow(ctx, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "bad role"));
    }
    if (req->rank() < 0 || req->rank() >= expected) {
      return FinishNow(
          ctx, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            absl::StrCat("rank ", req->rank(), " outside [0, ", expected, ")")));
    }
    if (req->rank() > registered) {
      return FinishNow(ctx, grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                         absl::StrCat(RoleName(req->role()),
                                                      " ids are handed out in order: ", registered,
                                                      " is next, not ", req->rank())));
    }
    if (req->rank() < registered) slot = req->rank();
  } else if ((server || req->role() == WORKER) && registered == expected) {
    for (const MemberRecord& m : list) {
      if (m.status.state() == DEAD && (server || !clocks_.removed(m.id))) {
        slot = m.id;
        break;
      }
    }
  }
  absl::StatusOr<int> id = slot;
  if (slot >= 0) {
    const grpc::Status st = ReplaceMember(req->role(), slot, *req);
    if (!st.ok()) {
      spdlog::warn("refused registration from {}: {}", req->address(), st.error_message());
      return FinishNow(ctx, st);
    }
  } else {
    id = members_.Register(req->role(), req->address(), req->incarnation(), absl::Now());
  }
  if (!id.ok()) {
    spdlog::warn("refused registration from {}: {}", req->address(), id.status().message());
    return FinishNow(ctx, ToGrpc(id.status()));
  }
  resp->set_id(*id);
  *resp->mutable_job() = job_;
  resp->set_generation(generation_);
  // A worker starts at its clock in the table: the job's start, or a dead
  // worker's clock for its replacement.
  resp->set_start_clock(req->role() == WORKER ? clocks_.clock(*id) : restore_clock_);
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
  if (member.status.state() == DEAD && state_ == RUNNING_JOB && KeepsPlace(member.role) &&
      !(member.role == WORKER && clocks_.removed(member.id))) {
    Revive(member);
  }
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
  } else if (st.role() == SERVER) {
    MaybeEndRollback();
    MaybeWriteManifest();
  }
  resp->set_job_state(state_);
  resp->set_message(message_);
  for (int32_t w : dead_workers_) resp->add_dead_workers(w);
  resp->set_generation(generation_);
  resp->set_restore_clock(restore_clock_);
  resp->set_manifest_clock(manifest_clock_);
  if (state_ == DONE || state_ == ABORTED) member.saw_job_end = true;
  return FinishNow(ctx, grpc::Status::OK);
}

grpc::Status SchedulerService::RoomToPark(int worker) const {
  int parked = 0;
  for (const Parked<PendingGate>& p : parked_) parked += !p.Gone() && p.what.worker == worker;
  if (parked < kMaxParkedPerMember) return grpc::Status::OK;
  return grpc::Status(
      grpc::StatusCode::RESOURCE_EXHAUSTED,
      absl::StrCat("worker ", worker, " already has ", parked, " gate calls waiting"));
}

bool SchedulerService::GateOpen(int64_t clock) const {
  return state_ == RUNNING_JOB && !rolling_back_ && clocks_.MayStart(clock);
}

void SchedulerService::FillGate(int worker, int64_t clock, AdvanceClockResponse* resp) {
  resp->set_slowest_clock(clocks_.SlowestClock());
  *resp->mutable_cluster() = members_.View();
  resp->set_job_state(state_);
  for (int w = 0; w < clocks_.num_workers(); ++w) {
    if (!clocks_.removed(w)) resp->add_live_workers(w);
  }
  resp->set_generation(generation_);
  resp->set_resume_clock(clocks_.clock(worker));
  if (clock < total_clocks_) Trace("start", worker, clock);
}

grpc::ServerUnaryReactor* SchedulerService::AdvanceClock(grpc::CallbackServerContext* ctx,
                                                         const AdvanceClockRequest* req,
                                                         AdvanceClockResponse* resp) {
  if (const grpc::Status auth = Authenticate(*ctx); !auth.ok()) return FinishNow(ctx, auth);
  absl::MutexLock lock(&mu_);
  absl::StatusOr<MemberRecord*> m = members_.Find(WORKER, req->worker_id(), req->incarnation());
  if (!m.ok()) return FinishNow(ctx, ToGrpc(m.status()));
  if ((*m)->status.state() == DEAD && state_ == RUNNING_JOB && KeepsPlace(WORKER)) Revive(**m);
  if ((*m)->status.state() == DEAD) {
    return FinishNow(ctx,
                     grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                  absl::StrCat("worker ", req->worker_id(),
                                               " was declared dead: ", (*m)->status.message())));
  }
  if (req->clock() < 0 || req->clock() > total_clocks_) {
    return FinishNow(ctx, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                       absl::StrCat("clock ", req->clock(), " outside [0, ",
                                                    total_clocks_, "]")));
  }
  if (req->generation() < 0 || req->generation() > generation_) {
    return FinishNow(ctx, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                       absl::StrCat("generation ", req->generation(),
                                                    " outside [0, ", generation_, "]")));
  }
  if (req->generation() < generation_) {
    // The cluster rolled back since this worker's generation: its clock is the
    // table's now. Told so once the servers have restored.
    if (state_ == ABORTED) {
      return FinishNow(
          ctx, grpc::Status(grpc::StatusCode::ABORTED, absl::StrCat("job aborted: ", message_)));
    }
    if (!rolling_back_) {
      FillGate(req->worker_id(), clocks_.clock(req->worker_id()), resp);
      return FinishNow(ctx, grpc::Status::OK);
    }
    if (const grpc::Status full = RoomToPark(req->worker_id()); !full.ok()) {
      return FinishNow(ctx, full);
    }
    auto* reactor = new ParkedReactor();
    parked_.emplace_back(
        reactor, PendingGate{req->worker_id(), req->clock(), resp, absl::Now(), /*stale=*/true});
    return reactor;
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
  if (const grpc::Status full = RoomToPark(req->worker_id()); !full.ok()) {
    return FinishNow(ctx, full);
  }
  auto* reactor = new ParkedReactor();
  parked_.emplace_back(reactor,
                       PendingGate{req->worker_id(), req->clock(), resp, absl::Now(), false});
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
    } else if (g.stale && !rolling_back_ && it->Claim()) {
      FillGate(g.worker, clocks_.clock(g.worker), g.response);
      it->reactor->Finish(grpc::Status::OK);
      it = parked_.erase(it);
    } else if (!g.stale && GateOpen(g.clock) && it->Claim()) {
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
  if (req->generation() != generation_ || rolling_back_) {
    return FinishNow(ctx, grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                       absl::StrCat("a norm of generation ", req->generation(),
                                                    "; the cluster is in generation ", generation_,
                                                    rolling_back_ ? ", restoring" : "")));
  }
  const absl::Status st = norms_.Add(req->server_id(), req->clock(), req->sum_squares());
  if (!st.ok()) return FinishNow(ctx, ToGrpc(st));
  if (std::optional<double> total = norms_.Total(req->clock())) {
    resp->set_sum_squares(*total);
    WakeNorms();
    return FinishNow(ctx, grpc::Status::OK);
  }
  int parked_by_server = 0;
  for (const Parked<PendingNorm>& p : parked_norms_) {
    parked_by_server += !p.Gone() && p.what.server == req->server_id();
  }
  if (parked_by_server >= kMaxParkedPerMember) {
    return FinishNow(ctx, grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                       absl::StrCat("server ", req->server_id(), " already has ",
                                                    parked_by_server, " norm calls waiting")));
  }
  auto* reactor = new ParkedReactor();
  parked_norms_.emplace_back(reactor,
                             PendingNorm{req->clock(), resp, req->server_id(), absl::Now()});
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
  me->set_clock(clocks_.SlowestClock());
  me->set_rss_bytes(ResidentBytes());
  me->set_test_accuracy(-1);
  out.set_generation(generation_);
  for (const Rollback& r : rollbacks_) *out.add_rollbacks() = r;
  if (rolling_back_) {
    std::vector<std::string> pending;
    for (const MemberRecord& m : members_.servers()) {
      if (m.status.state() == DEAD) {
        pending.push_back(
            absl::StrCat("a replacement of server ", m.id, " (ps_server --rank=", m.id, ")"));
      } else if (m.status.generation() != generation_) {
        pending.push_back(absl::StrCat("server ", m.id, " to restore it"));
      }
    }
    Wait* w = me->add_waits();
    w->set_what(absl::StrCat("rolling back to the checkpoint of clock ", restore_clock_,
                             " (generation ", generation_, "): waiting for ",
                             absl::StrJoin(pending, ", ")));
    w->set_since_unix_ms(rollbacks_.back().begun_unix_ms());
  }
  for (const Parked<PendingNorm>& p : parked_norms_) {
    if (p.Gone()) continue;
    Wait* w = me->add_waits();
    w->set_what(absl::StrCat("server ", p.what.server, "'s norm of BSP round ", p.what.clock,
                             ", waiting for the other servers' norms"));
    w->set_since_unix_ms(absl::ToUnixMillis(p.what.since));
  }
  for (const Parked<PendingGate>& p : parked_) {
    if (p.Gone()) continue;
    Wait* w = me->add_waits();
    w->set_what(absl::StrCat("worker ", p.what.worker, " at the gate of clock ", p.what.clock,
                             " (the slowest worker has finished ", clocks_.SlowestClock(),
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
