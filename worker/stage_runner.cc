#include "worker/stage_runner.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "worker/data/dataset.h"
#include "worker/pipeline_schedule.h"

namespace pstrain {

StageRunner::StageRunner(Model* model, PipelineSchedule schedule, int stage, int stages,
                         StageChannel* before, StageChannel* after)
    : model_(model),
      schedule_(schedule),
      stage_(stage),
      stages_(stages),
      before_(before),
      after_(after) {}

absl::StatusOr<StageTensor> StageRunner::Expect(StageChannel* from, int64_t clock, int micro,
                                                StageClock* stats) {
  const absl::Time start = absl::Now();
  absl::StatusOr<StageTensor> t = from->Receive();
  const double waited = absl::ToDoubleSeconds(absl::Now() - start);
  stats->waiting_s += waited;
  (from == before_ ? stats->activation_wait_s : stats->gradient_wait_s) += waited;
  if (!t.ok()) return t.status();
  if (t->clock != clock || t->micro != micro) {
    return absl::InvalidArgumentError(absl::StrCat("stage ", stage_, ": expected clock ", clock,
                                                   " micro-batch ", micro, ", got clock ", t->clock,
                                                   " micro-batch ", t->micro));
  }
  return t;
}

absl::Status StageRunner::Forward(int64_t clock, const Batch& part, int micro, StageClock* stats) {
  StageTensor in;
  if (before_ != nullptr) {
    ASSIGN_OR_RETURN(in, Expect(before_, clock, micro, stats));
  }
  int stash = 0;
  while (stash < static_cast<int>(stash_used_.size()) && stash_used_[stash]) ++stash;
  if (stash == static_cast<int>(stash_used_.size())) stash_used_.push_back(false);
  stash_used_[stash] = true;
  stash_of_[micro] = stash;
  int in_flight = 0;
  for (bool used : stash_used_) in_flight += used;
  stats->max_in_flight = std::max(stats->max_in_flight, in_flight);
  const absl::Time start = absl::Now();
  StageTensor out{clock, micro, {}};
  ASSIGN_OR_RETURN(const StepResult r,
                   model_->Forward(stash, part, &in.values, &out.values, /*train=*/true));
  stats->busy_s += absl::ToDoubleSeconds(absl::Now() - start);
  if (after_ != nullptr) return after_->Send(std::move(out));
  const double share = static_cast<double>(part.rows);
  total_.loss += static_cast<float>(r.loss * share);  // divided by the rows at the end
  total_.correct += r.correct;
  total_.predicted += r.predicted;
  return absl::OkStatus();
}

absl::Status StageRunner::Backward(int64_t clock, int micro, float share, StageClock* stats,
                                   std::vector<std::vector<float>>* grads) {
  StageTensor grad_out;
  if (after_ != nullptr) {
    ASSIGN_OR_RETURN(grad_out, Expect(after_, clock, micro, stats));
  }
  const absl::Time start = absl::Now();
  StageTensor grad_in{clock, micro, {}};
  RETURN_IF_ERROR(model_->Backward(stash_of_[micro], after_ != nullptr ? &grad_out.values : nullptr,
                                   &grad_in.values));
  stash_used_[stash_of_[micro]] = false;
  const std::vector<std::vector<float>>& g = model_->grads();
  for (size_t p = 0; p < g.size(); ++p) {
    std::vector<float>& acc = (*grads)[p];
    for (size_t i = 0; i < g[p].size(); ++i) acc[i] += share * g[p][i];
  }
  stats->busy_s += absl::ToDoubleSeconds(absl::Now() - start);
  if (before_ != nullptr) return before_->Send(std::move(grad_in));
  return absl::OkStatus();
}

absl::StatusOr<StepResult> StageRunner::Evaluate(int64_t tag, const Batch& batch) {
  StageClock stats;
  StageTensor in;
  if (before_ != nullptr) {
    ASSIGN_OR_RETURN(in, Expect(before_, tag, 0, &stats));
  }
  StageTensor out{tag, 0, {}};
  ASSIGN_OR_RETURN(const StepResult r,
                   model_->Forward(0, batch, &in.values, &out.values, /*train=*/false));
  if (after_ != nullptr) RETURN_IF_ERROR(after_->Send(std::move(out)));
  return r;
}

absl::StatusOr<StageClock> StageRunner::RunClock(int64_t clock, const Batch& batch,
                                                 int micro_batches,
                                                 std::vector<std::vector<float>>* grads) {
  grads->resize(model_->params().size());
  for (size_t p = 0; p < grads->size(); ++p) {
    (*grads)[p].assign(model_->params()[p].numel, 0.0f);
  }
  stash_of_.assign(micro_batches, -1);
  stash_used_.assign(stash_used_.size(), false);
  total_ = StepResult();
  StageClock stats;
  const int64_t down = after_ != nullptr ? after_->bytes_sent() : 0;
  const int64_t up = before_ != nullptr ? before_->bytes_sent() : 0;
  for (const PipeStep& step : StageSchedule(schedule_, stage_, stages_, micro_batches)) {
    const auto [begin, end] = EvenSlice(batch.rows, micro_batches, step.micro);
    const float share = static_cast<float>(end - begin) / static_cast<float>(batch.rows);
    if (step.op == PipeStep::kForward) {
      RETURN_IF_ERROR(Forward(clock, SliceBatch(batch, begin, end), step.micro, &stats));
    } else {
      RETURN_IF_ERROR(Backward(clock, step.micro, share, &stats, grads));
    }
  }
  if (after_ != nullptr) stats.activation_bytes_sent = after_->bytes_sent() - down;
  if (before_ != nullptr) stats.gradient_bytes_sent = before_->bytes_sent() - up;
  stats.result = total_;
  if (batch.rows > 0) stats.result.loss = total_.loss / static_cast<float>(batch.rows);
  return stats;
}

}  // namespace pstrain
