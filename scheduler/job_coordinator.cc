#include "scheduler/job_coordinator.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/params.h"
#include "common/partition.h"
#include "common/stage_plan.h"
#include "common/status_macros.h"

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

bool Gone(MemberState s) { return s == FINISHED || s == FAILED || s == DEAD; }

}  // namespace

JobCoordinator::JobCoordinator(const JobSpec& job, SchedulerPolicy policy,
                               CheckpointCatalog* catalog,
                               std::function<void(const TraceEvent&)> trace, absl::Time now)
    : job_(job),
      policy_(policy),
      catalog_(catalog),
      trace_(std::move(trace)),
      total_clocks_(TotalClocks(job)),
      start_(now),
      members_(job.num_servers(), job.num_workers()),
      clocks_(job.num_workers(), EffectiveStaleness(job)),
      norms_(ServersWithChunks(job), TotalClocks(job)),
      schedule_(job) {
  const std::vector<bool> with_chunks = ServersWithChunks(job);
  for (int s = 0; s < static_cast<int>(with_chunks.size()); ++s) {
    if (with_chunks[s]) chunk_servers_.push_back(s);
  }
  clocks_.Reset(policy.start_clock);
  norms_.Reset(policy.start_clock);
  restore_clock_ = manifest_clock_ = policy.start_clock;
  const std::vector<ModelUnit> units = ModelUnits(job.model());
  const absl::StatusOr<std::vector<Stage>> plan = PlanStages(job.model(), job.pipeline_stages());
  for (int i = 0; plan.ok() && i < static_cast<int>(plan->size()); ++i) {
    const Stage& s = (*plan)[i];
    PipelineStage* p = stages_.Add();
    p->set_stage(i);
    p->set_units(StageUnits(units, s));
    p->set_first_param(s.first_param);
    p->set_end_param(s.end_param);
    p->set_flops_per_sample(s.flops_per_sample);
  }
  if (Pipelined()) links_.resize(job.num_workers() / job.pipeline_stages());
}

JobState JobCoordinator::state(std::string* message) const {
  if (message != nullptr) *message = message_;
  return state_;
}

bool JobCoordinator::MembersToldOfEnd(absl::Time now, absl::Duration grace) const {
  if (state_ != DONE && state_ != ABORTED) return false;
  if (now - ended_at_ > grace) return true;
  for (const auto* list : {&members_.servers(), &members_.workers()}) {
    for (const MemberRecord& m : *list) {
      if (!m.saw_job_end && !Gone(m.status.state())) return false;
    }
  }
  return true;
}

// ---- Registration.

absl::StatusOr<int> JobCoordinator::SlotFor(const RegisterRequest& req) const {
  const bool server = req.role() == SERVER;
  const std::vector<MemberRecord>& list = server ? members_.servers() : members_.workers();
  const int expected = server ? job_.num_servers() : job_.num_workers();
  const int registered = static_cast<int>(list.size());
  if (req.has_rank()) {
    if (req.role() != SERVER && req.role() != WORKER) {
      return absl::InvalidArgumentError("bad role");
    }
    if (req.rank() < 0 || req.rank() >= expected) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", req.rank(), " outside [0, ", expected, ")"));
    }
    if (req.rank() > registered) {
      return absl::FailedPreconditionError(
          absl::StrCat(RoleName(req.role()), " ids are handed out in order: ", registered,
                       " is next, not ", req.rank()));
    }
    return req.rank() < registered ? req.rank() : -1;
  }
  // Without a rank: a dead member's place, once every id is taken.
  if ((server || req.role() == WORKER) && registered == expected) {
    for (const MemberRecord& m : list) {
      if (m.status.state() == DEAD && (server || !clocks_.removed(m.id))) return m.id;
    }
  }
  return -1;
}

absl::StatusOr<RegisterResponse> JobCoordinator::Register(const RegisterRequest& req,
                                                          absl::Time now) {
  if (state_ == DONE || state_ == ABORTED) {
    return absl::FailedPreconditionError("the job has already ended");
  }
  ASSIGN_OR_RETURN(const int slot, SlotFor(req));
  absl::StatusOr<int> id = slot;
  if (slot >= 0) {
    if (absl::Status st = ReplaceMember(req.role(), slot, req, now); !st.ok()) id = st;
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
  resp.set_generation(generation_);
  // A worker starts at its clock in the table: the job's start, or a dead
  // worker's clock for its replacement.
  resp.set_start_clock(req.role() == WORKER ? clocks_.clock(*id) : restore_clock_);
  spdlog::info("{} {} registered from {}", RoleName(req.role()), *id, req.address());
  if (state_ == WAITING && members_.Complete()) {
    state_ = RUNNING_JOB;
    spdlog::info("all {} servers and {} workers registered; training {} clocks", job_.num_servers(),
                 job_.num_workers(), total_clocks_);
    WakeHeld();
  }
  return resp;
}

absl::Status JobCoordinator::ReplaceMember(Role role, int id, const RegisterRequest& req,
                                           absl::Time now) {
  MemberRecord& old = (role == SERVER ? members_.servers() : members_.workers())[id];
  if (old.incarnation == req.incarnation() && old.address == req.address()) {
    return absl::OkStatus();  // a retry
  }
  if (role == WORKER && state_ == RUNNING_JOB && !KeepsPlace(WORKER)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "worker ", id, " cannot be replaced: the job ",
        policy_.on_worker_failure == WorkerFailure::kShrink ? "goes on without a dead worker"
                                                            : "ends when a worker dies",
        " (the scheduler's --on_worker_failure=wait keeps its place)"));
  }
  if (role == WORKER && old.status.state() == FINISHED) {
    return absl::FailedPreconditionError(absl::StrCat("worker ", id, " has finished"));
  }
  const bool was_dead = old.status.state() == DEAD;
  const std::string old_address = old.address;
  RETURN_IF_ERROR(members_.Replace(role, id, req.address(), req.incarnation(), now));
  spdlog::warn("{} {} at {} replaced by a new process at {}", RoleName(role), id, old_address,
               req.address());
  if (role == WORKER && Pipelined() && state_ == RUNNING_JOB) {
    BeginRestart(ReplicaOfWorker(id),
                 absl::StrCat("worker ", id, " at ", old_address, " replaced by ", req.address()),
                 now);
  }
  // A worker's replacement takes over at its clock: nothing else changes.
  // A server that died has started its rollback already.
  if (role == SERVER && state_ == RUNNING_JOB && !was_dead) {
    if (job_.checkpoint_every() <= 0) {
      EndJob(ABORTED,
             absl::StrCat("server ", id,
                          " was replaced and the job writes no checkpoints (checkpoint_every) "
                          "to restore it from"),
             now);
    } else {
      BeginRollback(
          absl::StrCat("server ", id, " at ", old_address, " replaced by ", req.address()), now);
    }
  }
  return absl::OkStatus();
}

