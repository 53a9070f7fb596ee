// JobCoordinator's moves of the placement (scheduler/placement_moves.h): a
// server that joins the running job, the switch once the manifest names
// the move's checkpoint, a rollback abandoning the move. See
// scheduler/job_coordinator.h.
#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/placement.h"
#include "common/status_macros.h"
#include "scheduler/job_coordinator.h"

namespace pstrain {
namespace {

// How often servers beat while a move or a rollback is under way.
constexpr int kStepHeartbeatMs = 20;

// Whether each server id holds chunks by `placement`.
std::vector<bool> HoldsChunks(const Placement& placement, int servers) {
  std::vector<bool> out(servers, false);
  for (int s : placement.chunk_server()) {
    if (s >= 0 && s < servers) out[s] = true;
  }
  return out;
}

// Whether a server's Status speaks of `move` (heard of, its handover).
bool TakesMove(const ServerStatus& st, const Move& move) {
  return st.handover_version() == move.after().version() &&
         st.handover_switch_clock() == move.switch_clock();
}

}  // namespace

absl::StatusOr<RegisterResponse> JobCoordinator::Join(const RegisterRequest& req, absl::Time now) {
  int retried = -1;
  members_.ForEach([&](const MemberRecord& m) {
    if (m.role == SERVER && m.address == req.address() && m.incarnation == req.incarnation()) {
      retried = m.id;
    }
  });
  if (retried >= 0) return JoinAnswer(retried);  // its answer was lost
  absl::StatusOr<RegisterResponse> joined = StartJoin(req, now);
  if (!joined.ok()) LogRefusal(req, joined.status(), now);
  return joined;
}

absl::StatusOr<RegisterResponse> JobCoordinator::StartJoin(const RegisterRequest& req,
                                                           absl::Time now) {
  if (req.role() != SERVER) {
    return absl::InvalidArgumentError("only a server joins a running job (ps_server --join)");
  }
  if (!Running()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot add a server: the job is ", JobState_Name(phase_.state), ", not running"));
  }
  if (clocks_.Resyncing()) {
    return absl::UnavailableError(
        "the scheduler took the job over and does not know every worker's clock yet; try again "
        "in a moment");
  }
  int64_t fastest = 0;
  const PlacementMoves::Context context = MoveContext(&fastest);
  // The smallest id the placement frees: the next, or one out of the job.
  const int id = FreeServerId(moves_.placement());
  RETURN_IF_ERROR(moves_.Ask(ADD_SERVER, id, context, now));
  absl::StatusOr<int> joined = members_.Join(req.address(), req.incarnation(), id, now);
  if (!joined.ok()) {
    AbandonMove(std::string(joined.status().message()), now);
    return joined.status();
  }
  gate_.HoldFrom(moves_.held_clock());
  spdlog::info("server {} joins from {}: it takes its chunks as they are at clock {}", *joined,
               req.address(), moves_.switch_clock());
  return JoinAnswer(*joined);
}

absl::StatusOr<int64_t> JobCoordinator::Drain(const ControlRequest& req, absl::Time now) {
  if (req.move() != DRAIN_SERVER) {
    return absl::InvalidArgumentError(
        "a MOVE drains a server (DRAIN_SERVER); a server is added by starting it with "
        "ps_server --join");
  }
  if (members_.Get(SERVER, req.server()) == nullptr) {
    return absl::NotFoundError(absl::StrCat("server ", req.server(), " is not in the job"));
  }
  int64_t fastest = 0;
  RETURN_IF_ERROR(moves_.Ask(DRAIN_SERVER, req.server(), MoveContext(&fastest), now));
  gate_.HoldFrom(moves_.held_clock());
  spdlog::info("server {} drains: its chunks go to the others as they are at clock {}",
               req.server(), moves_.switch_clock());
  return moves_.switch_clock();
}

PlacementMoves::Context JobCoordinator::MoveContext(int64_t* fastest) const {
  *fastest = 0;
  for (int w = 0; w < clocks_.num_workers(); ++w) *fastest = std::max(*fastest, clocks_.clock(w));
  PlacementMoves::Context context;
  context.rolling_back = rollbacks_.rolling_back();
  context.switch_clock = control_.CheckpointClockFor(*fastest);
  context.total_clocks = control_.total_clocks();
  // What the servers keep an element (weights and optimizer state), as they report it.
  members_.ForEach([&](const MemberRecord& m) {
    if (m.role != SERVER) return;
    context.limits.bytes_per_param = std::max(
        context.limits.bytes_per_param, static_cast<int64_t>(m.status.server().bytes_per_param()));
  });
  return context;
}

RegisterResponse JobCoordinator::JoinAnswer(int id) const {
  RegisterResponse resp;
  resp.set_id(id);
  *resp.mutable_job() = job_;
  resp.set_generation(rollbacks_.generation());
  resp.set_start_clock(moves_.moving() ? moves_.switch_clock() : rollbacks_.restore_clock());
  AddPlacement(resp.mutable_placement());
  if (moves_.moving()) *resp.mutable_next_placement() = *moves_.next();
  return resp;
}

void JobCoordinator::MaybeSwitch(absl::Time now) {
  if (!moves_.moving()) return;
  const Move move = moves_.Snapshot().move();
  int64_t bytes = 0, ms = 0;
  for (int s : Takers(moves_.placement(), move.after())) {
    const MemberRecord* m = members_.Get(SERVER, s);
    if (m == nullptr) continue;
    bytes += m->status.server().handed_over_bytes();
    ms = std::max(ms, m->status.server().handover_ms());
  }
  if (const std::string why = HandoverError(); !why.empty()) {
    AbandonMove(why, now);
    return;
  }
  if (!moves_.MaybeSwitch(AwaitedHandovers().empty(), now)) return;
  moves_.RecordHandover(bytes, ms);
  rollbacks_.Switch(
      absl::StrCat("server ", move.server(), move.kind() == ADD_SERVER ? " added" : " drained"),
      move.switch_clock(), moves_.placement().version(), now);
  Placed();
  gate_.RolledBack(move.switch_clock());
}

std::vector<int> JobCoordinator::AwaitedHandovers() const {
  std::vector<int> out;
  if (!moves_.moving()) return out;
  const Move& move = moves_.Snapshot().move();
  // Every server of either placement: the takers hold what they take, and
  // the others heard of the move (the switch takes its handover).
  std::set<int> servers(move.after().servers().begin(), move.after().servers().end());
  servers.insert(moves_.placement().servers().begin(), moves_.placement().servers().end());
  for (int s : servers) {
    const MemberRecord* m = members_.Get(SERVER, s);
    const ServerStatus* st = m == nullptr ? nullptr : &m->status.server();
    if (st == nullptr || Gone(m->state) || !TakesMove(*st, move) || !st->handed_over()) {
      out.push_back(s);
    }
  }
  return out;
}

std::string JobCoordinator::HandoverError() const {
  const Move& move = moves_.Snapshot().move();
  for (int s : Takers(moves_.placement(), move.after())) {
    const MemberRecord* m = members_.Get(SERVER, s);
    if (m != nullptr && TakesMove(m->status.server(), move) &&
        !m->status.server().handover_error().empty()) {
      return m->status.server().handover_error();
    }
  }
  return "";
}

void JobCoordinator::Placed() {
  if (moves_.placement().version() > 1) {
    const int servers = members_.registered(SERVER);
    const std::vector<bool> holds = HoldsChunks(moves_.placement(), servers);
    std::vector<int> with_chunks;
    for (int s = 0; s < servers; ++s) {
      if (holds[s]) with_chunks.push_back(s);
    }
    rollbacks_.SetChunkServers(with_chunks);
    gate_.SetReporters(holds);
    gate_.SetPlacement(moves_.placement());
  }
  gate_.HoldFrom(moves_.held_clock());
}

void JobCoordinator::AbandonMove(const std::string& why, absl::Time now) {
  moves_.Abandon(why, now);
  gate_.HoldFrom(moves_.held_clock());
}

void JobCoordinator::AddPlacement(Placement* out) const {
  if (moves_.placement().version() > 1) *out = moves_.placement();
}

void JobCoordinator::AddPlacementNews(const MemberRecord& server, HeartbeatResponse* out) const {
  if (server.status.server().placement_version() != moves_.placement().version()) {
    AddPlacement(out->mutable_placement());
  }
  out->set_leave(moves_.WhyOut(server.id));
  // Each step of a move, and of its switch or a rollback, waits for a heartbeat.
  if (moves_.moving() || rollbacks_.rolling_back()) out->set_next_heartbeat_ms(kStepHeartbeatMs);
  AddMoveNews(out);
}

void JobCoordinator::AddMoveNews(HeartbeatResponse* out) const {
  if (!moves_.moving()) return;
  const Move& move = moves_.Snapshot().move();
  MoveNews* news = out->mutable_move();
  *news->mutable_from() = moves_.placement();
  *news->mutable_to() = move.after();
  news->set_switch_clock(move.switch_clock());
  const int servers = members_.registered(SERVER);
  for (int s = 0; s < servers; ++s) {
    const MemberRecord* m = members_.Get(SERVER, s);
    news->add_addresses(m == nullptr ? "" : m->address);
  }
}

void JobCoordinator::AddMoveWaits(ClusterStatus* out) const {
  if (!moves_.moving()) return;
  MoveStatus* move = out->mutable_placement()->mutable_move();
  for (int s : AwaitedHandovers()) move->add_waiting_for(s);
  const Move& m = moves_.Snapshot().move();
  int64_t moved = 0;
  for (int s : Takers(moves_.placement(), m.after())) {
    const MemberRecord* taker = members_.Get(SERVER, s);
    const ServerStatus* st = taker == nullptr ? nullptr : &taker->status.server();
    if (st != nullptr && TakesMove(*st, m)) moved += st->handed_over_bytes();
  }
  move->set_bytes_moved(moved);
  move->set_bytes_left(std::max<int64_t>(0, m.bytes() - moved));
}

}  // namespace pstrain
