#include "scheduler/promotions.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/partition.h"

namespace pstrain {

Promotions::Promotions(const JobSpec& job)
    : num_servers_(job.standby_copies() > 0 ? job.num_servers() : 0) {
  ServerRoutes* r = state_.mutable_routes();
  for (int s = 0; s < num_servers_; ++s) {
    r->add_serving(s);
    r->add_addresses("");
    r->add_ready(false);
  }
  if (enabled()) r->set_version(1);
}

void Promotions::Registered(int server, const std::string& address) {
  if (server < 0 || server >= num_servers_) return;
  ServerRoutes* r = state_.mutable_routes();
  if (r->addresses(server) == address && !r->ready(server)) return;
  r->set_addresses(server, address);
  r->set_ready(server, false);
  Changed();
}

void Promotions::Reported(int server, const MemberStatus& status) {
  if (server < 0 || server >= num_servers_) return;
  TakenUp(server, status.server().standby().routes_version());
  ServerRoutes* r = state_.mutable_routes();
  // Ready only for the routes it has seen: a copy demoted since is stale.
  if (status.server().standby().routes_version() != r->version() || r->addresses(server).empty())
    return;
  if (r->ready(server) == status.server().standby().ready()) return;
  r->set_ready(server, status.server().standby().ready());
  if (status.server().standby().ready()) {
    spdlog::info("server {} holds every standby copy it keeps: it can take over", server);
  }
  // (Not a change of the routes' version: the members need not hear it.)
}

bool Promotions::Promote(int dead, std::string* why) {
  if (dead < 0 || dead >= num_servers_) return false;
  ServerRoutes* r = state_.mutable_routes();
  std::vector<int> homes, to;
  bool possible = true;
  for (int home = 0; home < num_servers_; ++home) {
    if (r->serving(home) != dead) continue;
    const int other = PairPartner(home, dead, num_servers_);
    if (other == dead || r->addresses(other).empty() || !r->ready(other)) {
      *why = absl::StrCat(
          "server ", dead, "'s standby for the chunks of server ", home, ", server ", other,
          r->addresses(other).empty() ? ", is gone too" : ", has not filled its copies yet");
      possible = false;
    }
    homes.push_back(home);
    to.push_back(other);
  }
  r->set_addresses(dead, "");
  r->set_ready(dead, false);
  DropPromotionsOnto(dead);
  if (possible) {
    for (size_t i = 0; i < homes.size(); ++i) r->set_serving(homes[i], to[i]);
    std::vector<std::string> moves;
    for (size_t i = 0; i < homes.size(); ++i) {
      moves.push_back(absl::StrCat("server ", homes[i], "'s chunks to server ", to[i]));
    }
    *why = homes.empty()
               ? absl::StrCat("server ", dead, " served no chunks")
               : absl::StrCat("promoted the standby copies: ", absl::StrJoin(moves, ", "));
  }
  Changed();
  if (possible && !homes.empty()) {
    PendingPromotion* pending = state_.add_pending();
    pending->set_routes_version(r->version());
    std::sort(to.begin(), to.end());
    to.erase(std::unique(to.begin(), to.end()), to.end());
    for (int s : to) pending->add_to(s);
  }
  return possible;
}

void Promotions::TakenUp(int server, int64_t routes_version) {
  auto* pending = state_.mutable_pending();
  for (int i = 0; i < pending->size();) {
    PendingPromotion& p = (*pending)[i];
    if (routes_version >= p.routes_version()) {
      auto* to = p.mutable_to();
      to->erase(std::remove(to->begin(), to->end(), server), to->end());
    }
    if (p.to().empty()) {
      state_.set_promotions(state_.promotions() + 1);
      pending->erase(pending->begin() + i);
    } else {
      ++i;
    }
  }
}

void Promotions::DropPromotionsOnto(int dead) {
  auto* pending = state_.mutable_pending();
  for (int i = 0; i < pending->size();) {
    const auto& to = (*pending)[i].to();
    if (std::find(to.begin(), to.end(), dead) != to.end()) {
      spdlog::warn("the promotion onto server {} is not counted: it died before taking it up",
                   dead);
      pending->erase(pending->begin() + i);
    } else {
      ++i;
    }
  }
}

void Promotions::Reset() {
  if (!enabled()) return;
  state_.clear_pending();
  ServerRoutes* r = state_.mutable_routes();
  for (int s = 0; s < num_servers_; ++s) {
    r->set_serving(s, s);
    r->set_ready(s, false);
  }
  Changed();
}

void Promotions::AddStatus(ClusterStatus* out) const {
  if (!enabled()) return;
  *out->mutable_routes() = routes();
  out->set_promotions(promotions());
}

absl::Status Promotions::Restore(const PromotionState& state) {
  const ServerRoutes& r = state.routes();
  if (!enabled()) return absl::OkStatus();
  if (r.serving_size() != num_servers_ || r.addresses_size() != num_servers_ ||
      r.ready_size() != num_servers_ || state.promotions() < 0) {
    return absl::InvalidArgumentError("standby routes of another size than the job's servers");
  }
  for (int s : r.serving()) {
    if (s < 0 || s >= num_servers_) {
      return absl::InvalidArgumentError(absl::StrCat("serving server ", s, " out of range"));
    }
  }
  for (const PendingPromotion& p : state.pending()) {
    for (int s : p.to()) {
      if (s < 0 || s >= num_servers_) {
        return absl::InvalidArgumentError(absl::StrCat("promoted server ", s, " out of range"));
      }
    }
  }
  state_ = state;
  return absl::OkStatus();
}

}  // namespace pstrain