// ---- Heartbeats and liveness.

absl::StatusOr<HeartbeatResponse> JobCoordinator::Heartbeat(const HeartbeatRequest& req,
                                                            absl::Time now) {
  const NodeStatus& st = req.status();
  ASSIGN_OR_RETURN(MemberRecord * member, members_.Find(st.role(), st.id(), req.incarnation()));
  if (member->status.state() == DEAD && state_ == RUNNING_JOB && KeepsPlace(member->role) &&
      !(member->role == WORKER && clocks_.removed(member->id))) {
    Revive(*member, now);
  }
  // A member's last state sticks: a heartbeat overtaken by its final report
  // must not bring it back to RUNNING.
  const MemberState before = member->status.state();
  member->status = st;
  if (Gone(before)) member->status.set_state(before);
  member->status.set_address(member->address);  // as registered, not as claimed
  member->last_seen = now;
  if (member->status.state() == FAILED) {
    const std::string why =
        absl::StrCat(RoleName(st.role()), " ", st.id(), " failed: ", st.message());
    if (st.role() != WORKER || !TakeReplicaOut(member->id, why, now)) EndJob(ABORTED, why, now);
  } else if (st.role() == WORKER && member->status.state() == FINISHED) {
    if (st.generation() == generation_ && !rolling_back_) {
      clocks_.Finish(member->id, std::min(st.clock(), total_clocks_));
    }
    MaybeDone(now);
  } else if (st.role() == SERVER) {
    MaybeEndRollback(now);
    AddReportedNorm(st);
  }
  if (st.role() == WORKER) CatchUpClock(st);
  HeartbeatResponse resp;
  resp.set_job_state(state_);
  resp.set_message(message_);
  for (int32_t w : dead_workers_) resp.add_dead_workers(w);
  resp.set_generation(generation_);
  resp.set_restore_clock(restore_clock_);
  resp.set_manifest_clock(manifest_clock_);
  if (Pipelined() && st.role() == WORKER) resp.set_link_epoch(links_[ReplicaOfWorker(st.id())].epoch);
  if (state_ == DONE || state_ == ABORTED) member->saw_job_end = true;
  return resp;
}

// A server's last norm, as its heartbeat repeats it: the round a scheduler
// that took the job over never heard of from this server (its answer came
// from the old one) completes. Otherwise a repeat, ignored.
void JobCoordinator::AddReportedNorm(const NodeStatus& st) {
  if (!st.has_last_norm_clock() || st.last_norm_generation() != generation_ || rolling_back_ ||
      state_ != RUNNING_JOB) {
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
      st.generation() != generation_ || rolling_back_ || state_ != RUNNING_JOB ||
      st.clock() <= clocks_.clock(w) || st.clock() > total_clocks_) {
    return;
  }
  if (clocks_.CatchUp(w, st.clock())) {
    Trace("clock", w, st.clock());
    WakeHeld();
  }
}

void JobCoordinator::Paused(absl::Duration gap, absl::Time now) {
  spdlog::warn("the scheduler did not run for {}; its members' silence then does not count",
               absl::FormatDuration(absl::Trunc(gap, absl::Milliseconds(100))));
  for (std::vector<MemberRecord>* list : {&members_.servers(), &members_.workers()}) {
    for (MemberRecord& m : *list) m.last_seen = std::min(now, m.last_seen + gap);
  }
}

void JobCoordinator::Tick(absl::Time now) {
  if (state_ == DONE || state_ == ABORTED) return;
  for (std::vector<MemberRecord>* list : {&members_.servers(), &members_.workers()}) {
    for (MemberRecord& m : *list) {
      if (Gone(m.status.state()) || now - m.last_seen <= policy_.heartbeat_timeout) continue;
      DeclareDead(m, now);
    }
  }
  CheckReplacementTimeouts(now);
}

