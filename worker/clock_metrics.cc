#include "worker/clock_metrics.h"

namespace pstrain {

void SetLoopStatus(const ClockMetrics& m, MemberStatus* st) {
  st->set_clock(m.clock);
  st->mutable_worker()->set_loss(m.loss);
  st->mutable_worker()->set_samples_per_s(m.samples_per_s);
  st->mutable_worker()->set_test_accuracy(m.test_accuracy);
  st->mutable_worker()->set_peak_device_bytes(m.peak_device_bytes);
  st->mutable_worker()->set_attention_path(m.attention_path);
  st->mutable_worker()->set_loss_scale(m.loss_scale);
  st->mutable_worker()->set_gate_ms(m.window.gate_ms());
  st->mutable_worker()->set_pull_ms(m.window.pull_ms());
  st->mutable_worker()->set_compute_ms(m.window.compute_ms());
  st->mutable_worker()->set_push_ms(m.window.push_ms());
  st->mutable_worker()->set_rpcs_per_clock(m.window.rpcs());
  st->mutable_worker()->set_bytes_per_clock(m.window.bytes());
  st->mutable_worker()->set_train_s(m.train_s);
  st->mutable_worker()->set_clocks_trained(m.clocks_trained);
  *st->mutable_worker()->mutable_run_split() = m.run;
  st->mutable_worker()->set_skipped_steps(m.skipped_steps);
  st->set_bytes_in(m.bytes_in);
  st->set_bytes_out(m.bytes_out);
  st->set_shm_bytes(m.shm_bytes);
  st->set_shm_segments(m.shm_segments);
  st->set_shm_rings(m.shm_rings);
  st->set_pushes(m.pushes);
  st->set_pulls(m.pulls);
  st->set_generation(m.generation);
  st->mutable_worker()->mutable_pipeline()->set_bubble(m.bubble);
  st->mutable_worker()->mutable_pipeline()->set_activations_in_flight(m.max_in_flight);
  st->mutable_worker()->mutable_pipeline()->set_activation_wait_ms(m.activation_wait_ms);
  st->mutable_worker()->mutable_pipeline()->set_gradient_wait_ms(m.gradient_wait_ms);
  st->mutable_worker()->mutable_pipeline()->set_activation_bytes_sent(m.activation_bytes_sent);
  st->mutable_worker()->mutable_pipeline()->set_gradient_bytes_sent(m.gradient_bytes_sent);
}

}  // namespace pstrain
