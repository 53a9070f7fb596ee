#include "common/row_wire.h"

#include <string>

#include <grpcpp/support/proto_buffer_reader.h>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/wire_format_lite.h"

namespace pstrain {

using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedInputStream;
using google::protobuf::io::CodedOutputStream;
using google::protobuf::io::StringOutputStream;

grpc::Slice SliceOf(std::unique_ptr<std::vector<float>> values) {
  std::vector<float>* owned = values.release();
  return grpc::Slice(
      owned->data(), owned->size() * sizeof(float),
      [](void* v) { delete static_cast<std::vector<float>*>(v); }, owned);
}

grpc::ByteBuffer WithPayload(const google::protobuf::MessageLite& head, int field,
                             grpc::Slice payload) {
  std::string front;
  head.SerializeToString(&front);
  {
    StringOutputStream stream(&front);
    CodedOutputStream out(&stream);
    out.WriteTag(WireFormatLite::MakeTag(field, WireFormatLite::WIRETYPE_LENGTH_DELIMITED));
    out.WriteVarint64(payload.size());
  }
  grpc::Slice slices[2] = {grpc::Slice(front), std::move(payload)};
  return grpc::ByteBuffer(slices, 2);
}

absl::Status ReadWithPayload(
    const grpc::ByteBuffer& buffer, google::protobuf::MessageLite* head, int field,
    const std::function<absl::Status(size_t bytes, const ReadPayload&)>& take) {
  auto bad = [](auto&&... why) {
    return absl::InvalidArgumentError(absl::StrCat("malformed message: ", why...));
  };
  grpc::ByteBuffer shared(buffer);  // the same slices (the reader wants it mutable)
  grpc::ProtoBufferReader reader(&shared);
  CodedInputStream in(&reader);
  std::string rest;  // the other fields, as they came
  bool seen = false;
  {
    StringOutputStream stream(&rest);
    CodedOutputStream out(&stream);
    for (uint32_t tag = in.ReadTag(); tag != 0; tag = in.ReadTag()) {
      if (WireFormatLite::GetTagFieldNumber(tag) != field ||
          WireFormatLite::GetTagWireType(tag) != WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
        if (!WireFormatLite::SkipField(&in, tag, &out)) return bad("a field is cut short");
        continue;
      }
      uint32_t bytes = 0;
      if (seen) return bad("field ", field, " twice");
      if (!in.ReadVarint32(&bytes)) return bad("a length is cut short");
      seen = true;
      const int start = in.CurrentPosition();
      absl::Status st = take(bytes, [&in](void* to, size_t n) {
        return in.ReadRaw(to, static_cast<int>(n));
      });
      if (!st.ok()) return st;
      if (in.CurrentPosition() - start != static_cast<int>(bytes)) {
        return bad("field ", field, "'s ", bytes, " bytes were not all read");
      }
    }
    if (!in.ConsumedEntireMessage()) return bad("it ends inside a field");
  }
  if (!seen) {
    if (absl::Status st = take(0, [](void*, size_t n) { return n == 0; }); !st.ok()) return st;
  }
  if (!head->ParseFromString(rest)) return bad("its other fields do not parse");
  return absl::OkStatus();
}

}  // namespace pstrain