void JobCoordinator::DeclareDead(MemberRecord& m, absl::Time now) {
  const absl::Duration silent = now - m.last_seen;
  const std::string why = absl::StrCat(
      "no heartbeat for ", absl::FormatDuration(absl::Trunc(silent, absl::Milliseconds(100))),
      " (--heartbeat_timeout_ms=", absl::ToInt64Milliseconds(policy_.heartbeat_timeout), ")");
  m.status.set_state(DEAD);
  m.status.set_message(why);
  m.status.set_declared_dead_unix_ms(absl::ToUnixMillis(now));
  ++deaths_;
  spdlog::error("{} {} at {} declared dead: {}", RoleName(m.role), m.id, m.address, why);
  if (m.role == SERVER && state_ == RUNNING_JOB && job_.checkpoint_every() > 0) {
    BeginRollback(absl::StrCat("server ", m.id, " at ", m.address, " declared dead: ", why), now);
    return;
  }
  if (m.role == WORKER && state_ == RUNNING_JOB && KeepsPlace(WORKER)) {
    spdlog::warn("waiting for worker {} to come back or be replaced (ps_worker --rank={})", m.id,
                 m.id);
    if (Pipelined()) {
      BeginRestart(ReplicaOfWorker(m.id), absl::StrCat("worker ", m.id, " declared dead: ", why),
                   now);
    }
    return;
  }
  if (m.role == WORKER &&
      TakeReplicaOut(m.id, absl::StrCat("worker ", m.id, " declared dead: ", why), now)) {
    return;
  }
  int live = 0;
  for (const MemberRecord& w : members_.workers()) live += w.status.state() != DEAD;
  if (m.role == WORKER && policy_.on_worker_failure == WorkerFailure::kShrink &&
      state_ == RUNNING_JOB && live > 0) {
    clocks_.Remove(m.id);
    dead_workers_.push_back(m.id);
    spdlog::warn("going on with {} workers", live);
    WakeHeld();
    MaybeDone(now);
    return;
  }
  EndJob(ABORTED,
         absl::StrCat(RoleName(m.role), " ", m.id, " at ", m.address, " declared dead: ", why),
         now);
}

// A dead member whose place was kept, neither back nor replaced in time.
void JobCoordinator::CheckReplacementTimeouts(absl::Time now) {
  for (const auto* list : {&members_.servers(), &members_.workers()}) {
    for (const MemberRecord& m : *list) {
      if (state_ != RUNNING_JOB || m.status.state() != DEAD || !KeepsPlace(m.role)) continue;
      const absl::Time dead_since = absl::FromUnixMillis(m.status.declared_dead_unix_ms());
      if (now - dead_since <= policy_.replacement_timeout) continue;
      EndJob(ABORTED,
             absl::StrCat(RoleName(m.role), " ", m.id,
                          " died and neither came back nor was replaced within ",
                          absl::FormatDuration(policy_.replacement_timeout), " (start one with ps_",
                          RoleName(m.role), " --rank=", m.id, ")"),
             now);
    }
  }
  for (int r = 0; r < static_cast<int>(links_.size()) && state_ == RUNNING_JOB; ++r) {
    if (!links_[r].restarting || now - links_[r].since <= policy_.replacement_timeout) continue;
    EndJob(ABORTED,
           absl::StrCat("replica ", r, "'s pipeline did not restart within ",
                        absl::FormatDuration(policy_.replacement_timeout), ": waiting for ",
                        absl::StrJoin(RestartPending(r), ", ")),
           now);
  }
}

bool JobCoordinator::KeepsPlace(Role role) const {
  return role == SERVER ? job_.checkpoint_every() > 0
                        : policy_.on_worker_failure == WorkerFailure::kWait;
}

void JobCoordinator::Revive(MemberRecord& m, absl::Time now) {
  spdlog::warn("{} {} at {} is back after it was declared dead; it rejoins", RoleName(m.role), m.id,
               m.address);
  m.status.set_state(RUNNING);
  m.status.set_message("came back after it was declared dead");
  m.last_seen = now;
  WakeHeld();
  if (m.role == WORKER && Pipelined()) MaybeEndRestart(ReplicaOfWorker(m.id), now);
}

bool JobCoordinator::TakeReplicaOut(int worker, const std::string& why, absl::Time now) {
  const int stages = std::max(1, job_.pipeline_stages());
  if (stages == 1 || policy_.on_worker_failure != WorkerFailure::kShrink || state_ != RUNNING_JOB) {
    return false;
  }
  const int replica = ReplicaOf(worker, stages);
  for (MemberRecord& w : members_.workers()) {
    if (ReplicaOf(w.id, stages) != replica || clocks_.removed(w.id)) continue;
    clocks_.Remove(w.id);
    dead_workers_.push_back(w.id);
    if (w.status.state() == FINISHED) continue;
    w.status.set_state(DEAD);
    w.status.set_message(absl::StrCat("replica ", replica, " is out: ", why));
    w.status.set_declared_dead_unix_ms(absl::ToUnixMillis(now));
  }
  int live = 0;
  for (int w = 0; w < clocks_.num_workers(); w += stages) live += !clocks_.removed(w);
  if (live == 0) {
    EndJob(ABORTED, absl::StrCat("every replica is out; the last: ", why), now);
    return true;
  }
  spdlog::warn("replica {} is out ({}); going on with {} replicas", replica, why, live);
  WakeHeld();
  MaybeDone(now);
  return true;
}

int64_t JobCoordinator::ClockNotStarted() const {
  // A worker learns of a request in the gate's answer to its report of the
  // clock after the fastest's (one clock later under SSP and ASP, whose
  // workers take that answer lazily), before it starts the clock after it.
  int64_t fastest = 0;
  for (int w = 0; w < clocks_.num_workers(); ++w) fastest = std::max(fastest, clocks_.clock(w));
  return fastest + 3;
}

absl::StatusOr<int64_t> JobCoordinator::ChangeConsistency(const ControlRequest& req,
                                                         absl::Time now) {
  const Consistency mode = req.consistency();
  if (mode != BSP && mode != SSP && mode != ASP) {
    return absl::InvalidArgumentError("consistency: expected BSP, SSP or ASP");
  }
  if (mode == SSP ? req.staleness() < 0 : req.staleness() != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("staleness ", req.staleness(), ": SSP takes a bound >= 0, BSP and ASP none"));
  }
  if (mode == BSP && job_.consistency() != BSP) {
    return absl::FailedPreconditionError(
        "a job started under SSP or ASP cannot go to BSP: its servers keep no round sums "
        "(start it under BSP to switch freely)");
  }
  if (job_.pipeline_stages() > 1 || (job_.consistency() == BSP && job_.optimizer().clip_norm() > 0)) {
    return absl::FailedPreconditionError(
        "pipelined jobs and BSP jobs with clip_norm keep the consistency they started with");
  }
  const int64_t clock = ClockNotStarted();
  if (clock >= total_clocks_) {
    return absl::FailedPreconditionError("the job ends before a change could take effect");
  }
  if (!schedule_.changes().empty() && schedule_.changes().back().clock() >= clock) {
    return absl::FailedPreconditionError(
        absl::StrCat("a change at clock ", schedule_.changes().back().clock(),
                     " is pending; try again in a few clocks"));
  }
  ConsistencyChange change;
  change.set_clock(clock);
  change.set_consistency(mode);
  change.set_staleness(req.staleness());
  change.set_unix_ms(absl::ToUnixMillis(now));
  std::vector<ConsistencyChange> changes = schedule_.changes();
  changes.push_back(change);
  schedule_.Set(std::move(changes));
  spdlog::info("consistency: {} (staleness {}) from clock {} on", Consistency_Name(mode),
               req.staleness(), clock);
  WakeHeld();  // a looser bound may open held gates
  return clock;
}

