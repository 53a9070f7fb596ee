// The optimizer's hyperparameters a script set, by clock (a PyTorch
// script's param_groups: PushRequest.hyper): each setting holds from its
// clock on. A clock at or before the last one set keeps what it had, so a
// clock redone after a rollback pushes what it pushed the first time,
// whatever the script's scheduler says by then. No gRPC; thread-safe.
#ifndef PSTRAIN_WORKER_EXTERNAL_HYPER_PLAN_H_
#define PSTRAIN_WORKER_EXTERNAL_HYPER_PLAN_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/synchronization/mutex.h"

namespace pstrain {

class HyperPlan {
 public:
  // Settings older than this many clocks before the newest are forgotten
  // (but the one in force then): a rollback further back pushes the
  // values of the oldest kept.
  static constexpr int64_t kKeepClocks = 100000;

  // `hyper` (a serialized OptimizerSpec; "" for the job's) from `clock`
  // on, unless a clock at or after it was set already.
  void Set(int64_t clock, std::string hyper);
  // What a push of `clock` carries.
  std::string At(int64_t clock) const;

 private:
  std::string AtLocked(int64_t clock) const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::map<int64_t, std::string> changes_ ABSL_GUARDED_BY(mu_);
  int64_t last_set_ ABSL_GUARDED_BY(mu_) = -1;
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_EXTERNAL_HYPER_PLAN_H_
