#include "scheduler/job_coordinator.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/external_model.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/params.h"
#include "common/partition.h"
#include "common/stage_plan.h"
#include "common/status_macros.h"
#include "scheduler/durable_key.h"

namespace pstrain {

namespace {

// The job's chunks as every member cuts them (an EXTERNAL model's none
// until a worker declares it).
Partition JobPartition(const JobSpec& job) {
  absl::StatusOr<Partition> p =
      Partition::Make(ModelParams(job.model()), job.chunk_bytes(), job.num_servers());
  // A valid job always partitions.
  return p.ok() ? *std::move(p) : Partition::Make({}, sizeof(float), 1).value();
}

// Which servers hold chunks (and so write checkpoints and report norms).
std::vector<bool> ServersWithChunks(const JobSpec& job) {
  std::vector<bool> out(job.num_servers(), false);
  const Partition p = JobPartition(job);
  for (int s = 0; s < std::min(job.num_servers(), p.num_servers()); ++s) {
    out[s] = !p.ServerChunks(s).empty();
  }
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
      start_(now),
      stages_(StagesOf(job)),
      start_clock_(policy.start_clock),
      members_(job.num_servers(), job.num_workers()),
      clocks_(job.num_workers(), EffectiveStaleness(job)),
      rollbacks_(job, ChunkServers(job), catalog, policy.start_clock),
      pipelines_(job.num_workers(), job.pipeline_stages()),
      control_(job),
      gate_(&phase_, ServersWithChunks(job), TotalClocks(job), &clocks_, &members_, &rollbacks_,
            &control_, &pipelines_, std::move(trace)),
      promotions_(job),
      moves_(job, JobPartition(job)),
      failures_(job, policy, &members_, &clocks_, &promotions_, &moves_) {
  clocks_.Reset(policy.start_clock);
}

JobState JobCoordinator::state(std::string* message) const {
  if (message != nullptr) *message = phase_.message;
  return phase_.state;
}

bool JobCoordinator::MembersEnded(absl::Time now, absl::Duration grace) const {
  if (!Ended()) return false;
  // Past the grace a member that is still heard from (it lingers, or has
  // not heard of the end) no longer holds the end back; one that went
  // silent does until it is declared dead (Tick), so that the final status
  // says so.
  const absl::Time grace_end = ended_at_ + grace;
  auto ended = [&](const MemberRecord& m) {
    return Gone(m.state) || (now > grace_end && m.last_seen > grace_end);
  };
  return members_.All(SERVER, ended) && members_.All(WORKER, ended);
}

// ---- Registration and heartbeats.

void JobCoordinator::LogRefusal(const RegisterRequest& req, const absl::Status& why,
                                absl::Time now) {
  int64_t held_back = 0;
  if (!refusals_log_.Allow(&held_back, now)) return;
  spdlog::warn("refused {} registration from {}: {}{}", RoleName(req.role()), req.address(),
               why.message(),
               held_back > 0 ? absl::StrCat(" (", held_back, " such lines held back)") : "");
}

std::optional<std::string> JobCoordinator::LiveHolder(const RegisterRequest& req) const {
  if (!req.has_id() || req.replace_live() || Ended()) return std::nullopt;
  if (req.role() != SERVER && req.role() != WORKER) return std::nullopt;
  const MemberRecord* m = members_.Get(req.role(), req.id());
  if (m == nullptr || Gone(m->state)) return std::nullopt;
  // Its own retry; or a new process on the old one's address (a restart in
  // place: no two processes listen on one port), so the old one is gone.
  if (m->address == req.address()) return std::nullopt;
  return m->address;
}

absl::Status JobCoordinator::RefuseLive(const RegisterRequest& req, absl::Time now) {
  const MemberRecord* m = members_.Get(req.role(), req.id());
  const absl::Status st = absl::AlreadyExistsError(absl::StrCat(
      RoleName(req.role()), " ", req.id(), " is live at ", m == nullptr ? "?" : m->address,
      " (it answered just now): not replaced. Give another --id, or take its place anyway "
      "with --replace_live"));
  LogRefusal(req, st, now);
  return st;
}

absl::StatusOr<RegisterResponse> JobCoordinator::Register(const RegisterRequest& req,
                                                          absl::Time now) {
  if (Ended()) return absl::FailedPreconditionError("the job has already ended");
  if (req.join()) return Join(req, now);
  if (req.role() == WORKER) {
    // A worker of an EXTERNAL model declares it: the first one's becomes
    // the job's, the others must match (common/external_model.h).
    absl::StatusOr<JobSpec> joined = req.declare_later()
                                         ? ExternalJobToJoin(job_)
                                         : JoinExternalModel(job_, req.params(), req.train_size());
    if (!joined.ok()) {
      LogRefusal(req, joined.status(), now);
      return joined.status();
    }
    job_ = *std::move(joined);
  }
  // Without an id, a dead member's place once every id is taken.
  ASSIGN_OR_RETURN(
      const int replaced,
      members_.IdFor(req.role(), req.has_id() ? std::optional<int>(req.id()) : std::nullopt,
                     [this](const MemberRecord& m) {
                       return m.role == SERVER ? moves_.InJob(m.id) : !clocks_.removed(m.id);
                     }));
  absl::StatusOr<int> id = replaced;
  if (replaced >= 0) {
    absl::StatusOr<Decision> d = failures_.Replace(req.role(), replaced, req.address(),
                                                   req.incarnation(), phase_.state, now);
    if (d.ok()) Enact(*d, now);
    if (!d.ok()) id = d.status();
  } else {
    id = members_.Register(req.role(), req.address(), req.incarnation(), now);
  }
  if (!id.ok()) {
    LogRefusal(req, id.status(), now);
    return id.status();
  }
  if (req.role() == WORKER) members_.Get(WORKER, *id)->declared = !req.declare_later();
  if (req.role() == SERVER) promotions_.Registered(*id, req.address());
  RegisterResponse resp;
  if (promotions_.enabled()) *resp.mutable_routes() = promotions_.routes();
  resp.set_id(*id);
  *resp.mutable_job() = job_;
  resp.set_generation(rollbacks_.generation());
  // A worker starts at its clock in the table: the job's start, or for a
  // replacement (or the worker restarted) the iterations its predecessor
  // knew pushed -- a push after them may have died with it.
  if (req.role() == WORKER && replaced >= 0) clocks_.RestartPoint(*id);
  resp.set_start_clock(req.role() == WORKER ? clocks_.clock(*id) : rollbacks_.restore_clock());
  AddPlacement(resp.mutable_placement());
  spdlog::info("{} {} registered from {}", RoleName(req.role()), *id, req.address());
  if (phase_.state == WAITING && members_.Complete()) {
    phase_.state = RUNNING_JOB;
    if (job_.model().kind() == EXTERNAL) {
      // Its chunks are placed now that a worker declared it.
      gate_.SetReporters(ServersWithChunks(job_));
      rollbacks_.SetChunkServers(ChunkServers(job_));
      moves_.Placed(JobPartition(job_));
    }
    spdlog::info("all {} servers and {} workers registered; training {} clocks", job_.num_servers(),
                 job_.num_workers(), control_.total_clocks());
    gate_.Wake();
  }
  return resp;
}

absl::StatusOr<HeartbeatResponse> JobCoordinator::Heartbeat(const HeartbeatRequest& req,
                                                            absl::Time now) {
  const MemberStatus& st = req.status();
  ASSIGN_OR_RETURN(MemberRecord * member, members_.Find(st.role(), st.id(), req.incarnation()));
  if (failures_.MaybeRevive(*member, phase_.state, now)) Revived(*member, now);
  // A member's last state sticks: a heartbeat overtaken by its final report
  // must not bring it back to RUNNING.
  if (!Gone(member->state)) member->state = st.state();
  member->status = st;
  member->status.set_address(member->address);  // as registered, not as claimed
  member->last_seen = now;
  if (member->state == FAILED) {
    Enact(failures_.Failed(*member, phase_.state, now), now);
  } else if (st.role() == WORKER && member->state == FINISHED) {
    if (st.generation() == rollbacks_.generation() && !rollbacks_.rolling_back()) {
      clocks_.Finish(member->id, std::min(st.clock(), control_.total_clocks()));
    }
    MaybeDone(now);
  } else if (st.role() == SERVER) {
    promotions_.Reported(member->id, st);
    MaybeEndRollback(now);
    MaybeSwitch(now);
    gate_.AddReportedNorm(st);
  }
  if (st.role() == WORKER) gate_.CatchUpClock(st);
  return HeartbeatAnswer(*member);
}

HeartbeatResponse JobCoordinator::HeartbeatAnswer(const MemberRecord& m) const {
  HeartbeatResponse resp;
  resp.set_job_state(phase_.state);
  resp.set_message(phase_.message);
  *resp.mutable_dead_workers() = failures_.dead_workers();
  resp.set_generation(rollbacks_.generation());
  resp.set_restore_clock(rollbacks_.restore_clock());
  resp.set_manifest_clock(rollbacks_.manifest_clock());
  if (promotions_.enabled()) *resp.mutable_routes() = promotions_.routes();
  if (m.role == SERVER) AddPlacementNews(m, &resp);
  if (pipelines_.pipelined() && m.role == WORKER) {
    resp.set_link_generation(pipelines_.link_generation(pipelines_.ReplicaOf(m.id)));
  }
  return resp;
}

// ---- Time, and what a member's loss does.

void JobCoordinator::Paused(absl::Duration gap, absl::Time now) {
  spdlog::warn("the scheduler did not run for {}; its members' silence then does not count",
               absl::FormatDuration(absl::Trunc(gap, absl::Milliseconds(100))));
  members_.Paused(gap, now);
}

void JobCoordinator::Tick(absl::Time now) {
  members_.ForEach([&](MemberRecord& m) {
    if (!failures_.Silent(m, now)) return;
    const Decision d = failures_.DeclareDead(m, phase_.state, now);
    // After the end a death changes nothing but what the final status
    // says of that member.
    if (!Ended()) Enact(d, now);
  });
  if (Ended()) return;
  Enact(failures_.CheckTimeouts(phase_.state, pipelines_, AtGate(), now), now);
}

void JobCoordinator::Enact(const Decision& d, absl::Time now) {
  gate_.HoldFrom(moves_.held_clock());  // the loss may have abandoned a move
  switch (d.kind) {
    case Decision::kNone:
      return;
    case Decision::kGoOn:
      gate_.Wake();
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
  gate_.Wake();
  if (m.role == SERVER) promotions_.Registered(m.id, m.address);  // its copies are stale
  if (m.role == WORKER && pipelines_.pipelined())
    gate_.MaybeEndRestart(pipelines_.ReplicaOf(m.id), now);
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
  phase_.state = state;
  phase_.message = message;
  ended_at_ = now;
  if (state == DONE) {
    spdlog::info("job done: every worker finished {} clocks", control_.total_clocks());
  } else {
    spdlog::error("job aborted: {}", message);
  }
  gate_.Wake();
}

// ---- Rollbacks and pipeline restarts: the clocks and the held calls.

void JobCoordinator::BeginRollback(const std::string& reason, absl::Time now, bool redo) {
  int64_t from = 0;
  for (int w = 0; w < clocks_.num_workers(); ++w) {
    if (clocks_.removed(w)) continue;
    from = std::max(from, clocks_.clock(w));
    // A worker that already finished and left cannot go back: the others
    // go on without it.
    const MemberRecord* m = members_.Get(WORKER, w);
    if (m != nullptr && m->state == FINISHED) failures_.LeaveOut(w);
  }
  AbandonMove(reason, now);
  const int64_t to = rollbacks_.Begin(reason, from, now, redo);
  promotions_.Reset();
  gate_.RolledBack(to);
  // Every stage links anew; a restart under way is part of the rollback.
  pipelines_.RolledBack(to, now);
}

void JobCoordinator::RollBackForARedo(int worker, int64_t clock, absl::Time now) {
  if (!Running() || rollbacks_.rolling_back()) return;
  if (!rollbacks_.checkpoints()) {
    spdlog::warn(
        "worker {} redoes clock {} from newer weights: its predecessor's push of it "
        "reached some chunks and not others, and the job keeps no checkpoint to roll "
        "back to",
        worker, clock);
    return;
  }
  BeginRollback(absl::StrCat("worker ", worker, "'s push of clock ", clock,
                             " reached some chunks and not others before it died: its replacement "
                             "could not make it again as it was"),
                now, /*redo=*/true);
}

void JobCoordinator::MaybeEndRollback(absl::Time now) {
  if (Running() && rollbacks_.MaybeEnd(members_, now, ServersInJob())) gate_.Wake();
}

void JobCoordinator::ManifestWritten(int64_t clock, const absl::Status& status, absl::Time now) {
  if (!rollbacks_.ManifestWritten(clock, status)) return;
  if (control_.draining()) MaybeDone(now);
  MaybeSwitch(now);
}

// ---- Operator control.

absl::StatusOr<int64_t> JobCoordinator::Control(const ControlRequest& req, absl::Time now) {
  if (!phase_.Running()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the job is ", JobState_Name(phase_.state), ", not running"));
  }
  if (req.action() != STOP && clocks_.Resyncing()) {
    return absl::UnavailableError(
        "the scheduler took the job over and does not know every worker's clock yet; try again "
        "in a moment");
  }
  if (req.action() == MOVE) return Drain(req, now);
  if (req.action() == STOP) {
    const int64_t clock = clocks_.SlowestClock();
    EndJob(ABORTED, absl::StrCat("stopped by an operator (psctl stop) at clock ", clock), now);
    return clock;
  }
  int64_t fastest = 0;
  for (int w = 0; w < clocks_.num_workers(); ++w) fastest = std::max(fastest, clocks_.clock(w));
  ASSIGN_OR_RETURN(const int64_t clock, control_.Ask(req, fastest, now));
  if (req.action() == SET_CONSISTENCY) gate_.Wake();  // a looser bound may open held gates
  return clock;
}

// ---- The gate and the norm rounds.

absl::Status JobCoordinator::AdvanceClock(const AdvanceClockRequest& req, Ticket ticket,
                                          absl::Time now, AdvanceClockResponse* resp,
                                          bool* parked) {
  *parked = false;
  const int w = req.worker_id();
  ASSIGN_OR_RETURN(MemberRecord * m, members_.Find(WORKER, w, req.incarnation()));
  if (failures_.MaybeRevive(*m, phase_.state, now)) Revived(*m, now);
  if (m->state == DEAD) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", w, " was declared dead: ", m->status.message()));
  }
  const int64_t total = control_.total_clocks();
  if (req.clock() < 0 || req.clock() > total) {
    return absl::InvalidArgumentError(
        absl::StrCat("clock ", req.clock(), " outside [0, ", total, "]"));
  }
  if (req.redo_inexact() && req.generation() == rollbacks_.generation()) {
    RollBackForARedo(w, req.clock(), now);  // (the call is then of an older generation)
  }
  const int64_t generation = rollbacks_.generation();
  if (req.generation() < 0 || req.generation() > generation) {
    return absl::InvalidArgumentError(
        absl::StrCat("generation ", req.generation(), " outside [0, ", generation, "]"));
  }
  const absl::Status aborted = absl::AbortedError(absl::StrCat("job aborted: ", phase_.message));
  if (req.generation() < generation) {
    if (phase_.state == ABORTED) return aborted;
    return gate_.AskOfOlderGeneration(req, ticket, now, resp, parked);
  }
  ASSIGN_OR_RETURN(const bool moved, gate_.Advance(w, req.clock()));
  clocks_.NotePushed(w, req.pushed_clock());
  if (moved) {
    m->status.set_clock(req.clock());
    if (m->state == REGISTERED) m->state = RUNNING;
  }
  if (phase_.state == ABORTED) return aborted;
  // A stage whose links broke starts its replica's restart (if none is
  // under way and it is not behind one).
  if (pipelines_.pipelined() && req.relink()) {
    const int replica = pipelines_.ReplicaOf(w);
    if (req.link_generation() >= pipelines_.link_generation(replica) &&
        !pipelines_.restarting(replica)) {
      ASSIGN_OR_RETURN(const Decision d, failures_.LinksBroke(w, replica));
      Enact(d, now);
    }
  }
  return gate_.Ask(req, ticket, now, resp, parked);
}

absl::Status JobCoordinator::ReduceNorm(const ReduceNormRequest& req, Ticket ticket, absl::Time now,
                                        double* sum_squares, bool* parked) {
  *parked = false;
  RETURN_IF_ERROR(members_.Find(SERVER, req.server_id(), req.incarnation()).status());
  return gate_.ReduceNorm(req, ticket, now, sum_squares, parked);
}

std::function<bool(int)> JobCoordinator::AtGate() const {
  return [this](int worker) { return gate_.AtGate(worker); };
}

// ---- Status.

ClusterStatus JobCoordinator::Status(absl::Time now) const {
  ClusterStatus out;
  out.set_job_state(phase_.state);
  out.set_message(phase_.message);
  out.set_start_clock(start_clock_);
  *out.mutable_job() = job_;
  *out.mutable_stages() = stages_;
  out.set_pipeline_schedule(job_.pipeline_schedule());
  out.set_micro_batches(job_.micro_batches());
  out.set_scheduler_takeovers(takeovers_);
  out.set_taken_over_unix_ms(takeovers_ > 0 ? absl::ToUnixMillis(taken_over_) : 0);
  MemberStatus* me = out.mutable_scheduler();
  me->set_role(SCHEDULER);
  me->set_address(address_);
  me->set_state(phase_.state == DONE ? FINISHED : phase_.state == ABORTED ? FAILED : RUNNING);
  me->set_uptime_s(absl::ToDoubleSeconds(now - start_));
  me->set_clock(clocks_.SlowestClock());
  AddWaits(me);
  // The parts', from the same managers as the snapshot.
  control_.AddStatus(&out);
  rollbacks_.AddStatus(&out);
  promotions_.AddStatus(&out);
  moves_.AddStatus(&out);
  AddMoveWaits(&out);
  failures_.AddStatus(&out);
  pipelines_.AddStatus(&out);
  clocks_.AddStatus(&out);
  members_.AddStatus(&out);
  return out;
}

// What the scheduler waits on: a rollback, pipeline restarts, then held
// norms, then held gates.
void JobCoordinator::AddWaits(MemberStatus* me) const {
  rollbacks_.AddWait(members_, me);
  pipelines_.AddWaits(members_, AtGate(), me);
  gate_.AddWaits(me);
}

// ---- Taking over.

}  // namespace pstrain
