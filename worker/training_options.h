// How this worker trains: one struct from the command line to the clock
// loop. ps_worker's main fills it (WorkerConfig::training), the runtime
// settles what depends on the job and the device (worker_runtime.cc:
// overlap, loss scaling, recompute), the trainer narrows what the job or
// the memory plan rules out (worker/trainer.cc: overlap), and the clock
// loop reads it (ClockLoopOptions::training).
#ifndef PSTRAIN_WORKER_TRAINING_OPTIONS_H_
#define PSTRAIN_WORKER_TRAINING_OPTIONS_H_

#include <cstdint>
#include <string>

#include "worker/straggler.h"

namespace pstrain {

struct TrainingOptions {
  // Push each layer's gradients as soon as the backward has them, and under
  // SSP/ASP pull the next clock's weights while this one computes
  // (--overlap). Used when nothing needs the whole gradient first: no
  // accumulation, no fp16 loss scaling, no clipping by the push's norm
  // (SSP/ASP).
  bool overlap = false;
  // fp16 compute (--compute_dtype=fp16): dynamic loss scaling.
  bool loss_scaling = false;
  // Evaluates on the test set at each epoch's end (replica 0 only).
  bool eval_each_epoch = true;
  // This worker's injected straggler delay of the clock (--straggler; the
  // tests' fixed slowdown is fixed:MS).
  StragglerSpec straggler;
  // A GPT recomputes its blocks' activations in the backward (--recompute).
  bool recompute = false;
  // --device_memory_budget (bytes, 0: none): a GPT is windowed under it.
  int64_t device_memory_budget = 0;
  // Writes the final weights as a binary pstrain.TensorSet here ("": none).
  std::string weights_out;
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_TRAINING_OPTIONS_H_