void JobCoordinator::MaybeDone(absl::Time now) {
  if (!members_.Complete()) return;
  bool all = true;
  for (const MemberRecord& w : members_.workers()) {
    all = all && (w.status.state() == FINISHED || w.status.state() == DEAD);
  }
  // A draining job ends once its checkpoint is named by the manifest.
  if (all && draining_ && manifest_clock_ < total_clocks_) return;
  if (all) EndJob(DONE, draining_ ? absl::StrCat("drained at clock ", total_clocks_) : "", now);
}

void JobCoordinator::Abort(const std::string& message, absl::Time now) {
  EndJob(ABORTED, message, now);
}

void JobCoordinator::EndJob(JobState state, const std::string& message, absl::Time now) {
  if (state_ == DONE || state_ == ABORTED) return;
  state_ = state;
  message_ = message;
  ended_at_ = now;
  if (state == DONE) {
    spdlog::info("job done: every worker finished {} clocks", total_clocks_);
  } else {
    spdlog::error("job aborted: {}", message);
  }
  WakeHeld();
}

// ---- Rollbacks and the manifest.

void JobCoordinator::BeginRollback(const std::string& reason, absl::Time now) {
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
  const int64_t to =
      job_.checkpoint_every() > 0
          ? std::max(manifest_clock_, catalog_->NewestCompleteSet(chunk_servers_, from))
          : 0;
  clocks_.Reset(to);
  norms_.Reset(to);
  restore_clock_ = to;
  // Every stage links anew; a restart under way is part of the rollback.
  for (ReplicaLinks& links : links_) {
    ++links.epoch;
    links.restarting = false;
  }
  for (PipelineRestart& r : restarts_) {
    if (r.done_unix_ms() != 0) continue;
    r.set_clock(to);
    r.set_done_unix_ms(absl::ToUnixMillis(now));
  }
  Rollback r;
  r.set_generation(generation_);
  r.set_reason(reason);
  r.set_from_clock(from);
  r.set_to_clock(to);
  r.set_begun_unix_ms(absl::ToUnixMillis(now));
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
  for (auto it = held_.begin(); it != held_.end();) {
    if (it->gate) {
      ++it;
      continue;
    }
    Release r;
    r.ticket = it->ticket;
    r.status = absl::FailedPreconditionError(
        absl::StrCat("the cluster rolled back (generation ", generation_, ")"));
    releases_.push_back(std::move(r));
    it = held_.erase(it);
  }
}

void JobCoordinator::MaybeEndRollback(absl::Time now) {
  if (!rolling_back_ || state_ != RUNNING_JOB) return;
  for (const MemberRecord& m : members_.servers()) {
    if (m.status.state() == DEAD || m.status.generation() != generation_) return;
  }
  rolling_back_ = false;
  rollbacks_.back().set_done_unix_ms(absl::ToUnixMillis(now));
  spdlog::warn("generation {}: every server restored the checkpoint of clock {}; training resumes",
               generation_, restore_clock_);
  WakeHeld();
}

std::optional<int64_t> JobCoordinator::TakeManifestToWrite() {
  if (job_.checkpoint_every() <= 0 || rolling_back_ || chunk_servers_.empty() ||
      manifest_in_flight_) {
    return std::nullopt;
  }
  int64_t complete = INT64_MAX;
  for (int s : chunk_servers_) {
    if (s >= static_cast<int>(members_.servers().size())) return std::nullopt;
    const NodeStatus& st = members_.servers()[s].status;
    if (st.generation() != generation_) return std::nullopt;
    complete = std::min(complete, st.checkpoint_clock());
  }
  if (complete <= manifest_clock_) return std::nullopt;
  manifest_in_flight_ = true;
  return complete;
}

void JobCoordinator::ManifestWritten(int64_t clock, const absl::Status& status,
                                     absl::Time now) {
  manifest_in_flight_ = false;
  if (status.ok()) {
    manifest_clock_ = std::max(manifest_clock_, clock);
    if (draining_) MaybeDone(now);
  } else if (!manifest_error_logged_) {
    spdlog::error("cannot write the manifest: {}", status.message());
    manifest_error_logged_ = true;
  }
}

