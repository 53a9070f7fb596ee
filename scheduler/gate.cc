#include "scheduler/gate.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pstrain {

Gate::Gate(const JobPhase* phase, std::vector<bool> reporters, int64_t total_clocks,
           ClockTable* clocks, const Membership* members, const Rollbacks* rollbacks,
           const OperatorControl* control, PipelineRestarts* pipelines,
           std::function<void(const TraceEvent&)> trace)
    : phase_(phase),
      clocks_(clocks),
      members_(members),
      rollbacks_(rollbacks),
      control_(control),
      pipelines_(pipelines),
      trace_(std::move(trace)),
      norms_(std::move(reporters), total_clocks) {
  norms_.Reset(rollbacks->restore_clock());
}

absl::StatusOr<bool> Gate::Advance(int worker, int64_t clock) {
  const int64_t before = clocks_->clock(worker);
  RETURN_IF_ERROR(clocks_->Advance(worker, clock));
  if (clocks_->clock(worker) == before) return false;
  Trace("clock", worker, clock);
  Wake();
  return true;
}

absl::Status Gate::Ask(const AdvanceClockRequest& req, Ticket ticket, absl::Time now,
                       AdvanceClockResponse* resp, bool* parked) {
  ASSIGN_OR_RETURN(const bool restart, AskOfRestart(req, ticket, now, resp, parked));
  if (restart) return absl::OkStatus();
  // A worker that finished every clock need not wait for anyone.
  if (req.clock() >= control_->total_clocks() || Open(req.clock())) {
    Fill(req.worker_id(), req.clock(), resp);
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(held_.Hold(HeldCall{ticket, /*gate=*/true, req.worker_id(), req.clock(), now}));
  *parked = true;
  return absl::OkStatus();
}

// The cluster rolled back since this worker's generation: its clock is the
// table's now. It is told so once the servers have restored.
absl::Status Gate::AskOfOlderGeneration(const AdvanceClockRequest& req, Ticket ticket,
                                        absl::Time now, AdvanceClockResponse* resp, bool* parked) {
  if (!rollbacks_->rolling_back()) {
    Fill(req.worker_id(), clocks_->clock(req.worker_id()), resp);
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(held_.Hold(
      HeldCall{ticket, /*gate=*/true, req.worker_id(), req.clock(), now, /*stale=*/true}));
  *parked = true;
  return absl::OkStatus();
}

absl::StatusOr<bool> Gate::AskOfRestart(const AdvanceClockRequest& req, Ticket ticket,
                                        absl::Time now, AdvanceClockResponse* resp, bool* parked) {
  if (!pipelines_->pipelined()) return false;
  const int worker = req.worker_id();
  const int replica = pipelines_->ReplicaOf(worker);
  if (!req.relink() && req.link_generation() >= pipelines_->link_generation(replica)) return false;
  if (!pipelines_->restarting(replica)) {  // the restart it is behind has ended
    Fill(worker, clocks_->clock(worker), resp);
    return true;
  }
  RETURN_IF_ERROR(held_.Hold(HeldCall{ticket, /*gate=*/true, worker, req.clock(), now}));
  *parked = true;
  MaybeEndRestart(replica, now);
  return true;
}

absl::Status Gate::ReduceNorm(const ReduceNormRequest& req, Ticket ticket, absl::Time now,
                              double* sum_squares, bool* parked) {
  if (phase_->Ended()) return absl::AbortedError(absl::StrCat("job ended: ", phase_->message));
  const int64_t generation = rollbacks_->generation();
  if (req.generation() != generation || rollbacks_->rolling_back()) {
    return absl::FailedPreconditionError(
        absl::StrCat("a norm of generation ", req.generation(), "; the cluster is in generation ",
                     generation, rollbacks_->rolling_back() ? ", restoring" : ""));
  }
  RETURN_IF_ERROR(norms_.Add(req.server_id(), req.clock(), req.sum_squares()));
  if (std::optional<double> total = norms_.Total(req.clock())) {
    *sum_squares = *total;
    Wake();
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(held_.Hold(HeldCall{ticket, /*gate=*/false, req.server_id(), req.clock(), now}));
  *parked = true;
  return absl::OkStatus();
}

bool Gate::Open(int64_t clock) const {
  return phase_->Running() && !rollbacks_->rolling_back() &&
         (held_from_ < 0 || clock < held_from_) &&
         clocks_->MayStart(clock, control_->schedule().StalenessAt(clock));
}

void Gate::Fill(int worker, int64_t clock, AdvanceClockResponse* resp) {
  resp->set_slowest_clock(clocks_->SlowestClock());
  *resp->mutable_cluster() = members_->View();
  if (placement_.version() > 1) *resp->mutable_cluster()->mutable_placement() = placement_;
  resp->set_job_state(phase_->state);
  for (int w = 0; w < clocks_->num_workers(); ++w) {
    if (!clocks_->removed(w)) resp->add_live_workers(w);
  }
  resp->set_generation(rollbacks_->generation());
  resp->set_resume_clock(clocks_->clock(worker));
  resp->set_end_clock(control_->draining() ? control_->total_clocks() : 0);
  resp->set_checkpoint_clock(control_->checkpoint_asked());
  for (const ConsistencyChange& c : control_->schedule().changes()) {
    *resp->add_consistency_changes() = c;
  }
  if (pipelines_->pipelined()) {
    resp->set_link_generation(pipelines_->link_generation(pipelines_->ReplicaOf(worker)));
  }
  if (clock < control_->total_clocks()) Trace("start", worker, clock);
}

void Gate::Wake() {
  held_.Answer([this](const HeldCall& h) { return Answer(h); });
}

std::optional<Release> Gate::Answer(const HeldCall& h) {
  Release r;
  if (phase_->Ended()) {
    r.status = absl::AbortedError(absl::StrCat("job ended: ", phase_->message));
  } else if (!h.gate) {
    const std::optional<double> total = norms_.Total(h.clock);
    if (!total.has_value()) return std::nullopt;
    r.sum_squares = *total;
  } else if (pipelines_->pipelined() && pipelines_->restarting(pipelines_->ReplicaOf(h.member))) {
    return std::nullopt;  // answered when its replica's restart ends
  } else if (h.stale && !rollbacks_->rolling_back()) {
    Fill(h.member, clocks_->clock(h.member), &r.gate);
  } else if (!h.stale && Open(h.clock)) {
    Fill(h.member, h.clock, &r.gate);
  } else {
    return std::nullopt;
  }
  return r;
}

void Gate::MaybeEndRestart(int replica, absl::Time now) {
  if (!pipelines_->restarting(replica) || !phase_->Running() || rollbacks_->rolling_back() ||
      !pipelines_->Pending(replica, *members_, [this](int w) { return AtGate(w); }).empty()) {
    return;
  }
  const int first = pipelines_->first_worker(replica);
  const int end = first + pipelines_->stages();
  int64_t clock = control_->total_clocks();
  for (int w = first; w < end; ++w) clock = std::min(clock, clocks_->clock(w));
  for (int w = first; w < end; ++w) {
    clocks_->Rewind(w, clock);
    Trace("restart", w, clock);
  }
  pipelines_->End(replica, clock, now);
  held_.Answer([&](const HeldCall& h) -> std::optional<Release> {
    if (!h.gate || h.stale || pipelines_->ReplicaOf(h.member) != replica) return std::nullopt;
    Release r;
    Fill(h.member, clock, &r.gate);
    return r;
  });
}

void Gate::RolledBack(int64_t clock) {
  clocks_->Reset(clock);
  norms_.Reset(clock);
  held_.Answer([this](const HeldCall& h) -> std::optional<Release> {
    if (h.gate) return std::nullopt;
    Release r;
    r.status = absl::FailedPreconditionError(
        absl::StrCat("the cluster rolled back (generation ", rollbacks_->generation(), ")"));
    return r;
  });
}

void Gate::TakenOver() { norms_.Reset(rollbacks_->restore_clock()); }

void Gate::AddReportedNorm(const MemberStatus& st) {
  if (!st.server().has_last_norm()) return;
  const NormReport& norm = st.server().last_norm();
  if (norm.generation() != rollbacks_->generation() || rollbacks_->rolling_back() ||
      !phase_->Running()) {
    return;
  }
  if (norms_.Add(st.id(), norm.clock(), norm.sum_squares()).ok() &&
      norms_.Total(norm.clock()).has_value()) {
    Wake();
  }
}

// (The gate only bounds staleness; the servers' read guarantee holds
// whatever the table says.)
void Gate::CatchUpClock(const MemberStatus& st) {
  const int w = st.id();
  if (w < 0 || w >= clocks_->num_workers() || !clocks_->may_jump(w) || clocks_->removed(w) ||
      st.generation() != rollbacks_->generation() || rollbacks_->rolling_back() ||
      !phase_->Running() || st.clock() <= clocks_->clock(w) ||
      st.clock() > control_->total_clocks()) {
    return;
  }
  if (clocks_->CatchUp(w, st.clock())) {
    Trace("clock", w, st.clock());
    Wake();
  }
}

void Gate::Trace(const char* event, int worker, int64_t clock) {
  if (!trace_) return;
  TraceEvent e;
  e.set_event(event);
  e.set_worker(worker);
  e.set_clock(clock);
  trace_(e);
}

}  // namespace pstrain
