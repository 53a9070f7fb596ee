#include "server/row_requests.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/row_wire.h"
#include "common/rpc.h"
#include "common/status_macros.h"

namespace pstrain {
RowRequests::RowRequests(std::shared_ptr<SparseTables> tables, RequestCounters* counters)
    : tables_(std::move(tables)), counters_(counters) {}

absl::Status RowRequests::CheckPull(const grpc::ByteBuffer& raw, PullRowsRequest* req) const {
  if (!ParseSmall(raw, req) || !DType_IsValid(req->dtype())) {
    tables_->CountRefused();
    return absl::InvalidArgumentError("pull rows: malformed request (or an unknown dtype)");
  }
  const absl::Status st = tables_->CheckPull(req->worker_id(), req->generation(), req->table(),
                                             req->home(), req->ids(), req->min_clock());
  if (!st.ok()) return Prefixed("pull rows: ", st);
  return absl::OkStatus();
}

bool RowRequests::Readable(const PullRowsRequest& req) const {
  return tables_->Readable(req.generation(), req.table(), req.home(), req.min_clock());
}

absl::Status RowRequests::FillPull(const PullRowsRequest& req, grpc::ByteBuffer* resp) {
  // The rows go out in the slice they were pulled into (fp32), or encoded
  // once into 16-bit values.
  auto rows = std::make_unique<std::vector<float>>();
  const absl::Status st = tables_->Pull(req.worker_id(), req.generation(), req.table(), req.home(),
                                        req.ids(), rows.get());
  if (!st.ok()) return Prefixed("pull rows: ", st);
  const int64_t values = static_cast<int64_t>(rows->size());
  const int64_t wire = values * static_cast<int64_t>(DTypeSize(req.dtype()));
  grpc::Slice payload;
  if (req.dtype() == FP32) {
    payload = SliceOf(std::move(rows));
  } else {
    payload = grpc::Slice(static_cast<size_t>(wire));
    EncodeFloats(req.dtype(), rows->data(), values,
                 reinterpret_cast<char*>(const_cast<uint8_t*>(payload.begin())));
  }
  counters_->bytes_out += wire;
  *resp = WithPayload(PullRowsResponse(), PullRowsResponse::kRowsFieldNumber, std::move(payload));
  return absl::OkStatus();
}

absl::Status RowRequests::Push(const grpc::ByteBuffer& raw, grpc::ByteBuffer* resp,
                               PushRowsRequest* taken) {
  // The gradients' bytes go straight into `grads` (their dtype may come
  // after them on the wire: 16-bit values are decoded once it is known).
  PushRowsRequest req;
  std::vector<float> grads;
  size_t wire = 0;
  absl::Status read = ReadWithPayload(
      raw, &req, PushRowsRequest::kGradsFieldNumber,
      [&](size_t bytes, const ReadPayload& read_payload) -> absl::Status {
        // Before anything is allocated for them (decoded, the tables check
        // them again).
        RETURN_IF_ERROR(CheckRowBytes(static_cast<int64_t>(bytes), "the gradients"));
        wire = bytes;
        grads.resize((bytes + 3) / 4);
        if (!read_payload(grads.data(), bytes)) {
          return absl::InvalidArgumentError("malformed message: the gradients are cut short");
        }
        return absl::OkStatus();
      });
  if (read.ok() && !DType_IsValid(req.dtype())) read = absl::InvalidArgumentError("unknown dtype");
  if (!read.ok()) {
    tables_->CountRefused();
    return absl::InvalidArgumentError(
        absl::StrCat("push rows: malformed request: ", read.message()));
  }
  const size_t width = DTypeSize(req.dtype());
  if (wire % width != 0) {
    tables_->CountRefused();
    return absl::InvalidArgumentError(absl::StrCat(
        "push rows: ", wire, " bytes of gradients are not ", "whole values of ", width, " bytes"));
  }
  if (req.dtype() != FP32) {
    std::vector<float> decoded(wire / width);
    DecodeFloats(req.dtype(), reinterpret_cast<const char*>(grads.data()),
                 static_cast<int64_t>(decoded.size()), decoded.data());
    grads = std::move(decoded);
  }
  const absl::Status st = tables_->Push(req.worker_id(), req.generation(), req.table(), req.home(),
                                        req.clock(), req.num_samples(), req.ids(), grads);
  if (!st.ok()) return Prefixed("push rows: ", st);
  req.clear_ids();
  *taken = std::move(req);
  counters_->bytes_in += static_cast<int64_t>(wire);
  *resp = SerializeSmall(PushRowsResponse());
  return absl::OkStatus();
}

bool RowRequests::PushReplicated(const PushRowsRequest& taken) const {
  return tables_->Replicated(taken.home(), taken.table(), taken.worker_id(), taken.clock());
}

bool RowRequests::PushServed(const PushRowsRequest& taken) const {
  return tables_->Served(taken.home(), taken.table());
}

}  // namespace pstrain