absl::StatusOr<int64_t> JobCoordinator::Control(const ControlRequest& req, absl::Time now) {
  const ControlAction action = req.action();
  if (state_ != RUNNING_JOB) {
    return absl::FailedPreconditionError(
        absl::StrCat("the job is ", JobState_Name(state_), ", not running"));
  }
  if (action != STOP && clocks_.Resyncing()) {
    return absl::UnavailableError(
        "the scheduler took the job over and does not know every worker's clock yet; try again "
        "in a moment");
  }
  if (action == STOP) {
    const int64_t clock = clocks_.SlowestClock();
    EndJob(ABORTED, absl::StrCat("stopped by an operator (psctl stop) at clock ", clock), now);
    return clock;
  }
  if (action == SET_CONSISTENCY) return ChangeConsistency(req, now);
  if (action != CHECKPOINT && action != DRAIN) {
    return absl::InvalidArgumentError("expected CHECKPOINT, DRAIN, STOP or SET_CONSISTENCY");
  }
  if (job_.checkpoint_every() <= 0 || job_.checkpoint_dir().empty()) {
    return absl::FailedPreconditionError(
        "the job writes no checkpoints: start it with --checkpoint_dir and --checkpoint_every");
  }
  if (draining_) {
    return absl::FailedPreconditionError(
        absl::StrCat("the job is already draining to clock ", total_clocks_));
  }
  const int64_t clock = std::min(total_clocks_, ClockNotStarted());
  checkpoint_asked_ = std::max(checkpoint_asked_, clock);
  if (action == DRAIN) {
    draining_ = true;
    total_clocks_ = clock;
  }
  spdlog::info("{}: a checkpoint of clock {} asked for{}", ControlAction_Name(action), clock,
               action == DRAIN ? "; the job ends there" : "");
  return clock;
}

// ---- The gate and the norm rounds.

absl::Status JobCoordinator::RoomToHold(bool gate, int member) const {
  int held = 0;
  for (const Held& h : held_) held += h.gate == gate && h.member == member;
  if (held < kMaxHeldPerMember) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat(gate ? "worker " : "server ", member, " already has ", held,
                   gate ? " gate calls waiting" : " norm calls waiting"));
}

bool JobCoordinator::GateOpen(int64_t clock) const {
  return state_ == RUNNING_JOB && !rolling_back_ &&
         clocks_.MayStart(clock, schedule_.StalenessAt(clock));
}

void JobCoordinator::FillGate(int worker, int64_t clock, AdvanceClockResponse* resp) {
  resp->set_slowest_clock(clocks_.SlowestClock());
  *resp->mutable_cluster() = members_.View();
  resp->set_job_state(state_);
  for (int w = 0; w < clocks_.num_workers(); ++w) {
    if (!clocks_.removed(w)) resp->add_live_workers(w);
  }
  resp->set_generation(generation_);
  resp->set_resume_clock(clocks_.clock(worker));
  resp->set_end_clock(draining_ ? total_clocks_ : 0);
  resp->set_checkpoint_clock(checkpoint_asked_);
  for (const ConsistencyChange& c : schedule_.changes()) *resp->add_consistency_changes() = c;
  if (Pipelined()) resp->set_link_epoch(links_[ReplicaOfWorker(worker)].epoch);
  if (clock < total_clocks_) Trace("start", worker, clock);
}

absl::Status JobCoordinator::AdvanceClock(const AdvanceClockRequest& req, Ticket ticket,
                                          absl::Time now, AdvanceClockResponse* resp,
                                          bool* parked) {
  *parked = false;
  ASSIGN_OR_RETURN(MemberRecord * m, members_.Find(WORKER, req.worker_id(), req.incarnation()));
  if (m->status.state() == DEAD && state_ == RUNNING_JOB && KeepsPlace(WORKER)) Revive(*m, now);
  if (m->status.state() == DEAD) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", req.worker_id(), " was declared dead: ", m->status.message()));
  }
  if (req.clock() < 0 || req.clock() > total_clocks_) {
    return absl::InvalidArgumentError(
        absl::StrCat("clock ", req.clock(), " outside [0, ", total_clocks_, "]"));
  }
  if (req.generation() < 0 || req.generation() > generation_) {
    return absl::InvalidArgumentError(
        absl::StrCat("generation ", req.generation(), " outside [0, ", generation_, "]"));
  }
  if (req.generation() < generation_) {
    return GateOfOlderGeneration(req, ticket, now, resp, parked);
  }
  const int64_t before = clocks_.clock(req.worker_id());
  RETURN_IF_ERROR(clocks_.Advance(req.worker_id(), req.clock()));
  if (clocks_.clock(req.worker_id()) != before) {
    Trace("clock", req.worker_id(), req.clock());
    m->status.set_clock(req.clock());
    if (m->status.state() == REGISTERED) m->status.set_state(RUNNING);
    WakeHeld();
  }
  if (state_ == ABORTED) return absl::AbortedError(absl::StrCat("job aborted: ", message_));
  ASSIGN_OR_RETURN(const bool restart, GateOfRestart(req, ticket, now, resp, parked));
  if (restart) return absl::OkStatus();
  // A worker that finished every clock need not wait for anyone.
  if (req.clock() >= total_clocks_ || GateOpen(req.clock())) {
    FillGate(req.worker_id(), req.clock(), resp);
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(RoomToHold(/*gate=*/true, req.worker_id()));
  held_.push_back(Held{ticket, /*gate=*/true, req.worker_id(), req.clock(), now, false});
  *parked = true;
  return absl::OkStatus();
}

