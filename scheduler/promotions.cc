#include "scheduler/promotions.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/partition.h"

namespace pstrain {

Promotions::Promotions(const JobSpec& job)
    : num_servers_(job.replicas() > 0 ? job.num_servers() : 0) {
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
  ServerRoutes* r = state_.mutable_routes();
  // Ready only for the routes it has seen: a copy demoted since is stale.
  if (status.routes_version() != r->version() || r->addresses(server).empty()) return;
  if (r->ready(server) == status.standby_ready()) return;
  r->set_ready(server, status.standby_ready());
  if (status.standby_ready()) {
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
  if (possible) {
    for (size_t i = 0; i < homes.size(); ++i) r->set_serving(homes[i], to[i]);
    if (!homes.empty()) state_.set_promotions(state_.promotions() + 1);
    std::vector<std::string> moves;
    for (size_t i = 0; i < homes.size(); ++i) {
      moves.push_back(absl::StrCat("server ", homes[i], "'s chunks to server ", to[i]));
    }
    *why = homes.empty()
               ? absl::StrCat("server ", dead, " served no chunks")
               : absl::StrCat("promoted the standby copies: ", absl::StrJoin(moves, ", "));
  }
  Changed();
  return possible;
}

void Promotions::Reset() {
  if (!enabled()) return;
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
  state_ = state;
  return absl::OkStatus();
}

}  // namespace pstrain
