// The hand-laid wire format against protobuf's own encoder and parser, with
// messages cut into many slices, plus malformed input.
#include "common/tensor_wire.h"

#include <cstring>
#include <random>

#include "common/dtype.h"
#include "gtest/gtest.h"
#include "proto/ps.pb.h"

namespace pstrain {
namespace {

std::string Flatten(const grpc::ByteBuffer& b) {
  SliceReader r(b);
  std::string out(r.size(), '\0');
  EXPECT_TRUE(r.Copy(out.size(), out.data()));
  return out;
}

// `bytes` cut into slices of 1..7 bytes.
grpc::ByteBuffer Sliced(const std::string& bytes, uint32_t seed = 1) {
  std::mt19937 rng(seed);
  std::vector<grpc::Slice> slices;
  for (size_t i = 0; i < bytes.size();) {
    const size_t n = std::min<size_t>(bytes.size() - i, 1 + rng() % 7);
    slices.emplace_back(bytes.data() + i, n);
    i += n;
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

TEST(TensorWireTest, PushIsProtobufsEncoding) {
  std::vector<float> a = {1.5f, -2.25f, 3.0f}, b(1000);
  for (size_t i = 0; i < b.size(); ++i) b[i] = 0.001f * i;
  for (DType dtype : {FP32, BF16, FP16}) {
    PushHeader h{-3, 1234567890123LL, 17, dtype, 2.5f, 7};
    const grpc::ByteBuffer buf = EncodePush(h, {{0, a.data(), 3}, {41, b.data(), 1000}});
    PushRequest parsed;
    ASSERT_TRUE(parsed.ParseFromString(Flatten(buf)));
    EXPECT_EQ(parsed.worker_id(), -3);
    EXPECT_EQ(parsed.clock(), 1234567890123LL);
    EXPECT_EQ(parsed.num_samples(), 17);
    EXPECT_EQ(parsed.dtype(), dtype);
    EXPECT_EQ(parsed.grad_norm(), 2.5f);
    EXPECT_EQ(parsed.generation(), 7);
    EXPECT_FALSE(parsed.has_hyper());
    ASSERT_EQ(parsed.chunks_size(), 2);
    EXPECT_EQ(parsed.chunks(1).chunk(), 41);
    std::vector<float> back(1000);
    ASSERT_EQ(parsed.chunks(1).data().size(), 1000u * DTypeSize(dtype));
    DecodeFloats(dtype, parsed.chunks(1).data().data(), 1000, back.data());
    for (int i = 0; i < 1000; ++i) {
      const float want = dtype == FP32   ? b[i]
                         : dtype == BF16 ? Bf16ToFloat(FloatToBf16(b[i]))
                                         : HalfToFloat(FloatToHalf(b[i]));
      ASSERT_EQ(back[i], want);
    }
    // An upper bound (it assumes the widest chunk id), tight within 4 bytes.
    const int64_t actual = static_cast<int64_t>(parsed.chunks(1).ByteSizeLong()) + 3;
    EXPECT_GE(PushChunkWireBytes(dtype, 1000), actual);
    EXPECT_LE(PushChunkWireBytes(dtype, 1000), actual + 4);
  }
}

// Chunks without a gradient (PushRequest.without_gradient) go as a list
// of ids beside the payloads, both ways.
TEST(TensorWireTest, APushsChunksWithoutAGradientRoundTrip) {
  std::vector<float> a = {1.0f, 2.0f};
  PushHeader h;
  h.clock = 4;
  h.without_gradient = {3, 0, 70000};
  const grpc::ByteBuffer buf = EncodePush(h, {{9, a.data(), 2}});
  PushRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(Flatten(buf)));
  EXPECT_EQ(std::vector<int32_t>(parsed.without_gradient().begin(),
                                 parsed.without_gradient().end()),
            h.without_gradient);
  ASSERT_EQ(parsed.chunks_size(), 1);
  const grpc::ByteBuffer again = Sliced(parsed.SerializeAsString());
  SliceReader r(again);
  PushHeader back;
  std::vector<PayloadRef> refs;
  ASSERT_TRUE(DecodePush(r, &back, &refs).ok());
  EXPECT_EQ(back.without_gradient, h.without_gradient);
  ASSERT_EQ(refs.size(), 1u);
  EXPECT_EQ(refs[0].chunk, 9);
  // A negative id (protobuf's ten-byte varint) is malformed.
  parsed.add_without_gradient(-1);
  const grpc::ByteBuffer negative = Sliced(parsed.SerializeAsString());
  SliceReader n(negative);
  EXPECT_EQ(DecodePush(n, &back, &refs).code(), absl::StatusCode::kInvalidArgument);
}

TEST(TensorWireTest, APushsHyperparametersAreProtobufsEncoding) {
  OptimizerSpec hyper;
  hyper.set_learning_rate(0.5f);
  hyper.set_weight_decay(0.0f);  // present though zero
  PushHeader h;
  h.hyper = hyper.SerializeAsString();
  PushRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(Flatten(EncodePush(h, {}))));
  ASSERT_TRUE(parsed.has_hyper());
  EXPECT_EQ(parsed.hyper().learning_rate(), 0.5f);
  EXPECT_TRUE(parsed.hyper().has_weight_decay());
}

TEST(TensorWireTest, DecodesProtobufsPushAcrossSlices) {
  PushRequest req;
  req.set_worker_id(2);
  req.set_clock(9);
  req.set_num_samples(64);
  req.set_dtype(BF16);
  req.set_grad_norm(0.75f);
  req.set_generation(3);
  req.mutable_hyper()->set_learning_rate(0.25f);
  req.mutable_hyper()->set_beta1(0.8f);
  for (int c = 0; c < 3; ++c) {
    ChunkData* d = req.add_chunks();
    d->set_chunk(c * 5);  // the first id is 0, which proto3 leaves out
    d->set_data(std::string(10 + c, static_cast<char>('a' + c)));
  }
  const std::string bytes = req.SerializeAsString();
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    const grpc::ByteBuffer buf = Sliced(bytes, seed);
    SliceReader r(buf);
    PushHeader h;
    std::vector<PayloadRef> refs;
    ASSERT_TRUE(DecodePush(r, &h, &refs).ok());
    EXPECT_EQ(h.worker_id, 2);
    EXPECT_EQ(h.clock, 9);
    EXPECT_EQ(h.num_samples, 64);
    EXPECT_EQ(h.dtype, BF16);
    EXPECT_EQ(h.grad_norm, 0.75f);
    EXPECT_EQ(h.generation, 3);
    EXPECT_EQ(h.hyper, req.hyper().SerializeAsString());
    ASSERT_EQ(refs.size(), 3u);
    for (int c = 0; c < 3; ++c) {
      EXPECT_EQ(refs[c].chunk, c * 5);
      ASSERT_EQ(refs[c].bytes, 10u + c);
      std::string data(refs[c].bytes, '\0');
      r.Seek(refs[c].offset);
      ASSERT_TRUE(r.Copy(data.size(), data.data()));
      EXPECT_EQ(data, req.chunks(c).data());
    }
  }
}

TEST(TensorWireTest, PullResponseRoundTrips) {
  std::vector<int32_t> ids = {7, 0, 300000};
  std::vector<int64_t> bytes = {8, 0, 12};
  const grpc::ByteBuffer buf = EncodePullResponse(
      ids, bytes,
      [&](size_t i, char* dst) { std::memset(dst, 'x' + static_cast<int>(i), bytes[i]); },
      PulledClocks{{5, 0, 1LL << 40}, 61, 60});
  PullResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(Flatten(buf)));
  ASSERT_EQ(parsed.chunks_size(), 3);
  EXPECT_EQ(parsed.chunks(2).chunk(), 300000);
  EXPECT_EQ(parsed.chunks(2).data(), std::string(12, 'z'));
  ASSERT_EQ(parsed.applied_clock_size(), 3);
  EXPECT_EQ(parsed.applied_clock(2), 1LL << 40);
  // And back through our reader, from protobuf's own bytes cut into slices.
  const grpc::ByteBuffer again = Sliced(parsed.SerializeAsString());
  SliceReader r(again);
  std::vector<PayloadRef> refs;
  PulledClocks clocks;
  ASSERT_TRUE(DecodePullResponse(r, &refs, &clocks).ok());
  ASSERT_EQ(refs.size(), 3u);
  EXPECT_EQ(refs[0].chunk, 7);
  EXPECT_EQ(refs[0].bytes, 8u);
  EXPECT_EQ(refs[1].chunk, 0);
  EXPECT_EQ(refs[1].bytes, 0u);
  EXPECT_EQ(clocks.applied, (std::vector<int64_t>{5, 0, 1LL << 40}));
  EXPECT_EQ(clocks.own_applied_most, 61);
  EXPECT_EQ(clocks.own_held_least, 60);
}

