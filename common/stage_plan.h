// How a pipelined job cuts its model into stages: every party (scheduler,
// servers, workers) derives the same plan from the job spec.
//
// The model is a chain of units, the places it may be cut: an MLP's units
// are its dense layers (each with the layers after it up to the next dense
// one), a GPT's are its blocks (the embeddings go with the first, the final
// LayerNorm and the head with the last). The units are split into
// `pipeline_stages` contiguous stages so that the costliest stage costs as
// little as it can (compute estimated in FLOPs per sample, forward and
// backward).
#ifndef PSTRAIN_COMMON_STAGE_PLAN_H_
#define PSTRAIN_COMMON_STAGE_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/job.pb.h"

namespace pstrain {

// One unit of a model: its parameters [first_param, end_param) in
// ModelParams() order, its estimated cost and a name ("dense0", "h3").
struct ModelUnit {
  std::string name;
  int first_param = 0, end_param = 0;
  double flops_per_sample = 0;
};

struct Stage {
  int first_unit = 0, end_unit = 0;    // [first, end) of the units
  int first_param = 0, end_param = 0;  // [first, end) of ModelParams()
  // MLP: the model spec's layers [first_layer, end_layer); GPT: the blocks.
  int first_layer = 0, end_layer = 0;
  double flops_per_sample = 0;
};

// The units of a completed, valid model spec, in order.
std::vector<ModelUnit> ModelUnits(const ModelSpec& model);

// Splits the units into `stages` contiguous stages, the costliest as cheap
// as possible (ties: the earlier cut). INVALID_ARGUMENT when there are fewer
// units than stages.
absl::StatusOr<std::vector<Stage>> PlanStages(const ModelSpec& model, int stages);

// The whole model (of at least one unit) as one stage.
Stage WholeModel(const ModelSpec& model);

// The units a stage covers: "dense0", "h2-h3".
std::string StageUnits(const std::vector<ModelUnit>& units, const Stage& stage);

// A line per stage for the log and Status: "stage 1: h2-h3 (12 params,
// 3.1 MFLOP/sample, 49%)".
std::string DescribeStages(const ModelSpec& model, const std::vector<Stage>& stages);

// Worker `worker`'s replica and stage in a job of `stages` stages.
inline int ReplicaOf(int worker, int stages) { return worker / stages; }
inline int StageOf(int worker, int stages) { return worker % stages; }

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_STAGE_PLAN_H_
