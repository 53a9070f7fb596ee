// What a worker's clock loop has done, as its Status reports it: the one
// struct the loop (worker/clock_loop.h) fills and the one place its
// figures become WorkerStatus fields, for ps_worker, a PyTorch worker and
// a pipeline stage alike.
#ifndef PSTRAIN_WORKER_CLOCK_METRICS_H_
#define PSTRAIN_WORKER_CLOCK_METRICS_H_

#include <cstdint>
#include <string>

#include "proto/status.pb.h"

namespace pstrain {

// What the loop has done, for Status.
struct ClockMetrics {
  int64_t clock = 0;  // clocks finished
  int64_t generation = 0;
  double loss = 0;  // LoopStats::recent_loss()
  double samples_per_s = 0;
  double test_accuracy = -1;
  // Per clock: where the time went (ms), calls (the gate's and the
  // servers') and payload bytes; over the last progress window, and over
  // the whole run from the end of its first clock.
  ClockSplit window, run;
  double train_s = 0;  // the run's seconds in clocks (evaluations left out)
  int64_t clocks_trained = 0;
  double loss_scale = 1;
  int64_t skipped_steps = 0;
  int64_t bytes_in = 0, bytes_out = 0;
  int64_t shm_bytes = 0;  // of this generation's parameter client
  int shm_segments = 0;
  int64_t shm_rings = 0;
  int64_t pushes = 0, pulls = 0;  // clocks pushed; pulls made (not reads the cache served)
  int64_t peak_device_bytes = 0;
  std::string attention_path;  // the backend's (Status.attention_path)
  // Pipeline stages, per clock over the last window: the share of the
  // stage's time spent waiting for a neighbour, and the most micro-batches
  // whose activations it kept at once.
  double bubble = 0;
  int max_in_flight = 0;
  // Pipeline stages: the last clock's waits for activations and for
  // gradients, and the payload bytes sent so far each way.
  double activation_wait_ms = 0, gradient_wait_ms = 0;
  int64_t activation_bytes_sent = 0, gradient_bytes_sent = 0;
};

// The loop's figures into a worker's Status (clock, loss, throughput,
// where the time went, bytes, pipeline waits).
void SetLoopStatus(const ClockMetrics& m, MemberStatus* st);

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_CLOCK_METRICS_H_
