#include "common/job_optimizer.h"

#include "absl/strings/str_cat.h"

namespace pstrain {

void ApplyOptimizerDefaults(OptimizerSpec* opt) {
  if (opt->type() == OPTIMIZER_UNSPECIFIED) opt->set_type(ADAM);
  const OptimizerType type = opt->type();
  if (!opt->has_learning_rate()) {
    switch (type) {
      case ADAM:
      case ADAMW:
      case RMSPROP:
      case ADAFACTOR:
        opt->set_learning_rate(1e-3f);
        break;
      case ADADELTA:
        opt->set_learning_rate(1.0f);
        break;
      case LION:  // its steps are sign-sized: a tenth of AdamW's lr (the paper's advice)
        opt->set_learning_rate(1e-4f);
        break;
      default:
        opt->set_learning_rate(0.01f);
        break;
    }
  }
  if ((type == MOMENTUM || type == NESTEROV) && !opt->has_momentum()) opt->set_momentum(0.9f);
  if (!opt->has_beta1()) opt->set_beta1(0.9f);
  if (!opt->has_beta2()) opt->set_beta2(type == LION ? 0.99f : 0.999f);
  if (!opt->has_epsilon()) {
    switch (type) {
      case ADAGRAD:
        opt->set_epsilon(1e-10f);
        break;
      case ADADELTA:
        opt->set_epsilon(1e-6f);
        break;
      case ADAFACTOR:
        opt->set_epsilon(1e-30f);
        break;
      default:
        opt->set_epsilon(1e-8f);
        break;
    }
  }
  if (!opt->has_rho()) opt->set_rho(0.9f);
  if (!opt->has_decay_rate()) opt->set_decay_rate(-0.8f);
  if (!opt->has_clip_threshold()) opt->set_clip_threshold(1.0f);
  LrSchedule* sched = opt->mutable_schedule();
  if (sched->type() == SCHEDULE_UNSPECIFIED) sched->set_type(CONSTANT);
  if (sched->type() == STEP_DECAY && !sched->has_gamma()) sched->set_gamma(0.1f);
}

absl::Status ValidateOptimizer(const OptimizerSpec& opt) {
  auto bad = [](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat("job spec: optimizer.", parts...));
  };
  if (!OptimizerType_IsValid(opt.type())) return bad("type ", opt.type(), " is unknown");
  if (!(opt.learning_rate() > 0)) return bad("learning_rate must be > 0");
  if (opt.momentum() < 0 || opt.momentum() >= 1) return bad("momentum must be in [0, 1)");
  if (opt.beta1() < 0 || opt.beta1() >= 1 || opt.beta2() < 0 || opt.beta2() >= 1) {
    return bad("beta1 and beta2 must be in [0, 1)");
  }
  if (!(opt.epsilon() > 0)) return bad("epsilon must be > 0");
  if (!(opt.rho() > 0 && opt.rho() < 1)) return bad("rho must be in (0, 1)");
  if (!(opt.weight_decay() >= 0)) return bad("weight_decay must be >= 0");
  if (!(opt.clip_norm() >= 0)) return bad("clip_norm must be >= 0");
  if (!(opt.decay_rate() < 0)) return bad("decay_rate must be < 0");
  if (!(opt.clip_threshold() > 0)) return bad("clip_threshold must be > 0");
  const LrSchedule& sched = opt.schedule();
  switch (sched.type()) {
    case CONSTANT:
      break;
    case WARMUP_COSINE:
      if (sched.warmup_clocks() < 0 || sched.decay_clocks() < 0) {
        return bad("schedule.warmup_clocks and decay_clocks must be >= 0");
      }
      if (!(sched.min_lr() >= 0 && sched.min_lr() <= opt.learning_rate())) {
        return bad("schedule.min_lr must be in [0, learning_rate]");
      }
      break;
    case STEP_DECAY:
      if (sched.step_size() < 1) return bad("schedule.step_size must be >= 1 for STEP_DECAY");
      if (!(sched.gamma() > 0 && sched.gamma() <= 1))
        return bad("schedule.gamma must be in (0, 1]");
      break;
    default:
      return bad("schedule.type ", sched.type(), " is unknown");
  }
  return absl::OkStatus();
}

absl::StatusOr<OptimizerSpec> WithHyper(const OptimizerSpec& job, const OptimizerSpec& hyper) {
  if (hyper.type() != OPTIMIZER_UNSPECIFIED && hyper.type() != job.type()) {
    return absl::InvalidArgumentError(
        absl::StrCat("hyperparameters: type ", OptimizerType_Name(hyper.type()),
                     " is not the job's optimizer ", OptimizerType_Name(job.type())));
  }
  if (hyper.has_schedule() || hyper.clip_norm() != 0 || hyper.allow_nonfinite()) {
    return absl::InvalidArgumentError(
        "hyperparameters: schedule, clip_norm and allow_nonfinite are the job's");
  }
  OptimizerSpec merged = job;
  merged.MergeFrom(hyper);
  if (absl::Status st = ValidateOptimizer(merged); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("hyperparameters: ", st.message()));
  }
  return merged;
}

}  // namespace pstrain
