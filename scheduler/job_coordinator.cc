#include "scheduler/job_coordinator.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/params.h"
#include "common/partition.h"
#include "common/stage_plan.h"
#include "common/status_macros.h"
#include "scheduler/durable_key.h"

namespace pstrain {

namespace {

// Which servers hold chunks (and so write checkpoints and report norms).
std::vector<bool> ServersWithChunks(const JobSpec& job) {
  std::vector<bool> out(job.num_servers(), false);
  absl::StatusOr<Partition> p =
      Partition::Make(ModelParams(job.model()), job.chunk_bytes(), job.num_servers());
  if (!p.ok()) return out;  // a valid job always partitions
  for (int s = 0; s < job.num_servers(); ++s) out[s] = !p->ServerChunks(s).empty();
  return out;
}

std::vector<int> ChunkServers(const JobSpec& job) {
  std::vector<int> out;
  const std::vector<bool> with_chunks = ServersWithChunks(job);
  for (int s = 0; s < static_cast<int>(with_chunks.size()); ++s) {
    if (with_chunks[s]) out.push_back(s);
  }
  return out;
}

google::protobuf::RepeatedPtrField<PipelineStage> StagesOf(const JobSpec& job) {
  google::protobuf::RepeatedPtrField<PipelineStage> out;
  const std::vector<ModelUnit> units = ModelUnits(job.model());
  const absl::StatusOr<std::vector<Stage>> plan = PlanStages(job.model(), job.pipeline_stages());
  for (int i = 0; plan.ok() && i < static_cast<int>(plan->size()); ++i) {
    const Stage& s = (*plan)[i];
    PipelineStage* p = out.Add();
    p->set_stage(i);
    p->set_units(StageUnits(units, s));
    p->set_first_param(s.first_param);
    p->set_end_param(s.end_param);
    p->set_flops_per_sample(s.flops_per_sample);
  }
  return out;
}

}  // namespace

JobCoordinator::JobCoordinator(const JobSpec& job, SchedulerPolicy policy,
                               CheckpointCatalog* catalog,
                               std::function<void(const TraceEvent&)> trace, absl::Time now)
    : job_(job),
      policy_(policy),
      trace_(std::move(trace)),
      start_(now),
      stages_(StagesOf(job)),
      start_clock_(policy.start_clock),
      members_(job.num_servers(), job.num_workers()),
      clocks_(job.num_workers(), EffectiveStaleness(job)),
      norms_(ServersWithChunks(job), TotalClocks(job)),
      rollbacks_(job, ChunkServers(job), catalog, policy.start_clock),
      pipelines_(job.num_workers(), job.pipeline_stages()),
      control_(job),
      failures_(job, policy, &members_, &clocks_) {
  clocks_.Reset(policy.start_clock);
  norms_.Reset(policy.start_clock);
}

JobState JobCoordinator::state(std::string* message) const {
  if (message != nullptr) *message = message_;
  return state_;
}

bool JobCoordinator::MembersToldOfEnd(absl::Time now, absl::Duration grace) const {
  if (!Ended()) return false;
  if (now - ended_at_ > grace) return true;
  auto told = [](const MemberRecord& m) { return m.saw_job_end || Gone(m.state); };
  return members_.All(SERVER, told) && members_.All(WORKER, told);
}

// ---- Registration and heartbeats.

absl::StatusOr<RegisterResponse> JobCoordinator::Register(const RegisterRequest& req,
                                                          absl::Time now) {
  if (Ended()) return absl::FailedPreconditionError("the job has already ended");
  // Without a rank, a dead member's place once every id is taken.
  ASSIGN_OR_RETURN(const int slot,
                   members_.SlotFor(req.role(),
                                    req.has_rank() ? std::optional<int>(req.rank()) : std::nullopt,
                                    [this](const MemberRecord& m) {
                                      return m.role == SERVER || !clocks_.removed(m.id);
                                    }));
  absl::StatusOr<int> id = slot;
  if (slot >= 0) {
    absl::StatusOr<Decision> d =
        failures_.Replace(req.role(), slot, req.address(), req.incarnation(), state_, now);
    if (d.ok()) Enact(*d, now);
    if (!d.ok()) id = d.status();
  } else {
    id = members_.Register(req.role(), req.address(), req.incarnation(), now);
  }
  if (!id.ok()) {
    spdlog::warn("refused registration from {}: {}", req.address(), id.status().message());
    return id.status();
  }
  RegisterResponse resp;
  resp.set_id(*id);
  *resp.mutable_job() = job_;
  resp.set_generation(rollbacks_.generation());
  // A worker starts at its clock in the table: the job's start, or a dead
  // worker's clock for its replacement.
  resp.set_start_clock(req.role() == WORKER ? clocks_.clock(*id) : rollbacks_.restore_clock());
  spdlog::info("{} {} registered from {}", RoleName(req.role()), *id, req.address());
  if (state_ == WAITING && members_.Complete()) {
    state_ = RUNNING_JOB;
    spdlog::info("all {} servers and {} workers registered; training {} clocks", job_.num_servers(),
                 job_.num_workers(), control_.total_clocks());
    WakeHeld();
  }
  return resp;
}

absl::StatusOr<HeartbeatResponse> JobCoordinator::Heartbeat(const HeartbeatRequest& req,
                                                            absl::Time now) {
  const NodeStatus& st = req.status();
  ASSIGN_OR_RETURN(MemberRecord * member, members_.Find(st.role(), st.id(), req.incarnation()));
  if (failures_.MaybeRevive(*member, state_, now)) Revived(*member, now);
  // A member's last state sticks: a heartbeat overtaken by its final report
  // must not bring it back to RUNNING.
  if (!Gone(member->state)) member->state = st.state();
  member->status = st;
  member->status.set_address(member->address);  // as registered, not as claimed
  member->last_seen = now;
  if (member->state == FAILED) {
    Enact(failures_.Failed(*member, state_, now), now);
  } else if (st.role() == WORKER && member->state == FINISHED) {
    if (st.generation() == rollbacks_.generation() && !rollbacks_.rolling_back()) {
      clocks_.Finish(member->id, std::min(st.clock(), control_.total_clocks()));
    }
    MaybeDone(now);
  } else if (st.role() == SERVER) {
    MaybeEndRollback(now);
    AddReportedNorm(st);
  }
  if (st.role() == WORKER) CatchUpClock(st);
  return HeartbeatAnswer(*member);
}

HeartbeatResponse JobCoordinator::HeartbeatAnswer(MemberRecord& m) const {
  HeartbeatResponse resp;
  resp.set_job_state(state_);
  resp.set_message(message_);
  *resp.mutable_dead_workers() = failures_.dead_workers();
  resp.set_generation(rollbacks_.generation());
  resp.set_restore_clock(rollbacks_.restore_clock());
  resp.set_manifest_clock(rollbacks_.manifest_clock());
  if (pipelines_.pipelined() && m.role == WORKER) {
    resp.set_link_epoch(pipelines_.link_epoch(pipelines_.ReplicaOf(m.id)));
  }
  if (Ended()) m.saw_job_end = true;
  return resp;
}

// A server's last norm, as its heartbeat repeats it: the round a scheduler
// that took the job over never heard of from this server (its answer came
// from the old one) completes. Otherwise a repeat, ignored.
void JobCoordinator::AddReportedNorm(const NodeStatus& st) {
  if (!st.has_last_norm_clock() || st.last_norm_generation() != rollbacks_.generation() ||
      rollbacks_.rolling_back() || !Running()) {
    return;
  }
  if (norms_.Add(st.id(), st.last_norm_clock(), st.last_norm_sum_squares()).ok() &&
      norms_.Total(st.last_norm_clock()).has_value()) {
    WakeHeld();
  }
}

// After a takeover: a worker's heartbeat says how many clocks it finished,
// which its next gate report may be long in coming (a worker in its final
// read, or under SSP waiting in a pull for another worker's pushes, which
// wait at the gate for this one's clock). Its clock in the table catches up
// once from it. (The gate only bounds staleness; the servers' read
// guarantee holds whatever the table says.)
void JobCoordinator::CatchUpClock(const NodeStatus& st) {
  const int w = st.id();
  if (w < 0 || w >= clocks_.num_workers() || !clocks_.may_jump(w) || clocks_.removed(w) ||
      st.generation() != rollbacks_.generation() || rollbacks_.rolling_back() || !Running() ||
      st.clock() <= clocks_.clock(w) || st.clock() > control_.total_clocks()) {
    return;
  }
  if (clocks_.CatchUp(w, st.clock())) {
    Trace("clock", w, st.clock());
    WakeHeld();
  }
}

// ---- Time, and what a member's loss does.

void JobCoordinator::Paused(absl::Duration gap, absl::Time now) {
  spdlog::warn("the scheduler did not run for {}; its members' silence then does not count",
               absl::FormatDuration(absl::Trunc(gap, absl::Milliseconds(100))));
  members_.Paused(gap, now);
}

void JobCoordinator::Tick(absl::Time now) {
  if (Ended()) return;
  members_.ForEach([&](MemberRecord& m) {
    if (failures_.Silent(m, now)) Enact(failures_.DeclareDead(m, state_, now), now);
  });
  Enact(failures_.CheckTimeouts(state_, pipelines_, AtGate(), now), now);
}

void JobCoordinator::Enact(const Decision& d, absl::Time now) {
  switch (d.kind) {
    case Decision::kNone:
      return;
    case Decision::kGoOn:
      WakeHeld();
      MaybeDone(now);
      return;
    case Decision::kRollback:
      BeginRollback(d.why, now);
      return;
    case Decision::kRestartReplica:
      pipelines_.Begin(d.replica, d.why, now);
      return;
    case Decision::kAbort:
      EndJob(ABORTED, d.why, now);
      return;
  }
}

void JobCoordinator::Revived(const MemberRecord& m, absl::Time now) {
  WakeHeld();
  if (m.role == WORKER && pipelines_.pipelined()) MaybeEndRestart(pipelines_.ReplicaOf(m.id), now);
}

void JobCoordinator::MaybeDone(absl::Time now) {
  if (!members_.Complete()) return;
  const bool all = members_.All(
      WORKER, [](const MemberRecord& w) { return w.state == FINISHED || w.state == DEAD; });
  // A draining job ends once its checkpoint is named by the manifest.
  if (all && control_.draining() && rollbacks_.manifest_clock() < control_.total_clocks()) return;
  if (all) {
    EndJob(DONE,
           control_.draining() ? absl::StrCat("drained at clock ", control_.total_clocks()) : "",
           now);
  }
}

void JobCoordinator::Abort(const std::string& message, absl::Time now) {
  EndJob(ABORTED, message, now);
}

void JobCoordinator::EndJob(JobState state, const std::string& message, absl::Time now) {
  if (Ended()) return;
  state_ = state;
  message_ = message;
  ended_at_ = now;
  if (state == DONE) {
    spdlog::info("job done: every worker finished {} clocks", control_.total_clocks());
  } else {
    spdlog::error("job aborted: {}", message);
  }
  WakeHeld();
}

// ---- Rollbacks and pipeline restarts: the clocks and the held calls.

void JobCoordinator::BeginRollback(const std::string& reason, absl::Time now) {
  int64_t from = 0;
  for (int w = 0; w < clocks_.num_workers(); ++w) {
    if (clocks_.removed(w)) continue;
    from = std::max(from, clocks_.clock(w));
    // A worker that already finished and left cannot go back: the others
    // go on without it.
    const MemberRecord* m = members_.Get(WORKER, w);
    if (m != nullptr && m->state == FINISHED) failures_.LeaveOut(w);
  }
  const int64_t to = rollbacks_.Begin(reason, from, now);
  clocks_.Reset(to);
  norms_.Reset(to);
  // Every stage links anew; a restart under way is part of the rollback.
  pipelines_.RolledBack(to, now);
  // Rounds of the old generation never complete.
  held_.Answer([this](const HeldCall& h) -> std::optional<Release> {
    if (h.gate) return std::nullopt;
    Release r;
    r.status = absl::FailedPreconditionError(
        absl::StrCat("the cluster rolled back (generation ", rollbacks_.generation(), ")"));
    return r;
  });
}

void JobCoordinator::MaybeEndRollback(absl::Time now) {
  if (Running() && rollbacks_.MaybeEnd(members_, now)) WakeHeld();
}

std::function<bool(int)> JobCoordinator::AtGate() const {
  return [this](int worker) { return held_.AtGate(worker); };
}

void JobCoordinator::MaybeEndRestart(int replica, absl::Time now) {
  if (!pipelines_.restarting(replica) || !Running() || rollbacks_.rolling_back() ||
      !pipelines_.Pending(replica, members_, AtGate()).empty()) {
    return;
  }
  const int first = pipelines_.first_worker(replica);
  const int end = first + pipelines_.stages();
  int64_t clock = control_.total_clocks();
  for (int w = first; w < end; ++w) clock = std::min(clock, clocks_.clock(w));
  for (int w = first; w < end; ++w) {
    clocks_.Rewind(w, clock);
    Trace("restart", w, clock);
  }
  pipelines_.End(replica, clock, now);
  held_.Answer([&](const HeldCall& h) -> std::optional<Release> {
    if (!h.gate || h.stale || pipelines_.ReplicaOf(h.member) != replica) return std::nullopt;
    Release r;
    FillGate(h.member, clock, &r.gate);
    return r;
  });
}

void JobCoordinator::ManifestWritten(int64_t clock, const absl::Status& status,
                                     absl::Time now) {
  if (rollbacks_.ManifestWritten(clock, status) && control_.draining()) MaybeDone(now);
}

// ---- Operator control.

absl::StatusOr<int64_t> JobCoordinator::Control(const ControlRequest& req, absl::Time now) {
  if (!Running()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the job is ", JobState_Name(state_), ", not running"));
  }
  if (req.action() != STOP && clocks_.Resyncing()) {
    return absl::UnavailableError(
        "the scheduler took the job over and does not know every worker's clock yet; try again "
        "in a moment");
  }
  if (req.action() == STOP) {
    const int64_t clock = clocks_.SlowestClock();
    EndJob(ABORTED, absl::StrCat("stopped by an operator (psctl stop) at clock ", clock), now);
    return clock;
  }
  int64_t fastest = 0;
  for (int w = 0; w < clocks_.num_workers(); ++w) fastest = std::max(fastest, clocks_.clock(w));
  ASSIGN_OR_RETURN(const int64_t clock, control_.Ask(req, fastest, now));
  if (req.action() == SET_CONSISTENCY) WakeHeld();  // a looser bound may open held gates
  return clock;
}

// ---- The gate and the norm rounds.

bool JobCoordinator::GateOpen(int64_t clock) const {
  return Running() && !rollbacks_.rolling_back() &&
         clocks_.MayStart(clock, control_.schedule().StalenessAt(clock));
}

void JobCoordinator::FillGate(int worker, int64_t clock, AdvanceClockResponse* resp) {
  resp->set_slowest_clock(clocks_.SlowestClock());
  *resp->mutable_cluster() = members_.View();
  resp->set_job_state(state_);
  for (int w = 0; w < clocks_.num_workers(); ++w) {
    if (!clocks_.removed(w)) resp->add_live_workers(w);
  }
  resp->set_generation(rollbacks_.generation());
  resp->set_resume_clock(clocks_.clock(worker));
  resp->set_end_clock(control_.draining() ? control_.total_clocks() : 0);
  resp->set_checkpoint_clock(control_.checkpoint_asked());
  for (const ConsistencyChange& c : control_.schedule().changes()) {
    *resp->add_consistency_changes() = c;
  }
  if (pipelines_.pipelined()) {
    resp->set_link_epoch(pipelines_.link_epoch(pipelines_.ReplicaOf(worker)));
  }
  if (clock < control_.total_clocks()) Trace("start", worker, clock);
}

absl::Status JobCoordinator::AdvanceClock(const AdvanceClockRequest& req, Ticket ticket,
                                          absl::Time now, AdvanceClockResponse* resp,
                                          bool* parked) {
  *parked = false;
  const int w = req.worker_id();
  ASSIGN_OR_RETURN(MemberRecord * m, members_.Find(WORKER, w, req.incarnation()));
  if (failures_.MaybeRevive(*m, state_, now)) Revived(*m, now);
  if (m->state == DEAD) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", w, " was declared dead: ", m->status.message()));
  }
  const int64_t total = control_.total_clocks();
  if (req.clock() < 0 || req.clock() > total) {
    return absl::InvalidArgumentError(
        absl::StrCat("clock ", req.clock(), " outside [0, ", total, "]"));
  }
  const int64_t generation = rollbacks_.generation();
  if (req.generation() < 0 || req.generation() > generation) {
    return absl::InvalidArgumentError(
        absl::StrCat("generation ", req.generation(), " outside [0, ", generation, "]"));
  }
  if (req.generation() < generation) return GateOfOlderGeneration(req, ticket, now, resp, parked);
  const int64_t before = clocks_.clock(w);
  RETURN_IF_ERROR(clocks_.Advance(w, req.clock()));
  if (clocks_.clock(w) != before) {
    Trace("clock", w, req.clock());
    m->status.set_clock(req.clock());
    if (m->state == REGISTERED) m->state = RUNNING;
    WakeHeld();
  }
  if (state_ == ABORTED) return absl::AbortedError(absl::StrCat("job aborted: ", message_));
  ASSIGN_OR_RETURN(const bool restart, GateOfRestart(req, ticket, now, resp, parked));
  if (restart) return absl::OkStatus();
  // A worker that finished every clock need not wait for anyone.
  if (req.clock() >= total || GateOpen(req.clock())) {
    FillGate(w, req.clock(), resp);
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(held_.Hold(HeldCall{ticket, /*gate=*/true, w, req.clock(), now}));
  *parked = true;
  return absl::OkStatus();
}

// The cluster rolled back since this worker's generation: its clock is the
// table's now. It is told so once the servers have restored.
absl::Status JobCoordinator::GateOfOlderGeneration(const AdvanceClockRequest& req, Ticket ticket,
                                                   absl::Time now, AdvanceClockResponse* resp,
                                                   bool* parked) {
  if (state_ == ABORTED) return absl::AbortedError(absl::StrCat("job aborted: ", message_));
  if (!rollbacks_.rolling_back()) {
    FillGate(req.worker_id(), clocks_.clock(req.worker_id()), resp);
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(held_.Hold(
      HeldCall{ticket, /*gate=*/true, req.worker_id(), req.clock(), now, /*stale=*/true}));
  *parked = true;
  return absl::OkStatus();
}

absl::StatusOr<bool> JobCoordinator::GateOfRestart(const AdvanceClockRequest& req, Ticket ticket,
                                                   absl::Time now, AdvanceClockResponse* resp,
                                                   bool* parked) {
  if (!pipelines_.pipelined()) return false;
  const int worker = req.worker_id();
  const int replica = pipelines_.ReplicaOf(worker);
  const bool behind = req.link_epoch() < pipelines_.link_epoch(replica);
  if (!req.relink() && !behind) return false;
  if (req.relink() && !behind && !pipelines_.restarting(replica)) {
    ASSIGN_OR_RETURN(const Decision d, failures_.LinksBroke(worker, replica));
    Enact(d, now);
  }
  if (!pipelines_.restarting(replica)) {  // the restart it is behind has ended
    FillGate(worker, clocks_.clock(worker), resp);
    return true;
  }
  RETURN_IF_ERROR(held_.Hold(HeldCall{ticket, /*gate=*/true, worker, req.clock(), now}));
  *parked = true;
  MaybeEndRestart(replica, now);
  return true;
}

absl::Status JobCoordinator::ReduceNorm(const ReduceNormRequest& req, Ticket ticket, absl::Time now,
                                        double* sum_squares, bool* parked) {
  *parked = false;
  RETURN_IF_ERROR(members_.Find(SERVER, req.server_id(), req.incarnation()).status());
  if (Ended()) return absl::AbortedError(absl::StrCat("job ended: ", message_));
  if (req.generation() != rollbacks_.generation() || rollbacks_.rolling_back()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "a norm of generation ", req.generation(), "; the cluster is in generation ",
        rollbacks_.generation(), rollbacks_.rolling_back() ? ", restoring" : ""));
  }
  RETURN_IF_ERROR(norms_.Add(req.server_id(), req.clock(), req.sum_squares()));
  if (std::optional<double> total = norms_.Total(req.clock())) {
    *sum_squares = *total;
    WakeHeld();
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(held_.Hold(HeldCall{ticket, /*gate=*/false, req.server_id(), req.clock(), now}));
  *parked = true;
  return absl::OkStatus();
}

void JobCoordinator::WakeHeld() {
  held_.Answer([this](const HeldCall& h) { return AnswerHeld(h); });
}

std::optional<Release> JobCoordinator::AnswerHeld(const HeldCall& h) {
  Release r;
  if (Ended()) {
    r.status = absl::AbortedError(absl::StrCat("job ended: ", message_));
  } else if (!h.gate) {
    const std::optional<double> total = norms_.Total(h.clock);
    if (!total.has_value()) return std::nullopt;
    r.sum_squares = *total;
  } else if (pipelines_.pipelined() && pipelines_.restarting(pipelines_.ReplicaOf(h.member))) {
    return std::nullopt;  // answered when its replica's restart ends
  } else if (h.stale && !rollbacks_.rolling_back()) {
    FillGate(h.member, clocks_.clock(h.member), &r.gate);
  } else if (!h.stale && GateOpen(h.clock)) {
    FillGate(h.member, h.clock, &r.gate);
  } else {
    return std::nullopt;
  }
  return r;
}

void JobCoordinator::Trace(const char* event, int worker, int64_t clock) {
  if (!trace_) return;
  TraceEvent e;
  e.set_event(event);
  e.set_worker(worker);
  e.set_clock(clock);
  trace_(e);
}

// ---- Status.

ClusterStatus JobCoordinator::Status(absl::Time now) const {
  ClusterStatus out;
  out.set_job_state(state_);
  out.set_message(message_);
  const ConsistencySchedule& schedule = control_.schedule();
  out.set_consistency(schedule.Latest().consistency());
  out.set_staleness(schedule.Latest().staleness());
  for (const ConsistencyChange& c : schedule.changes()) *out.add_consistency_changes() = c;
  out.set_total_clocks(control_.total_clocks());
  out.set_start_clock(start_clock_);
  *out.mutable_stages() = stages_;
  out.set_pipeline_schedule(job_.pipeline_schedule());
  out.set_micro_batches(job_.micro_batches());
  NodeStatus* me = out.mutable_scheduler();
  me->set_role(SCHEDULER);
  me->set_address(address_);
  me->set_state(state_ == DONE ? FINISHED : state_ == ABORTED ? FAILED : RUNNING);
  me->set_uptime_s(absl::ToDoubleSeconds(now - start_));
  me->set_clock(clocks_.SlowestClock());
  me->set_test_accuracy(-1);
  out.set_generation(rollbacks_.generation());
  out.set_deaths(failures_.deaths());
  out.set_checkpoint_asked(control_.checkpoint_asked());
  out.set_draining(control_.draining());
  out.set_manifest_clock(rollbacks_.manifest_clock());
  for (int w = 0; w < clocks_.num_workers(); ++w) {
    out.add_worker_clocks(clocks_.removed(w) ? -1 : clocks_.clock(w));
  }
  *out.mutable_job() = job_;
  *out.mutable_rollbacks() = rollbacks_.history();
  *out.mutable_pipeline_restarts() = pipelines_.restarts();
  out.set_scheduler_takeovers(takeovers_);
  out.set_taken_over_unix_ms(takeovers_ > 0 ? absl::ToUnixMillis(taken_over_) : 0);
  AddWaits(me);
  members_.ForEach([&out](const MemberRecord& m) { *out.add_members() = m.Shown(); });
  return out;
}

// What the scheduler waits on: a rollback, pipeline restarts, then held
// norms, then held gates.
void JobCoordinator::AddWaits(NodeStatus* me) const {
  rollbacks_.AddWait(members_, me);
  pipelines_.AddWaits(members_, AtGate(), me);
  held_.AddWaits(clocks_.SlowestClock(), me);
}

// ---- Taking over.

SchedulerState JobCoordinator::Snapshot() const {
  SchedulerState s;
  s.set_format("pstrain scheduler state");
  *s.mutable_job() = job_;
  s.set_job_state(state_);
  s.set_message(message_);
  s.set_start_clock(start_clock_);
  s.set_on_worker_failure(WorkerFailureName(policy_.on_worker_failure));
  s.set_scheduler_takeovers(takeovers_);
  s.set_taken_over_unix_ms(takeovers_ > 0 ? absl::ToUnixMillis(taken_over_) : 0);
  *s.mutable_members() = members_.Snapshot();
  *s.mutable_clocks() = clocks_.Snapshot();
  *s.mutable_failures() = failures_.Snapshot();
  *s.mutable_rollbacks() = rollbacks_.Snapshot();
  *s.mutable_pipelines() = pipelines_.Snapshot();
  *s.mutable_control() = control_.Snapshot();
  return s;
}

std::string JobCoordinator::DurableKey() const { return DurableKeyOf(Snapshot()); }

absl::Status JobCoordinator::TakeOver(const SchedulerState& s, absl::Time now) {
  // The values of a state file in range for its job (a file edited by hand
  // or damaged must not steer the job); each part checks its own.
  const int64_t clocks = TotalClocks(job_);
  if (s.start_clock() < 0 || s.start_clock() > clocks) {
    return absl::InvalidArgumentError(
        absl::StrCat("clock ", s.start_clock(), " out of range for the job"));
  }
  if (s.scheduler_takeovers() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("count ", s.scheduler_takeovers(), " out of range for the job"));
  }
  RETURN_IF_ERROR(control_.Restore(s.control(), clocks));
  RETURN_IF_ERROR(clocks_.Restore(s.clocks(), control_.total_clocks()));
  RETURN_IF_ERROR(members_.Restore(s.members(), now));
  RETURN_IF_ERROR(failures_.Restore(s.failures()));
  RETURN_IF_ERROR(rollbacks_.Restore(s.rollbacks(), clocks));
  RETURN_IF_ERROR(pipelines_.Restore(s.pipelines()));
  state_ = s.job_state();
  message_ = s.message();
  if (Ended()) ended_at_ = now;
  start_clock_ = s.start_clock();
  // Rounds from the generation's start are reported again (or repeated by
  // the servers' heartbeats).
  norms_.Reset(rollbacks_.restore_clock());
  takeovers_ = s.scheduler_takeovers() + 1;
  taken_over_ = now;
  spdlog::warn(
      "took the job over from the state file: {}, generation {}, clocks {}..{} as last written; "
      "{} servers and {} workers to hear from again",
      JobState_Name(state_), rollbacks_.generation(), clocks_.SlowestClock(),
      *std::max_element(s.clocks().clocks().begin(), s.clocks().clocks().end()),
      members_.registered(SERVER), members_.registered(WORKER));
  return absl::OkStatus();
}

}  // namespace pstrain
