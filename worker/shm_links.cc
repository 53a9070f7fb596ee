#include "worker/shm_links.h"

#include <utility>

#include "common/logging.h"

namespace pstrain {

ShmLinks::ShmLinks(const std::vector<std::string>& addresses, const Partition& partition,
                   int worker_id, bool enabled, int standby_copies)
    : addresses_(addresses), worker_id_(worker_id), enabled_(enabled) {
  for (int s = 0; s < static_cast<int>(addresses_.size()); ++s) {
    layouts_.push_back(ShmLayout::OfServer(partition, s, standby_copies));
    links_.emplace_back();
    tries_.push_back(enabled ? 0 : kMaxTries);
    asked_in_.push_back(0);
  }
}

ShmLinks::~ShmLinks() = default;

ShmLink* ShmLinks::For(int s, uint64_t attempt) {
  if (links_[s] != nullptr || tries_[s] >= kMaxTries || asked_in_[s] == attempt) {
    return links_[s].get();
  }
  ++tries_[s];
  asked_in_[s] = attempt;
  absl::StatusOr<std::unique_ptr<ShmLink>> link =
      ShmLink::Open(addresses_[s], worker_id_, layouts_[s]);
  if (!link.ok()) {
    // Another host or network namespace, or shared memory turned off: for
    // good. Anything else (not ready yet) is asked again in a later attempt.
    if (absl::IsFailedPrecondition(link.status())) tries_[s] = kMaxTries;
    spdlog::info("server {}: payloads in the messages ({})", s, link.status().message());
    return nullptr;
  }
  spdlog::info("server {}: payloads through shared memory (segment of {} bytes)", s,
               layouts_[s].segment_bytes());
  links_[s] = std::move(*link);
  ++attached_;
  return links_[s].get();
}

void ShmLinks::Readdress(int s, const std::string& address) {
  if (addresses_[s] == address) return;
  addresses_[s] = address;
  if (links_[s] != nullptr) {
    lost_.push_back(std::move(links_[s]));
    --attached_;
  }
  tries_[s] = enabled_ ? 0 : kMaxTries;
  asked_in_[s] = 0;
}

void ShmLinks::Lose(int s, ShmLink* link) {
  if (link == nullptr || links_[s].get() != link) return;
  spdlog::warn("server {} lost its shared-memory segment: payloads in the messages", s);
  lost_.push_back(std::move(links_[s]));
  --attached_;
}

}  // namespace pstrain
