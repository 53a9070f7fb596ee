#include "worker/clock_metrics.h"

namespace pstrain {

void SetLoopStatus(const ClockMetrics& m, MemberStatus* st) {
  st->set_clock(m.clock);
  st->set_loss(m.loss);
  st->set_samples_per_s(m.samples_per_s);
  st->set_test_accuracy(m.test_accuracy);
  st->set_peak_device_bytes(m.peak_device_bytes);
  st->set_attention_path(m.attention_path);
  st->set_loss_scale(m.loss_scale);
  st->set_gate_ms(m.window.gate_ms());
  st->set_pull_ms(m.window.pull_ms());
  st->set_compute_ms(m.window.compute_ms());
  st->set_push_ms(m.window.push_ms());
  st->set_rpcs_per_clock(m.window.rpcs());
  st->set_bytes_per_clock(m.window.bytes());
  st->set_train_s(m.train_s);
  st->set_clocks_trained(m.clocks_trained);
  *st->mutable_run_split() = m.run;
  st->set_skipped_steps(m.skipped_steps);
  st->set_bytes_in(m.bytes_in);
  st->set_bytes_out(m.bytes_out);
  st->set_shm_bytes(m.shm_bytes);
  st->set_shm_segments(m.shm_segments);
  st->set_shm_rings(m.shm_rings);
  st->set_pushes(m.pushes);
  st->set_pulls(m.pulls);
  st->set_generation(m.generation);
  st->set_bubble(m.bubble);
  st->set_activations_in_flight(m.max_in_flight);
  st->set_activation_wait_ms(m.activation_wait_ms);
  st->set_gradient_wait_ms(m.gradient_wait_ms);
  st->set_activation_bytes_sent(m.activation_bytes_sent);
  st->set_gradient_bytes_sent(m.gradient_bytes_sent);
}

}  // namespace pstrain
