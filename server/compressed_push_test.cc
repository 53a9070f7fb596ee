// Compressed pushes at the server's door (ChunkRequests::Push): a chunk
// that came compressed is applied exactly as its decoded values would be
// had they come dense, a small chunk beside it stays dense, and a malformed
// compression or payload refuses the whole push (INVALID_ARGUMENT) with
// nothing of it applied.
#include <memory>
#include <string>
#include <vector>

#include "common/grad_codec.h"
#include "common/job_spec.h"
#include "common/partition.h"
#include "common/tensor_wire.h"
#include "gtest/gtest.h"
#include "server/chunk_requests.h"
#include "server/store_testing.h"

namespace pstrain {
namespace {

// SmallDenseJob's one worker under BSP (each push closes its round): chunk
// 0 holds the 8 weights, chunk 1 the 2 biases.
struct Server {
  Server() : job(SmallDenseJob(BSP, 1)) {
    const Partition partition =
        Partition::Make(ModelParams(job.model()), job.chunk_bytes(), 1).value();
    store = std::make_shared<ChunkStore>(job, partition, 0, MakeOptimizer(job.optimizer()).value(),
                                         nullptr, nullptr);
    requests = std::make_unique<ChunkRequests>(
        store, TotalClocks(job), ShmLayout::OfServer(partition, 0), nullptr, &counters, nullptr);
  }
  JobSpec job;
  std::shared_ptr<ChunkStore> store;
  RequestCounters counters;
  std::unique_ptr<ChunkRequests> requests;
};

GradCompression TopK() {
  GradCompression spec;
  spec.set_codec(GradCompression::TOP_K);
  spec.set_ratio(0.5f);   // 4 of chunk 0's 8
  spec.set_min_numel(4);  // chunk 1's 2 biases stay dense
  return WithCompressionDefaults(spec);
}

// A push of clock 0: chunk 0 as `encoded` (dense `weights` when empty),
// chunk 1 dense.
grpc::ByteBuffer Push(const std::vector<float>& weights, const std::vector<char>& encoded,
                      const std::vector<float>& biases, const std::string& compression) {
  PushHeader h;
  h.num_samples = 8;
  h.compression = compression;
  std::vector<PushChunk> chunks = {{0, weights.data(), 8}, {1, biases.data(), 2}};
  if (!encoded.empty()) {
    chunks[0].encoded = encoded.data();
    chunks[0].encoded_bytes = static_cast<int64_t>(encoded.size());
  }
  return EncodePush(h, chunks);
}

TEST(CompressedPushTest, AppliesTheDecodedValuesAsADensePushOfThemWould) {
  const GradCompression spec = TopK();
  const std::vector<float> g = {0.1f, -3.0f, 0.2f, 2.0f, -0.3f, 0.05f, 1.5f, -1.0f};
  const std::vector<float> biases = {0.25f, -0.5f};
  std::vector<float> residual(8, 0.0f), decoded(8);
  std::vector<char> encoded(EncodedBytes(spec, 8));
  EncodeWithFeedback(spec, g.data(), 8, residual.data(), encoded.data());
  ASSERT_TRUE(Decode(spec, encoded.data(), 32, 8, decoded.data()).ok());
  EXPECT_EQ(decoded, (std::vector<float>{0, -3.0f, 0, 2.0f, 0, 0, 1.5f, -1.0f}));

  Server compressed, dense;
  ASSERT_TRUE(compressed.requests->Push(Push(g, encoded, biases, spec.SerializeAsString())).ok());
  ASSERT_TRUE(dense.requests->Push(Push(decoded, {}, biases, "")).ok());
  for (int32_t chunk : {0, 1}) {
    EXPECT_EQ(ReadChunk(*compressed.store, chunk), ReadChunk(*dense.store, chunk)) << chunk;
  }
  EXPECT_EQ(compressed.counters.bytes_in, 32 + 2 * 4);  // what came, compressed
}

TEST(CompressedPushTest, AMalformedOneIsRefusedWholeAndNothingApplied) {
  const GradCompression spec = TopK();
  const std::vector<float> g(8, 1.0f), biases = {0.25f, -0.5f};
  auto words = [](std::vector<uint32_t> w) {
    std::vector<char> bytes(4 * w.size());
    std::memcpy(bytes.data(), w.data(), bytes.size());
    return bytes;
  };
  GradCompression out_of_range = spec;
  out_of_range.set_ratio(0.9f);
  GradCompression no_codec = spec;
  no_codec.set_codec(GradCompression::NONE);
  struct Case {
    const char* what;
    std::vector<char> encoded;
    std::string compression;
  };
  const Case cases[] = {
      {"an index past the chunk", words({0, 1, 2, 8, 0, 0, 0, 0}), spec.SerializeAsString()},
      {"indices out of order", words({0, 2, 1, 3, 0, 0, 0, 0}), spec.SerializeAsString()},
      {"a payload of another size", words({0, 1, 2, 3, 0, 0, 0}), spec.SerializeAsString()},
      {"a ratio out of range", words({0, 1, 2, 3, 0, 0, 0, 0}), out_of_range.SerializeAsString()},
      {"no codec", words({0, 1, 2, 3, 0, 0, 0, 0}), no_codec.SerializeAsString()},
  };
  for (const Case& c : cases) {
    Server server;
    const std::vector<float> weights = ReadChunk(*server.store, 0);
    const std::vector<float> bias = ReadChunk(*server.store, 1);
    const grpc::Status st = server.requests->Push(Push(g, c.encoded, biases, c.compression));
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.what;
    EXPECT_EQ(ReadChunk(*server.store, 0), weights) << c.what;
    EXPECT_EQ(ReadChunk(*server.store, 1), bias) << c.what << ": the dense chunk beside it";
  }
}

}  // namespace
}  // namespace pstrain
