// Compressed pushes at the server's door (ChunkRequests::Push): a chunk
// that came compressed is applied exactly as its decoded values would be
// had they come dense, a small chunk beside it stays dense, and a
// malformed compression or payload refuses the whole push
// (INVALID_ARGUMENT) with nothing of it applied.
#include <cstring>
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

GradCompression Spec(GradCompression::Codec codec) {
  GradCompression spec;
  spec.set_codec(codec);
  spec.set_ratio(0.25f);  // TOP_K: 2 of chunk 0's 8
  spec.set_block(8);      // SIGN: one scale for chunk 0
  spec.set_min_numel(4);  // chunk 1's 2 biases stay dense
  return WithCompressionDefaults(spec);
}

// SmallDenseJob's one worker under BSP (each push closes its round), with
// `compression`: chunk 0 holds the 8 weights, chunk 1 the 2 biases.
struct Server {
  explicit Server(const GradCompression& compression) : job(SmallDenseJob(BSP, 1)) {
    *job.mutable_compression() = compression;
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

// A push of clock 0 of `chunks` (chunk 0 as `compressed`, dense `weights`
// when that is empty; chunk 1 dense).
struct PushOf {
  std::vector<float> weights = std::vector<float>(8, 1.0f);
  std::vector<char> compressed;
  std::vector<float> biases = {0.25f, -0.5f};
  std::string compression;
  std::vector<int32_t> chunks = {0, 1};
  bool initial_values = false;

  grpc::ByteBuffer Encode() const {
    PushHeader h;
    h.num_samples = 8;
    h.compression = compression;
    h.initial_values = initial_values;
    std::vector<PushChunk> parts;
    for (int32_t chunk : chunks) {
      if (chunk == 1) {
        parts.push_back({1, biases.data(), 2});
        continue;
      }
      parts.push_back({0, weights.data(), 8});
      if (!compressed.empty()) {
        parts.back().compressed = compressed.data();
        parts.back().compressed_bytes = static_cast<int64_t>(compressed.size());
      }
    }
    return EncodePush(h, parts);
  }
};

TEST(CompressedPushTest, AppliesTheDecodedValuesAsADensePushOfThemWould) {
  const std::vector<float> g = {0.1f, -3.0f, 0.2f, 2.0f, -0.3f, 0.05f, 1.5f, -1.0f};
  for (const auto codec : {GradCompression::TOP_K, GradCompression::SIGN}) {
    const GradCompression spec = Spec(codec);
    ASSERT_TRUE(Compresses(spec, 8));
    ASSERT_FALSE(Compresses(spec, 2));
    std::vector<float> residual(8, 0.0f), decoded(8);
    PushOf compressed;
    compressed.compressed.resize(EncodedBytes(spec, 8));
    EncodeWithFeedback(spec, g.data(), 8, residual.data(), compressed.compressed.data());
    compressed.compression = spec.SerializeAsString();
    ASSERT_TRUE(
        Decode(spec, compressed.compressed.data(), EncodedBytes(spec, 8), 8, decoded.data()).ok());
    if (codec == GradCompression::TOP_K) {
      EXPECT_EQ(decoded, (std::vector<float>{0, -3.0f, 0, 2.0f, 0, 0, 0, 0}));
    }
    PushOf dense;
    dense.weights = decoded;

    Server with(spec), without(spec);
    ASSERT_TRUE(with.requests->Push(compressed.Encode()).ok()) << codec;
    ASSERT_TRUE(without.requests->Push(dense.Encode()).ok()) << codec;
    for (int32_t chunk : {0, 1}) {
      EXPECT_EQ(ReadChunk(*with.store, chunk), ReadChunk(*without.store, chunk)) << codec;
    }
    EXPECT_EQ(with.counters.bytes_in, EncodedBytes(spec, 8) + 2 * 4) << "what came, compressed";
  }
}

std::vector<char> Words(const std::vector<uint32_t>& w) {
  std::vector<char> bytes(4 * w.size());
  std::memcpy(bytes.data(), w.data(), bytes.size());
  return bytes;
}

TEST(CompressedPushTest, AMalformedOneIsRefusedWholeAndNothingApplied) {
  const GradCompression topk = Spec(GradCompression::TOP_K);
  const GradCompression sign = Spec(GradCompression::SIGN);
  GradCompression other_ratio = topk;
  other_ratio.set_ratio(0.125f);
  struct Case {
    const char* what;
    GradCompression job;
    PushOf push;
  };
  std::vector<Case> cases;
  auto add = [&](const char* what, const GradCompression& job, std::vector<char> bytes,
                 const GradCompression& sent) {
    PushOf push;
    push.compressed = std::move(bytes);
    push.compression = sent.SerializeAsString();
    cases.push_back({what, job, push});
  };
  add("an index past the chunk", topk, Words({0, 8, 0, 0}), topk);
  add("indices out of order", topk, Words({3, 1, 0, 0}), topk);
  add("a payload of another size", topk, Words({0, 1, 0}), topk);
  add("another ratio than the job's", topk, Words({0, 1, 0, 0}), other_ratio);
  add("compressed in a job without compression", GradCompression(), Words({0, 1, 0, 0}), topk);
  std::vector<char> negative(5, 0);
  const float minus = -1.0f;
  std::memcpy(negative.data(), &minus, 4);
  add("a negative scale", sign, negative, sign);
  add("the same chunk twice", topk, Words({0, 1, 0, 0}), topk);
  cases.back().push.chunks = {0, 1, 0};
  add("initial values compressed", topk, Words({0, 1, 0, 0}), topk);
  cases.back().push.initial_values = true;
  for (const Case& c : cases) {
    Server server(c.job);
    const std::vector<float> weights = ReadChunk(*server.store, 0);
    const std::vector<float> bias = ReadChunk(*server.store, 1);
    const absl::Status st = server.requests->Push(c.push.Encode());
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << c.what;
    EXPECT_EQ(ReadChunk(*server.store, 0), weights) << c.what;
    EXPECT_EQ(ReadChunk(*server.store, 1), bias) << c.what << ": the dense chunk beside it";
  }
}

}  // namespace
}  // namespace pstrain
