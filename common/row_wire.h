// The sparse tables' requests and replies (PullRowsResponse's rows,
// PushRowsRequest's grads) with their one large bytes field in a slice of
// its own: written without copying the payload into a protobuf string and
// the message into a buffer, and read straight from the received slices
// into where the values go. What travels is the message's protobuf
// encoding all the same (the other fields first, the bytes field last), so
// a peer using the generated classes reads and writes it unchanged.
#ifndef PSTRAIN_COMMON_ROW_WIRE_H_
#define PSTRAIN_COMMON_ROW_WIRE_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include <grpcpp/support/byte_buffer.h>

#include "absl/status/status.h"
#include "google/protobuf/message_lite.h"

namespace pstrain {

// A slice that owns `values` (no copy; freed with the slice).
grpc::Slice SliceOf(std::unique_ptr<std::vector<float>> values);

// `head` (its field `field` unset) and then bytes field `field` holding
// `payload`: one protobuf message, the payload not copied.
grpc::ByteBuffer WithPayload(const google::protobuf::MessageLite& head, int field,
                             grpc::Slice payload);

// Reads `bytes` more bytes of the payload to `to`; false when the message
// ends first.
using ReadPayload = std::function<bool(void* to, size_t bytes)>;

// Parses `buffer` into `head`, except bytes field `field`: `take` is given
// its length (0 when the message has none) and a reader, and must read it
// all (its error is returned as it is). INVALID_ARGUMENT for a malformed
// message, a payload that `take` did not read whole, or the field twice.
absl::Status ReadWithPayload(const grpc::ByteBuffer& buffer, google::protobuf::MessageLite* head,
                             int field,
                             const std::function<absl::Status(size_t bytes, const ReadPayload&)>& take);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_ROW_WIRE_H_
