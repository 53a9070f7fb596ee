#include "scheduler/held_calls.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace pstrain {

absl::Status HeldCalls::Hold(const HeldCall& call) {
  int held = 0;
  for (const HeldCall& h : held_) held += h.gate == call.gate && h.member == call.member;
  if (held >= kMaxPerMember) {
    return absl::ResourceExhaustedError(
        absl::StrCat(call.gate ? "worker " : "server ", call.member, " already has ", held,
                     call.gate ? " gate calls waiting" : " norm calls waiting"));
  }
  held_.push_back(call);
  return absl::OkStatus();
}

void HeldCalls::Forget(Ticket ticket) {
  held_.erase(std::remove_if(held_.begin(), held_.end(),
                             [ticket](const HeldCall& h) { return h.ticket == ticket; }),
              held_.end());
}

void HeldCalls::Answer(const std::function<std::optional<Release>(const HeldCall&)>& answer) {
  for (auto it = held_.begin(); it != held_.end();) {
    std::optional<Release> r = answer(*it);
    if (!r.has_value()) {
      ++it;
      continue;
    }
    r->ticket = it->ticket;
    releases_.push_back(std::move(*r));
    it = held_.erase(it);
  }
}

std::vector<Release> HeldCalls::TakeReleases() { return std::exchange(releases_, {}); }

bool HeldCalls::AtGate(int worker) const {
  return std::any_of(held_.begin(), held_.end(), [worker](const HeldCall& h) {
    return h.gate && !h.stale && h.member == worker;
  });
}

void HeldCalls::AddWaits(int64_t slowest_clock, MemberStatus* out) const {
  for (bool gates : {false, true}) {
    for (const HeldCall& h : held_) {
      if (h.gate != gates) continue;
      Wait* w = out->add_waits();
      w->set_what(gates ? absl::StrCat("worker ", h.member, " at the gate of clock ", h.clock,
                                       " (the slowest worker has finished ", slowest_clock,
                                       " clocks)")
                        : absl::StrCat("server ", h.member, "'s norm of BSP round ", h.clock,
                                       ", waiting for the other servers' norms"));
      w->set_since_unix_ms(absl::ToUnixMillis(h.since));
    }
  }
}

}  // namespace pstrain
