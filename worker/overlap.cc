#include "worker/overlap.h"

#include "common/job_spec.h"

namespace pstrain {

bool DecideOverlap(const std::string& flag, const JobSpec& job, bool cuda, bool layered_reads,
                   bool loss_scaling, std::string* why_not) {
  const bool wanted =
      flag == "on" || (flag == "auto" && (cuda || layered_reads || EffectiveStaleness(job) != 0));
  if (!wanted) return false;
  const bool clips = job.optimizer().clip_norm() > 0 && job.consistency() != BSP;
  const char* veto = job.micro_batches() > 1 ? "micro_batches above 1"
                     : loss_scaling          ? "fp16 loss scaling"
                     : clips                 ? "clipping by the push's norm under SSP/ASP"
                                             : nullptr;
  if (veto != nullptr && why_not != nullptr) *why_not = veto;
  return veto == nullptr;
}

}  // namespace pstrain