// A compressed pull's reply that names views the server does not keep
// (PullResponse.views_unknown) carries them, and nothing else.
TEST(TensorWireTest, PullResponseNamesTheViewsUnknown) {
  PullResponse unknown;
  unknown.add_views_unknown(3);
  unknown.add_views_unknown(300000);
  const grpc::ByteBuffer buf = Sliced(unknown.SerializeAsString());
  SliceReader r(buf);
  std::vector<PayloadRef> refs;
  PulledClocks clocks;
  PulledViews views;
  views.unknown = {1};  // cleared first
  ASSERT_TRUE(DecodePullResponse(r, &refs, &clocks, &views).ok());
  EXPECT_TRUE(refs.empty());
  EXPECT_EQ(views.unknown, (std::vector<uint64_t>{3, 300000}));
  EXPECT_TRUE(views.views.empty());
}

TEST(TensorWireTest, MalformedInputIsAnError) {
  PushRequest req;
  req.set_clock(3);
  req.add_chunks()->set_data(std::string(100, 'q'));
  const std::string good = req.SerializeAsString();
  // Cut anywhere but right after the clock (which leaves a valid message).
  for (size_t cut = 1; cut < good.size(); ++cut) {
    if (cut == 2) continue;
    const grpc::ByteBuffer buf = Sliced(good.substr(0, cut));
    SliceReader r(buf);
    PushHeader h;
    std::vector<PayloadRef> refs;
    EXPECT_FALSE(DecodePush(r, &h, &refs).ok()) << "cut at " << cut;
  }
  // A length claiming far more than the message holds.
  std::string absurd = "\x2a\xff\xff\xff\xff\x0f";
  const grpc::ByteBuffer buf = Sliced(absurd);
  SliceReader r(buf);
  PushHeader h;
  std::vector<PayloadRef> refs;
  EXPECT_FALSE(DecodePush(r, &h, &refs).ok());
  // Field number 0 is not protobuf (a parser must not skip it as unknown).
  for (const std::string& zero : {std::string("\x00\x05", 2), std::string("\x02\x00", 2)}) {
    const grpc::ByteBuffer z = Sliced(zero);
    SliceReader zr(z);
    EXPECT_FALSE(DecodePush(zr, &h, &refs).ok());
  }
  // Random bytes never crash and never yield a payload past the end.
  std::mt19937 rng(5);
  for (int trial = 0; trial < 2000; ++trial) {
    std::string junk(rng() % 64, '\0');
    for (char& ch : junk) ch = static_cast<char>(rng());
    const grpc::ByteBuffer b = Sliced(junk, trial);
    SliceReader jr(b);
    PulledClocks clocks;
    if (DecodePullResponse(jr, &refs, &clocks).ok()) {
      for (const PayloadRef& ref : refs) EXPECT_LE(ref.offset + ref.bytes, junk.size());
    }
  }
}

}  // namespace
}  // namespace pstrain
