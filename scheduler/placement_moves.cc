#include "scheduler/placement_moves.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"

namespace pstrain {
namespace {

std::string Describe(MoveKind kind, int server) {
  return absl::StrCat(kind == ADD_SERVER ? "adding" : "draining", " server ", server);
}

absl::Status Refused(MoveKind kind, int server, absl::string_view why) {
  return absl::FailedPreconditionError(
      absl::StrCat("cannot start ", Describe(kind, server), ": ", why));
}

}  // namespace

std::string PlacementMoves::RowsWithoutChunks(const Placement& after) const {
  if (job_.tables_size() == 0) return "";
  for (int s : after.servers()) {
    const bool rows = std::count(after.bucket_server().begin(), after.bucket_server().end(), s) > 0;
    if (rows && ChunksOn(after, s).empty()) {
      return absl::StrCat("server ", s,
                          " would hold table rows but no chunk, and a checkpoint asked for reaches "
                          "a server with the dense pushes (the job's ",
                          after.chunk_server_size(), " chunks are too few for ",
                          after.servers_size(),
                          " servers: a smaller chunk_bytes "
                          "cuts more)");
    }
  }
  return "";
}

PlacementMoves::PlacementMoves(const JobSpec& job, Partition partition)
    : job_(job), partition_(std::move(partition)) {
  *state_.mutable_placement() = InitialPlacement(partition_);
}

void PlacementMoves::Placed(Partition partition) {
  partition_ = std::move(partition);
  *state_.mutable_placement() = InitialPlacement(partition_);
}

absl::Status PlacementMoves::Ask(MoveKind kind, int server, const Context& context,
                                 absl::Time now) {
  if (kind != ADD_SERVER && kind != DRAIN_SERVER) {
    return absl::InvalidArgumentError(
        absl::StrCat("a move adds or drains a server, not ", MoveKind_Name(kind)));
  }
  if (!context.running) return Refused(kind, server, "the job is not running");
  if (context.rolling_back) return Refused(kind, server, "a rollback is under way");
  if (moving()) {
    const Move& m = state_.move();
    return Refused(kind, server,
                   absl::StrCat(Describe(m.kind(), m.server()),
                                " is under way (it switches at clock ", m.switch_clock(), ")"));
  }
  if (job_.pipeline_stages() > 1) {
    return Refused(kind, server, "a job with pipeline stages cannot move its servers yet");
  }
  if (job_.standby_copies() > 0) {
    return Refused(kind, server, "a job with standby copies cannot move its servers yet");
  }
  for (const TableSpec& t : job_.tables()) {
    if (t.admit_after() > 1) {
      return Refused(kind, server,
                     absl::StrCat("table '", t.name(),
                                  "' admits rows by counts that are not kept by row "
                                  "(admit_after): its parts cannot move"));
    }
  }
  const int64_t switch_clock = context.switch_clock;
  if (context.total_clocks > 0 && switch_clock >= context.total_clocks) {
    return Refused(kind, server,
                   absl::StrCat("the job ends at clock ", context.total_clocks,
                                " before a move could switch"));
  }
  absl::StatusOr<PlacementChange> plan =
      kind == ADD_SERVER ? PlanAdd(placement(), partition_, server, context.limits)
                         : PlanDrain(placement(), partition_, server, context.limits);
  if (!plan.ok()) return Refused(kind, server, plan.status().message());
  if (const std::string why = RowsWithoutChunks(plan->after); !why.empty()) {
    return Refused(kind, server, why);
  }
  Move* m = state_.mutable_move();
  m->set_kind(kind);
  m->set_server(server);
  *m->mutable_after() = std::move(plan->after);
  m->set_switch_clock(switch_clock);
  m->set_bytes(plan->MovedBytes());
  m->set_begun_unix_ms(absl::ToUnixMillis(now));
  spdlog::info(
      "{}: placement {} moves {} bytes of chunks and {} row buckets; it switches at clock {}",
      Describe(kind, server), m->after().version(), m->bytes(),
      std::count_if(plan->moves.begin(), plan->moves.end(),
                    [](const PlacementMove& x) { return x.kind == PlacementMove::Kind::kBucket; }),
      switch_clock);
  return absl::OkStatus();
}

bool PlacementMoves::MaybeSwitch(bool handed_over, absl::Time now) {
  if (!moving() || !handed_over) return false;
  *state_.mutable_placement() = state_.move().after();
  spdlog::info("{}: placement {} in force from clock {}",
               Describe(state_.move().kind(), state_.move().server()), state_.placement().version(),
               state_.move().switch_clock());
  End("", now);
  return true;
}

void PlacementMoves::RecordHandover(int64_t bytes, int64_t ms) {
  if (state_.history().empty()) return;
  MoveRecord* r = state_.mutable_history(state_.history_size() - 1);
  r->set_handed_over_bytes(bytes);
  r->set_handover_ms(ms);
}

bool PlacementMoves::Abandon(const std::string& why, absl::Time now) {
  if (!moving()) return false;
  spdlog::warn("{} abandoned: {}; placement {} stays",
               Describe(state_.move().kind(), state_.move().server()), why,
               state_.placement().version());
  End(why, now);
  return true;
}

bool PlacementMoves::ServerLost(int server, absl::Time now) {
  if (!moving()) return false;
  const Placement& before = state_.placement();
  const Placement& after = state_.move().after();
  const bool needed = server == state_.move().server() ||
                      std::count(before.servers().begin(), before.servers().end(), server) > 0 ||
                      std::count(after.servers().begin(), after.servers().end(), server) > 0;
  if (!needed) return false;
  return Abandon(absl::StrCat("server ", server, " was lost"), now);
}

bool PlacementMoves::InJob(int server) const {
  const auto& placed = state_.placement().servers();
  return std::find(placed.begin(), placed.end(), server) != placed.end() ||
         (moving() && state_.move().server() == server);
}

std::string PlacementMoves::WhyOut(int server) const {
  if (InJob(server)) return "";
  for (auto r = state_.history().rbegin(); r != state_.history().rend(); ++r) {
    if (r->server() != server) continue;
    if (r->kind() == ADD_SERVER && !r->abandoned().empty()) {
      return absl::StrCat("the move that added server ", server,
                          " was abandoned: ", r->abandoned());
    }
    if (r->kind() == DRAIN_SERVER && r->abandoned().empty()) {
      return absl::StrCat("server ", server, " was drained at clock ", r->switch_clock(),
                          " (placement ", r->version(), ")");
    }
    break;
  }
  return absl::StrCat("server ", server, " holds nothing in placement ",
                      state_.placement().version());
}

void PlacementMoves::End(const std::string& abandoned, absl::Time now) {
  const Move& m = state_.move();
  MoveRecord* r = state_.add_history();
  r->set_kind(m.kind());
  r->set_server(m.server());
  r->set_version(m.after().version());
  r->set_switch_clock(m.switch_clock());
  r->set_bytes(m.bytes());
  r->set_begun_unix_ms(m.begun_unix_ms());
  r->set_ended_unix_ms(absl::ToUnixMillis(now));
  r->set_abandoned(abandoned);
  state_.clear_move();
}

void PlacementMoves::AddStatus(ClusterStatus* out) const {
  PlacementStatus* p = out->mutable_placement();
  const Placement& placement = state_.placement();
  p->set_version(placement.version());
  for (int s : placement.servers()) {
    PlacedServer* ps = p->add_servers();
    ps->set_server(s);
    for (int32_t c : ChunksOn(placement, s)) {
      ps->set_chunks(ps->chunks() + 1);
      ps->set_chunk_bytes(ps->chunk_bytes() +
                          partition_.chunks()[c].numel * static_cast<int64_t>(sizeof(float)));
    }
    ps->set_row_buckets(static_cast<int32_t>(
        std::count(placement.bucket_server().begin(), placement.bucket_server().end(), s)));
  }
  *p->mutable_history() = state_.history();
  if (!moving()) return;
  const Move& m = state_.move();
  MoveStatus* ms = p->mutable_move();
  ms->set_kind(m.kind());
  ms->set_server(m.server());
  ms->set_version(m.after().version());
  ms->set_switch_clock(m.switch_clock());
  ms->set_bytes(m.bytes());
  ms->set_begun_unix_ms(m.begun_unix_ms());
}

absl::Status PlacementMoves::Restore(const MoveState& state) {
  const int chunks = static_cast<int>(partition_.chunks().size());
  absl::Status st = CheckPlacement(state.placement(), chunks);
  if (st.ok() && state.has_move()) st = CheckPlacement(state.move().after(), chunks);
  if (!st.ok()) return absl::InvalidArgumentError(absl::StrCat("moves: ", st.message()));
  state_ = state;
  return absl::OkStatus();
}

}  // namespace pstrain
