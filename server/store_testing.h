// What the server's unit tests share: a small job and a chunk read back.
#ifndef PSTRAIN_SERVER_STORE_TESTING_H_
#define PSTRAIN_SERVER_STORE_TESTING_H_

#include <cstdint>
#include <vector>

#include "proto/job.pb.h"
#include "server/chunk_store.h"

namespace pstrain {

// A job of one dense layer (chunk 0: its 8 weights, chunk 1: its 2 biases)
// on 4-dimensional synthetic data with 2 classes, batch 8, SGD with learning
// rate 0.5; SSP with staleness 1 when `mode` is SSP. Valid (checked).
JobSpec SmallDenseJob(Consistency mode, int workers, float clip_norm = 0);

// Chunk `chunk` of `store` as fp32, read at clock 0 of generation 0 (the
// read checked).
std::vector<float> ReadChunk(const ChunkStore& store, int32_t chunk);

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_STORE_TESTING_H_
