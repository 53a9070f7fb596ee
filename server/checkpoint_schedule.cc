#include "server/checkpoint_schedule.h"

#include <string>

#include "common/logging.h"

namespace pstrain {

void CheckpointSchedule::Failed(absl::string_view part, int64_t clock,
                                const absl::Status& st) const {
  if (failure_logged_.exchange(true)) return;
  spdlog::error("{}: checkpoint of clock {} failed (logged once): {}", std::string(part), clock,
                std::string(st.message()));
}

}  // namespace pstrain
