#include "scheduler/rollbacks.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"

namespace pstrain {

Rollbacks::Rollbacks(const JobSpec& job, std::vector<int> chunk_servers, CheckpointCatalog* catalog,
                     int64_t start_clock)
    : checkpoint_every_(job.checkpoint_every()),
      checkpoint_dir_(job.checkpoint_dir()),
      chunk_servers_(std::move(chunk_servers)),
      catalog_(catalog) {
  state_.set_restore_clock(start_clock);
  state_.set_manifest_clock(start_clock);
}

int64_t Rollbacks::Begin(const std::string& reason, int64_t from, absl::Time now, bool redo) {
  state_.set_generation(state_.generation() + 1);
  state_.set_rolling_back(true);
  const int64_t to =
      checkpoint_every_ > 0
          ? std::max(state_.manifest_clock(), catalog_->NewestCompleteSet(chunk_servers_, from))
          : 0;
  state_.set_restore_clock(to);
  Rollback* r = state_.add_history();
  r->set_generation(state_.generation());
  r->set_reason(reason);
  r->set_from_clock(from);
  r->set_to_clock(to);
  r->set_begun_unix_ms(absl::ToUnixMillis(now));
  r->set_redo(redo);
  spdlog::warn(
      "generation {}: {}; rolling the cluster back from clock {} to the checkpoint of clock {}",
      state_.generation(), reason, from, to);
  if (to == 0 && from >= checkpoint_every_ && checkpoint_every_ > 0) {
    spdlog::warn(
        "no complete checkpoint set in {} (is it shared with the scheduler?): back to "
        "the initial weights",
        checkpoint_dir_);
  }
  return to;
}

void Rollbacks::Switch(const std::string& reason, int64_t clock, int64_t placement_version,
                       absl::Time now) {
  state_.set_generation(state_.generation() + 1);
  state_.set_rolling_back(true);
  state_.set_restore_clock(clock);
  Rollback* r = state_.add_history();
  r->set_generation(state_.generation());
  r->set_reason(reason);
  r->set_from_clock(clock);
  r->set_to_clock(clock);
  r->set_begun_unix_ms(absl::ToUnixMillis(now));
  r->set_placement_version(placement_version);
  spdlog::info(
      "generation {}: {}; every server goes on from clock {} under placement {}",
      state_.generation(), reason, clock, placement_version);
}

bool Rollbacks::MaybeEnd(const Membership& members, absl::Time now,
                         const std::function<bool(int)>& in_job) {
  if (!rolling_back()) return false;
  const bool restored = members.All(SERVER, [&](const MemberRecord& m) {
    if (in_job != nullptr && !in_job(m.id)) return true;
    return m.state != DEAD && m.status.generation() == generation();
  });
  if (!restored) return false;
  state_.set_rolling_back(false);
  state_.mutable_history()->rbegin()->set_done_unix_ms(absl::ToUnixMillis(now));
  spdlog::warn("generation {}: every server restored the checkpoint of clock {}; training resumes",
               generation(), restore_clock());
  return true;
}

std::optional<int64_t> Rollbacks::TakeManifestToWrite(const Membership& members) {
  if (checkpoint_every_ <= 0 || rolling_back() || chunk_servers_.empty() || manifest_in_flight_) {
    return std::nullopt;
  }
  int64_t complete = INT64_MAX;
  for (int s : chunk_servers_) {
    const MemberRecord* m = members.Get(SERVER, s);
    if (m == nullptr || m->status.generation() != generation()) return std::nullopt;
    complete = std::min(complete, m->status.server().checkpoint_clock());
  }
  if (complete <= manifest_clock()) return std::nullopt;
  manifest_in_flight_ = true;
  return complete;
}

bool Rollbacks::ManifestWritten(int64_t clock, const absl::Status& status) {
  manifest_in_flight_ = false;
  if (!status.ok()) {
    if (!manifest_error_logged_) {
      spdlog::error("cannot write the manifest: {}", status.message());
      manifest_error_logged_ = true;
    }
    return false;
  }
  const int64_t before = manifest_clock();
  state_.set_manifest_clock(std::max(before, clock));
  return true;
}

void Rollbacks::AddWait(const Membership& members, MemberStatus* out) const {
  if (!rolling_back()) return;
  std::vector<std::string> pending;
  members.ForEach([&](const MemberRecord& m) {
    if (m.role != SERVER) return;
    if (m.state == DEAD) {
      pending.push_back(
          absl::StrCat("a replacement of server ", m.id, " (ps_server --id=", m.id, ")"));
    } else if (m.status.generation() != generation()) {
      pending.push_back(absl::StrCat("server ", m.id, " to restore it"));
    }
  });
  Wait* w = out->add_waits();
  w->set_what(absl::StrCat("rolling back to the checkpoint of clock ", restore_clock(),
                           " (generation ", generation(), "): waiting for ",
                           absl::StrJoin(pending, ", ")));
  w->set_since_unix_ms(state_.history().rbegin()->begun_unix_ms());
}

void Rollbacks::AddStatus(ClusterStatus* out) const {
  out->set_generation(generation());
  *out->mutable_rollbacks() = history();
  out->set_manifest_clock(manifest_clock());
}

absl::Status Rollbacks::Restore(const RollbackState& state, int64_t max_clock) {
  for (int64_t c : {state.restore_clock(), state.manifest_clock()}) {
    if (c < 0 || c > max_clock) {
      return absl::InvalidArgumentError(absl::StrCat("clock ", c, " out of range for the job"));
    }
  }
  if (state.generation() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("count ", state.generation(), " out of range for the job"));
  }
  if (state.rolling_back() && state.history().empty()) {
    return absl::InvalidArgumentError("a rollback under way that is not in the history");
  }
  const int64_t manifest = std::max(manifest_clock(), state.manifest_clock());
  state_ = state;
  state_.set_manifest_clock(manifest);
  return absl::OkStatus();
}

}  // namespace pstrain
