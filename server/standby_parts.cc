#include "server/standby_parts.h"

#include <algorithm>

namespace pstrain {

void StandbyParts::AddAll(const StandbyParts& other) {
  parts_.insert(parts_.end(), other.parts_.begin(), other.parts_.end());
}

bool StandbyParts::SetRoles(const std::vector<bool>& serving, const std::vector<bool>& shipped) {
  bool changed = false;
  for (auto& [home, part] : parts_) {
    const bool serve = home < static_cast<int>(serving.size()) && serving[home];
    const bool ship = serve && home < static_cast<int>(shipped.size()) && shipped[home];
    absl::MutexLock lock(&part->mu);
    const StandbyState::RoleChange change =
        part->standby.SetRole(serve, ship, part->clocks.applied());
    if (change == StandbyState::RoleChange::kPromoted) {
      part->clocks.SetApplied(part->clocks.applied());  // the round being collected emptied
      part->Promoted();
    }
    if (change != StandbyState::RoleChange::kNone) changed = true;
    part->Touched();
  }
  return changed;
}

void StandbyParts::ForgetCopies() {
  for (auto& [home, part] : parts_) {
    absl::MutexLock lock(&part->mu);
    if (!part->standby.serving) part->standby.version = -1;
  }
}

void StandbyParts::JoinAsStandby(int64_t generation) {
  for (auto& [home, part] : parts_) {
    absl::MutexLock lock(&part->mu);
    part->generation = generation;
    part->standby.serving = false;
    part->standby.version = -1;
    part->Joined();
    part->Touched();
  }
}

void StandbyParts::RemoveWorker(int worker, absl::FunctionRef<void(StandbyPart&)> removed) {
  for (auto& [home, part] : parts_) {
    absl::MutexLock lock(&part->mu);
    if (worker < 0 || worker >= part->clocks.num_workers()) return;
    if (part->clocks.Remove(worker)) removed(*part);
  }
}

bool StandbyParts::Filled() const {
  for (const auto& [home, part] : parts_) {
    absl::MutexLock lock(&part->mu);
    if (part->standby.stale()) return false;
  }
  return true;
}

int64_t StandbyParts::Lag() const {
  int64_t lag = 0;
  for (const auto& [home, part] : parts_) {
    absl::MutexLock lock(&part->mu);
    lag += part->standby.lag();
  }
  return lag;
}

std::vector<int> StandbyParts::Homes(bool served) const {
  std::vector<int> out;
  for (const auto& [home, part] : parts_) {
    absl::MutexLock lock(&part->mu);
    if (part->standby.serving != served) continue;
    if (std::find(out.begin(), out.end(), home) == out.end()) out.push_back(home);
  }
  return out;
}

}  // namespace pstrain