// The cluster rolled back since this worker's generation: its clock is the
// table's now. It is told so once the servers have restored.
absl::Status JobCoordinator::GateOfOlderGeneration(const AdvanceClockRequest& req, Ticket ticket,
                                                   absl::Time now, AdvanceClockResponse* resp,
                                                   bool* parked) {
  if (state_ == ABORTED) return absl::AbortedError(absl::StrCat("job aborted: ", message_));
  if (!rolling_back_) {
    FillGate(req.worker_id(), clocks_.clock(req.worker_id()), resp);
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(RoomToHold(/*gate=*/true, req.worker_id()));
  held_.push_back(Held{ticket, /*gate=*/true, req.worker_id(), req.clock(), now, true});
  *parked = true;
  return absl::OkStatus();
}

absl::Status JobCoordinator::ReduceNorm(const ReduceNormRequest& req, Ticket ticket, absl::Time now,
                                        double* sum_squares, bool* parked) {
  *parked = false;
  RETURN_IF_ERROR(members_.Find(SERVER, req.server_id(), req.incarnation()).status());
  if (state_ == ABORTED || state_ == DONE) {
    return absl::AbortedError(absl::StrCat("job ended: ", message_));
  }
  if (req.generation() != generation_ || rolling_back_) {
    return absl::FailedPreconditionError(
        absl::StrCat("a norm of generation ", req.generation(), "; the cluster is in generation ",
                     generation_, rolling_back_ ? ", restoring" : ""));
  }
  RETURN_IF_ERROR(norms_.Add(req.server_id(), req.clock(), req.sum_squares()));
  if (std::optional<double> total = norms_.Total(req.clock())) {
    *sum_squares = *total;
    WakeHeld();
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(RoomToHold(/*gate=*/false, req.server_id()));
  held_.push_back(Held{ticket, /*gate=*/false, req.server_id(), req.clock(), now, false});
  *parked = true;
  return absl::OkStatus();
}

void JobCoordinator::WakeHeld() {
  for (auto it = held_.begin(); it != held_.end();) {
    Release r;
    r.ticket = it->ticket;
    if (state_ == ABORTED || state_ == DONE) {
      r.status = absl::AbortedError(absl::StrCat("job ended: ", message_));
    } else if (!it->gate) {
      const std::optional<double> total = norms_.Total(it->clock);
      if (!total.has_value()) {
        ++it;
        continue;
      }
      r.sum_squares = *total;
    } else if (Pipelined() && links_[ReplicaOfWorker(it->member)].restarting) {
      ++it;  // answered when its replica's restart ends
      continue;
    } else if (it->stale && !rolling_back_) {
      FillGate(it->member, clocks_.clock(it->member), &r.gate);
    } else if (!it->stale && GateOpen(it->clock)) {
      FillGate(it->member, it->clock, &r.gate);
    } else {
      ++it;
      continue;
    }
    releases_.push_back(std::move(r));
    it = held_.erase(it);
  }
}

void JobCoordinator::Forget(Ticket ticket) {
  held_.erase(std::remove_if(held_.begin(), held_.end(),
                             [ticket](const Held& h) { return h.ticket == ticket; }),
              held_.end());
}

std::vector<Release> JobCoordinator::TakeReleases() { return std::exchange(releases_, {}); }

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
  out.set_consistency(schedule_.Latest().consistency());
  out.set_staleness(schedule_.Latest().staleness());
  for (const ConsistencyChange& c : schedule_.changes()) *out.add_consistency_changes() = c;
  out.set_total_clocks(total_clocks_);
  out.set_start_clock(policy_.start_clock);
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
  out.set_generation(generation_);
  out.set_deaths(deaths_);
  out.set_checkpoint_asked(checkpoint_asked_);
  out.set_draining(draining_);
  out.set_manifest_clock(manifest_clock_);
  for (int w = 0; w < clocks_.num_workers(); ++w) {
    out.add_worker_clocks(clocks_.removed(w) ? -1 : clocks_.clock(w));
  }
  *out.mutable_job() = job_;
  for (const Rollback& r : rollbacks_) *out.add_rollbacks() = r;
  for (const PipelineRestart& r : restarts_) *out.add_pipeline_restarts() = r;
  out.set_scheduler_takeovers(takeovers_);
  out.set_taken_over_unix_ms(takeovers_ > 0 ? absl::ToUnixMillis(taken_over_) : 0);
  AddWaits(me);
  for (const auto* list : {&members_.servers(), &members_.workers()}) {
    for (const MemberRecord& m : *list) *out.add_members() = m.status;
  }
  return out;
}

// What the scheduler waits on: a rollback, then held norms, then held gates.
void JobCoordinator::AddWaits(NodeStatus* me) const {
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
  for (int r = 0; r < static_cast<int>(links_.size()); ++r) {
    if (!links_[r].restarting) continue;
    Wait* w = me->add_waits();
    w->set_what(absl::StrCat("replica ", r, "'s pipeline restart (link epoch ", links_[r].epoch,
                             "): waiting for ", absl::StrJoin(RestartPending(r), ", ")));
    w->set_since_unix_ms(absl::ToUnixMillis(links_[r].since));
  }
  for (bool gates : {false, true}) {
    for (const Held& h : held_) {
      if (h.gate != gates) continue;
      Wait* w = me->add_waits();
      w->set_what(gates ? absl::StrCat("worker ", h.member, " at the gate of clock ", h.clock,
                                       " (the slowest worker has finished ", clocks_.SlowestClock(),
                                       " clocks)")
                        : absl::StrCat("server ", h.member, "'s norm of BSP round ", h.clock,
                                       ", waiting for the other servers' norms"));
      w->set_since_unix_ms(absl::ToUnixMillis(h.since));
    }
  }
}

// ---- Taking over.

namespace {

SchedulerMember ToState(const MemberRecord& m) {
  SchedulerMember out;
  out.set_role(m.role);
  out.set_id(m.id);
  out.set_address(m.address);
  out.set_incarnation(m.incarnation);
  *out.mutable_status() = m.status;
  out.set_saw_job_end(m.saw_job_end);
  return out;
}

MemberRecord FromState(const SchedulerMember& m, absl::Time now) {
  MemberRecord out;
  out.role = m.role();
  out.id = m.id();
  out.address = m.address();
  out.incarnation = m.incarnation();
  out.status = m.status();
  out.saw_job_end = m.saw_job_end();
  out.last_seen = now;  // a heartbeat timeout from the takeover to be heard
  return out;
}

}  // namespace

SchedulerState JobCoordinator::Snapshot() const {
  SchedulerState s;
  s.set_format("pstrain scheduler state");
  *s.mutable_job() = job_;
  s.set_job_state(state_);
  s.set_message(message_);
  for (const MemberRecord& m : members_.servers()) *s.add_servers() = ToState(m);
  for (const MemberRecord& m : members_.workers()) *s.add_workers() = ToState(m);
  for (int w = 0; w < clocks_.num_workers(); ++w) {
    s.add_worker_clocks(clocks_.clock(w));
    s.add_worker_removed(clocks_.removed(w));
  }
  for (int32_t w : dead_workers_) s.add_dead_workers(w);
  s.set_generation(generation_);
  s.set_restore_clock(restore_clock_);
  s.set_rolling_back(rolling_back_);
  for (const Rollback& r : rollbacks_) *s.add_rollbacks() = r;
  s.set_deaths(deaths_);
  s.set_checkpoint_asked(checkpoint_asked_);
  for (const ConsistencyChange& c : schedule_.changes()) *s.add_consistency_changes() = c;
  s.set_draining(draining_);
  s.set_total_clocks(total_clocks_);
  for (const ReplicaLinks& l : links_) {
    s.add_link_epochs(l.epoch);
    s.add_link_restarting(l.restarting);
    s.add_link_since_unix_ms(absl::ToUnixMillis(l.since));
  }
  for (const PipelineRestart& r : restarts_) *s.add_pipeline_restarts() = r;
  s.set_manifest_clock(manifest_clock_);
  s.set_start_clock(policy_.start_clock);
  s.set_scheduler_takeovers(takeovers_);
  s.set_taken_over_unix_ms(takeovers_ > 0 ? absl::ToUnixMillis(taken_over_) : 0);
  s.set_on_worker_failure(policy_.on_worker_failure == WorkerFailure::kShrink  ? "shrink"
                          : policy_.on_worker_failure == WorkerFailure::kAbort ? "abort"
                                                                               : "wait");
  return s;
}

std::string JobCoordinator::DurableKey() const {
  std::string key = absl::StrCat(state_, "|", generation_, "|", restore_clock_, "|",
                                 rolling_back_, "|", checkpoint_asked_, "|", draining_, "|",
                                 total_clocks_, "|", manifest_clock_, "|",
                                 schedule_.changes().size(), "|", dead_workers_.size(), "|",
                                 restarts_.size(), "|", deaths_, "|");
  for (const auto* list : {&members_.servers(), &members_.workers()}) {
    for (const MemberRecord& m : *list) {
      absl::StrAppend(&key, m.address, "/", m.incarnation, "/", m.status.state(), "/",
                      m.saw_job_end, ";");
    }
  }
  for (int w = 0; w < clocks_.num_workers(); ++w) absl::StrAppend(&key, clocks_.removed(w));
  for (const ReplicaLinks& l : links_) absl::StrAppend(&key, "|", l.epoch, l.restarting);
  return key;
}

namespace {

// The values of a state file in range for its job (a file edited by hand or
// damaged must not steer the job): clocks within [0, the job's clocks],
// worker ids within the job, counters not negative.
absl::Status CheckStateValues(const SchedulerState& s, const JobSpec& job) {
  const int64_t clocks = TotalClocks(job);
  auto clock_ok = [clocks](int64_t c) { return c >= 0 && c <= clocks; };
  auto bad = [](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(what, " out of range for the job"));
  };
  if (!clock_ok(s.total_clocks())) return bad(absl::StrCat("total_clocks ", s.total_clocks()));
  for (int64_t c : s.worker_clocks()) {
    if (!clock_ok(c) || c > s.total_clocks()) return bad(absl::StrCat("worker clock ", c));
  }
  for (int64_t c : {s.restore_clock(), s.manifest_clock(), s.start_clock()}) {
    if (!clock_ok(c)) return bad(absl::StrCat("clock ", c));
  }
  for (int w : s.dead_workers()) {
    if (w < 0 || w >= job.num_workers()) return bad(absl::StrCat("dead worker ", w));
  }
  // (Operator requests may name a clock past the end: asked near it.)
  for (const ConsistencyChange& c : s.consistency_changes()) {
    if (c.clock() < 0) return bad(absl::StrCat("consistency change at clock ", c.clock()));
  }
  for (int64_t n : {s.generation(), s.deaths(), s.scheduler_takeovers(), s.checkpoint_asked()}) {
    if (n < 0) return bad(absl::StrCat("count ", n));
  }
  for (int64_t e : s.link_epochs()) {
    if (e < 0) return bad(absl::StrCat("link epoch ", e));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status JobCoordinator::TakeOver(const SchedulerState& s, absl::Time now) {
  RETURN_IF_ERROR(CheckStateValues(s, job_));
  const int replicas = static_cast<int>(links_.size());
  if (s.servers_size() > job_.num_servers() || s.workers_size() > job_.num_workers() ||
      s.worker_clocks_size() != job_.num_workers() ||
      s.worker_removed_size() != job_.num_workers() || s.link_epochs_size() != replicas ||
      s.link_restarting_size() != replicas || s.link_since_unix_ms_size() != replicas ||
      (s.rolling_back() && s.rollbacks().empty())) {
    return absl::InvalidArgumentError("the state does not fit the job's servers, workers or stages");
  }
  for (const auto* list : {&s.servers(), &s.workers()}) {
    for (int i = 0; i < list->size(); ++i) {
      if ((*list)[i].id() != i) return absl::InvalidArgumentError("members out of order");
    }
  }
  for (const SchedulerMember& m : s.servers()) members_.servers().push_back(FromState(m, now));
  for (const SchedulerMember& m : s.workers()) members_.workers().push_back(FromState(m, now));
  clocks_.Restore(std::vector<int64_t>(s.worker_clocks().begin(), s.worker_clocks().end()),
                  std::vector<bool>(s.worker_removed().begin(), s.worker_removed().end()));
  state_ = s.job_state();
  message_ = s.message();
  if (state_ == DONE || state_ == ABORTED) ended_at_ = now;
  dead_workers_.assign(s.dead_workers().begin(), s.dead_workers().end());
  generation_ = s.generation();
  restore_clock_ = s.restore_clock();
  rolling_back_ = s.rolling_back();
  rollbacks_.assign(s.rollbacks().begin(), s.rollbacks().end());
  deaths_ = s.deaths();
  checkpoint_asked_ = s.checkpoint_asked();
  schedule_.Set({s.consistency_changes().begin(), s.consistency_changes().end()});
  draining_ = s.draining();
  total_clocks_ = s.total_clocks();
  for (int r = 0; r < replicas; ++r) {
    links_[r] = ReplicaLinks{s.link_epochs(r), s.link_restarting(r),
                             absl::FromUnixMillis(s.link_since_unix_ms(r))};
  }
  restarts_.assign(s.pipeline_restarts().begin(), s.pipeline_restarts().end());
  manifest_clock_ = std::max(manifest_clock_, s.manifest_clock());
  // Rounds from the generation's start are reported again (or repeated by
  // the servers' heartbeats).
  norms_.Reset(restore_clock_);
  takeovers_ = s.scheduler_takeovers() + 1;
  taken_over_ = now;
  spdlog::warn(
      "took the job over from the state file: {}, generation {}, clocks {}..{} as last written; "
      "{} servers and {} workers to hear from again",
      JobState_Name(state_), generation_, clocks_.SlowestClock(),
      *std::max_element(s.worker_clocks().begin(), s.worker_clocks().end()), s.servers_size(),
      s.workers_size());
  return absl::OkStatus();
}

// ---- Pipeline restarts.

int JobCoordinator::ReplicaOfWorker(int worker) const {
  return ReplicaOf(worker, job_.pipeline_stages());
}

absl::StatusOr<bool> JobCoordinator::GateOfRestart(const AdvanceClockRequest& req, Ticket ticket,
                                                   absl::Time now, AdvanceClockResponse* resp,
                                                   bool* parked) {
  if (!Pipelined()) return false;
  const int worker = req.worker_id();
  const int replica = ReplicaOfWorker(worker);
  ReplicaLinks& links = links_[replica];
  const bool behind = req.link_epoch() < links.epoch;
  if (!req.relink() && !behind) return false;
  if (req.relink() && !behind && !links.restarting) {
    if (!KeepsPlace(WORKER)) {
      return absl::FailedPreconditionError(
          absl::StrCat("worker ", worker,
                       "'s pipeline links broke; a replica's pipeline restarts only under "
                       "--on_worker_failure=wait"));
    }
    BeginRestart(replica, absl::StrCat("worker ", worker, "'s pipeline links broke"), now);
  }
  if (!links.restarting) {  // the restart it is behind has ended
    FillGate(worker, clocks_.clock(worker), resp);
    return true;
  }
  RETURN_IF_ERROR(RoomToHold(/*gate=*/true, worker));
  held_.push_back(Held{ticket, /*gate=*/true, worker, req.clock(), now, /*stale=*/false});
  *parked = true;
  MaybeEndRestart(replica, now);
  return true;
}

void JobCoordinator::BeginRestart(int replica, const std::string& why, absl::Time now) {
  ReplicaLinks& links = links_[replica];
  if (links.restarting) return;
  ++links.epoch;
  links.restarting = true;
  links.since = now;
  PipelineRestart r;
  r.set_replica(replica);
  r.set_link_epoch(links.epoch);
  r.set_reason(why);
  r.set_begun_unix_ms(absl::ToUnixMillis(now));
  restarts_.push_back(r);
  spdlog::warn(
      "replica {}'s pipeline restarts ({}): its stages go back to its slowest clock and link anew "
      "(link epoch {})",
      replica, why, links.epoch);
}

std::vector<std::string> JobCoordinator::RestartPending(int replica) const {
  const int stages = job_.pipeline_stages();
  std::vector<std::string> pending;
  for (int w = replica * stages; w < (replica + 1) * stages; ++w) {
    if (w >= static_cast<int>(members_.workers().size())) {
      pending.push_back(absl::StrCat("worker ", w, " to register"));
      continue;
    }
    const MemberRecord& m = members_.workers()[w];
    bool held = false;
    for (const Held& h : held_) held = held || (h.gate && !h.stale && h.member == w);
    if (m.status.state() == DEAD) {
      pending.push_back(absl::StrCat("worker ", w, " to come back or a replacement (ps_worker --rank=",
                                     w, ")"));
    } else if (!held) {
      pending.push_back(absl::StrCat("worker ", w, " (stage ", StageOf(w, stages), ") at the gate"));
    }
  }
  return pending;
}

void JobCoordinator::MaybeEndRestart(int replica, absl::Time now) {
  ReplicaLinks& links = links_[replica];
  if (!links.restarting || state_ != RUNNING_JOB || rolling_back_ ||
      !RestartPending(replica).empty()) {
    return;
  }
  const int stages = job_.pipeline_stages();
  int64_t clock = total_clocks_;
  for (int w = replica * stages; w < (replica + 1) * stages; ++w) {
    clock = std::min(clock, clocks_.clock(w));
  }
  for (int w = replica * stages; w < (replica + 1) * stages; ++w) {
    clocks_.Rewind(w, clock);
    Trace("restart", w, clock);
  }
  links.restarting = false;
  for (PipelineRestart& r : restarts_) {
    if (r.replica() != replica || r.link_epoch() != links.epoch) continue;
    r.set_clock(clock);
    r.set_done_unix_ms(absl::ToUnixMillis(now));
  }
  spdlog::warn("replica {} restarts clock {} on links of epoch {}", replica, clock, links.epoch);
  for (auto it = held_.begin(); it != held_.end();) {
    if (!it->gate || it->stale || ReplicaOfWorker(it->member) != replica) {
      ++it;
      continue;
    }
    Release r;
    r.ticket = it->ticket;
    FillGate(it->member, clock, &r.gate);
    releases_.push_back(std::move(r));
    it = held_.erase(it);
  }
}

}  // namespace pstrain
