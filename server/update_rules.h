// The optimizer and learning rate of one update: the job's (its optimizer
// and LrSchedule), or, for a clock whose pushes carry hyperparameters
// (PushRequest.hyper: a PyTorch script's param_groups, changed by hand or
// by a torch.optim.lr_scheduler), the job's optimizer with those fields
// replaced. No gRPC; thread-safe.
#ifndef PSTRAIN_SERVER_UPDATE_RULES_H_
#define PSTRAIN_SERVER_UPDATE_RULES_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "proto/job.pb.h"
#include "server/lr_schedule.h"
#include "server/optimizer.h"

namespace pstrain {

class UpdateRules {
 public:
  // `job` valid (ValidateJobSpec); `total_clocks` for its schedule; `base`
  // its optimizer (MakeOptimizer's).
  UpdateRules(const OptimizerSpec& job, int64_t total_clocks,
              std::shared_ptr<const Optimizer> base);

  // What an update takes.
  struct Rule {
    std::shared_ptr<const Optimizer> optimizer;
    float lr = 0;
  };
  // The rule of an update of iteration `clock`: the job's, or with `hyper`
  // (checked by WithHyper, common/job_optimizer.h; null: none) its fields replaced -- a
  // learning_rate replaces the schedule's.
  Rule For(int64_t clock, const OptimizerSpec* hyper) const;

 private:
  const OptimizerSpec job_;
  const Schedule schedule_;
  const std::shared_ptr<const Optimizer> base_;
  // The optimizer of the last hyperparameters other than the learning
  // rate (a OneCycleLR moves beta1 every clock: one is made per change).
  mutable absl::Mutex mu_;
  mutable std::string last_key_ ABSL_GUARDED_BY(mu_);
  mutable std::shared_ptr<const Optimizer> last_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_UPDATE_RULES_H_
