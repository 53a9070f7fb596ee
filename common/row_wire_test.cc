// The rows' wire against protobuf's own encoding of the same messages:
// what WithPayload writes parses with the generated classes, what they
// write ReadWithPayload reads, and a malformed message is refused.
#include "common/row_wire.h"

#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "proto/ps.pb.h"

namespace pstrain {
namespace {

std::string Bytes(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

grpc::ByteBuffer BufferOf(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

PushRowsRequest Head() {
  PushRowsRequest head;
  head.set_worker_id(3);
  head.set_table("words");
  head.add_ids(7);
  head.add_ids(uint64_t{1} << 63);
  head.set_dtype(BF16);
  head.set_clock(12);
  head.set_num_samples(64);
  return head;
}

TEST(RowWireTest, WhatItWritesIsTheMessageProtobufReads) {
  auto values = std::make_unique<std::vector<float>>(std::vector<float>{1.5f, -2, 3e-7f});
  grpc::ByteBuffer wire = WithPayload(Head(), PushRowsRequest::kGradsFieldNumber,
                                      SliceOf(std::move(values)));
  PushRowsRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(Bytes(wire)));
  PushRowsRequest expected = Head();
  const float floats[3] = {1.5f, -2, 3e-7f};
  expected.set_grads(std::string(reinterpret_cast<const char*>(floats), sizeof(floats)));
  EXPECT_EQ(parsed.SerializeAsString(), expected.SerializeAsString());
}

TEST(RowWireTest, ReadsWhatProtobufWritesInAnyFieldOrder) {
  PushRowsRequest sent = Head();
  sent.set_grads("abcdefgh");
  // Protobuf writes the fields by number: grads (5) before clock (6).
  std::string taken;
  PushRowsRequest head;
  const absl::Status st = ReadWithPayload(
      BufferOf(sent.SerializeAsString()), &head, PushRowsRequest::kGradsFieldNumber,
      [&](size_t bytes, const ReadPayload& read) {
        taken.resize(bytes);
        return read(taken.data(), bytes) ? absl::OkStatus() : absl::DataLossError("short");
      });
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(taken, "abcdefgh");
  EXPECT_EQ(head.SerializeAsString(), Head().SerializeAsString());
  // No payload: `take` hears of 0 bytes.
  size_t heard = 99;
  ASSERT_TRUE(ReadWithPayload(BufferOf(Head().SerializeAsString()), &head,
                              PushRowsRequest::kGradsFieldNumber,
                              [&](size_t bytes, const ReadPayload&) {
                                heard = bytes;
                                return absl::OkStatus();
                              })
                  .ok());
  EXPECT_EQ(heard, 0u);
}

TEST(RowWireTest, MalformedMessagesAreRefused) {
  PushRowsRequest sent = Head();
  sent.set_grads(std::string(64, 'x'));
  const std::string whole = sent.SerializeAsString();
  auto read_all = [](size_t bytes, const ReadPayload& read) {
    std::string to(bytes, '\0');
    return read(to.data(), bytes) ? absl::OkStatus() : absl::DataLossError("cut short");
  };
  PushRowsRequest head;
  for (size_t cut : {whole.size() - 1, whole.size() - 40, size_t{5}}) {
    const absl::Status st = ReadWithPayload(BufferOf(whole.substr(0, cut)), &head,
                                            PushRowsRequest::kGradsFieldNumber, read_all);
    EXPECT_FALSE(st.ok()) << "cut at " << cut;
  }
  // A reader that leaves bytes behind, and the field twice.
  EXPECT_EQ(ReadWithPayload(BufferOf(whole), &head, PushRowsRequest::kGradsFieldNumber,
                            [](size_t, const ReadPayload&) { return absl::OkStatus(); })
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadWithPayload(BufferOf(whole + whole), &head, PushRowsRequest::kGradsFieldNumber,
                            read_all)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pstrain
