// The gate and the BSP norm rounds: a worker's clock reports and its asks
// to start a clock, a server's norm reports -- answered now, or held
// (HeldCalls) until the clock table, a rollback's end, a pipeline
// replica's restart or a norm round lets them go, and told then what the
// cluster looks like (AdvanceClockResponse). The gate reads the job's
// state and its parts (rollbacks, operator control, pipeline restarts);
// the events that change those are JobCoordinator's, which calls Wake
// after them. No I/O but logs and the trace.
//
// Not thread-safe: the coordinator's owner guards it.
#ifndef PSTRAIN_SCHEDULER_GATE_H_
#define PSTRAIN_SCHEDULER_GATE_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/gate.pb.h"
#include "proto/member.pb.h"
#include "proto/status.pb.h"
#include "proto/tensor.pb.h"
#include "scheduler/clock_table.h"
#include "scheduler/held_calls.h"
#include "scheduler/membership.h"
#include "scheduler/norm_rounds.h"
#include "scheduler/operator_control.h"
#include "scheduler/pipeline_restarts.h"
#include "scheduler/rollbacks.h"

namespace pstrain {

// The job's state, as JobCoordinator keeps it and the gate reads it.
struct JobPhase {
  JobState state = WAITING;
  std::string message;  // why it ended

  bool Running() const { return state == RUNNING_JOB; }
  bool Ended() const { return state == DONE || state == ABORTED; }
};

class Gate {
 public:
  // Every pointer (the coordinator's) must outlive this. `reporters[s]`:
  // whether server s reports norms (it holds chunks). `trace` (may be
  // empty) receives "clock", "start" and "restart" events.
  Gate(const JobPhase* phase, std::vector<bool> reporters, int64_t total_clocks, ClockTable* clocks,
       const Membership* members, const Rollbacks* rollbacks, const OperatorControl* control,
       PipelineRestarts* pipelines, std::function<void(const TraceEvent&)> trace);

  // The servers that report norms once an EXTERNAL model is declared
  // (NormRounds::SetReporters); before the job runs.
  void SetReporters(std::vector<bool> reporters) { norms_.SetReporters(std::move(reporters)); }
  // A move under way (scheduler/placement_moves.h): no worker starts
  // `clock` or later until it switches or is abandoned (-1: none held).
  void HoldFrom(int64_t clock) { held_from_ = clock; }
  // The job's placement once a move changed it: the answers' clusters
  // hold it (the workers place the chunks by it).
  void SetPlacement(const Placement& placement) { placement_ = placement; }

  // Worker `worker` finished `clock` iterations (ClockTable::Advance's
  // errors); true when its clock moved (held calls were woken).
  absl::StatusOr<bool> Advance(int worker, int64_t clock);
  // Worker req.worker_id(), of the current generation, asks to start
  // req.clock(): the answer now (in *resp), or *parked and the answer
  // later as a Release of `ticket`.
  absl::Status Ask(const AdvanceClockRequest& req, Ticket ticket, absl::Time now,
                   AdvanceClockResponse* resp, bool* parked);
  // The same from a worker of an older generation: it resumes at its clock
  // in the table once the servers have restored.
  absl::Status AskOfOlderGeneration(const AdvanceClockRequest& req, Ticket ticket, absl::Time now,
                                    AdvanceClockResponse* resp, bool* parked);
  // A registered server's BSP norm: the round's total now (*sum_squares),
  // or *parked and later.
  absl::Status ReduceNorm(const ReduceNormRequest& req, Ticket ticket, absl::Time now,
                          double* sum_squares, bool* parked);

  // Answers the held calls that may now go, or must fail (the job ended).
  void Wake();
  // Every stage of the restarting `replica` live and at the gate: back to
  // its slowest clock, and its held gate calls answered.
  void MaybeEndRestart(int replica, absl::Time now);
  // The cluster rolled back to `clock`: every clock goes there, and norm
  // rounds of the old generation never complete.
  void RolledBack(int64_t clock);
  // A scheduler took the job over: norm rounds from the generation's start
  // are reported again.
  void TakenOver();
  // From a heartbeat: a server's last norm (the round a scheduler that took
  // the job over never heard of from it completes); a worker's clock (which
  // its next gate report may be long in coming; once after a takeover).
  void AddReportedNorm(const MemberStatus& server);
  void CatchUpClock(const MemberStatus& worker);

  void Forget(Ticket ticket) { held_.Forget(ticket); }
  std::vector<Release> TakeReleases() { return held_.TakeReleases(); }
  // Whether `worker` is held at the gate (of the current generation).
  bool AtGate(int worker) const { return held_.AtGate(worker); }
  void AddWaits(MemberStatus* out) const { held_.AddWaits(clocks_->SlowestClock(), out); }

 private:
  bool Open(int64_t clock) const;
  void Fill(int worker, int64_t clock, AdvanceClockResponse* resp);
  std::optional<Release> Answer(const HeldCall& h);
  // A gate call of a pipeline replica whose link generation is behind, or whose
  // restart is under way: answered or held. False: an ordinary gate call.
  absl::StatusOr<bool> AskOfRestart(const AdvanceClockRequest& req, Ticket ticket, absl::Time now,
                                    AdvanceClockResponse* resp, bool* parked);
  void Trace(const char* event, int worker, int64_t clock);

  const JobPhase* const phase_;
  ClockTable* const clocks_;
  const Membership* const members_;
  const Rollbacks* const rollbacks_;
  const OperatorControl* const control_;
  PipelineRestarts* const pipelines_;
  const std::function<void(const TraceEvent&)> trace_;
  NormRounds norms_;
  HeldCalls held_;
  int64_t held_from_ = -1;
  Placement placement_;  // version 0 until a move switched
};

}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_GATE_H_
