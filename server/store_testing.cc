#include "server/store_testing.h"

#include "common/job_spec.h"
#include "gtest/gtest.h"

namespace pstrain {

JobSpec SmallDenseJob(Consistency mode, int workers, float clip_norm) {
  JobSpec job;
  job.mutable_data()->set_dataset(SYNTHETIC);
  job.mutable_data()->set_synthetic_dim(4);
  job.mutable_data()->set_synthetic_classes(2);
  LayerSpec* dense = job.mutable_model()->add_layers();
  dense->set_type(DENSE);
  dense->set_units(2);
  job.mutable_model()->add_layers()->set_type(SOFTMAX_XENT);
  job.mutable_optimizer()->set_type(SGD);
  job.mutable_optimizer()->set_learning_rate(0.5f);
  job.mutable_optimizer()->set_clip_norm(clip_norm);
  job.set_consistency(mode);
  if (mode == SSP) job.set_staleness(1);
  job.set_num_workers(workers);
  job.set_batch_size(8);
  job.set_seed(3);
  ApplyJobDefaults(&job);
  EXPECT_TRUE(ValidateJobSpec(job).ok()) << ValidateJobSpec(job);
  return job;
}

std::vector<float> ReadChunk(const ChunkStore& store, int32_t chunk) {
  std::vector<float> out(store.ChunkNumel(chunk));
  PulledClocks clocks;
  EXPECT_TRUE(
      store.Read(0, 0, 0, chunk, FP32, reinterpret_cast<char*>(out.data()), &clocks).ok());
  return out;
}

}  // namespace pstrain
