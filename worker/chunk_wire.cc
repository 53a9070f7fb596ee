#include "worker/chunk_wire.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/grad_codec.h"
#include "common/status_macros.h"

namespace pstrain {

const char* PulledPayloads::Bytes(const PayloadRef& ref, size_t n) {
  if (link_ != nullptr) return link_->PullSlot(ref.chunk);
  staging_.resize(n);
  reader_->Seek(ref.offset);
  reader_->Copy(n, staging_.data());
  return staging_.data();
}

void PulledPayloads::CopyTo(const PayloadRef& ref, size_t n, char* dst) {
  if (link_ != nullptr) {
    std::memcpy(dst, link_->PullSlot(ref.chunk), n);
    return;
  }
  reader_->Seek(ref.offset);
  reader_->Copy(n, dst);
}

void ChunkWire::NameHeldViews(PullRequest* req) const {
  req->clear_held();
  if (!PullsCompressed()) return;
  for (int32_t id : req->chunks()) req->add_held(held_views_->Id(id));
}

absl::Status ChunkWire::CheckViews(const std::vector<int32_t>& batch,
                                   const std::vector<PayloadRef>& refs,
                                   const PulledViews& views) const {
  if (refs.size() != batch.size() || (PullsCompressed() && (views.views.size() != batch.size() ||
                                                            views.bases.size() != batch.size()))) {
    return absl::DataLossError(
        absl::StrCat(refs.size(), " chunks (and their views), asked for ", batch.size()));
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> ChunkWire::TakePulled(const PayloadRef& ref, int32_t asked,
                                             const PulledViews& views, size_t k, PulledPayloads& at,
                                             float* dst) const {
  if (ref.chunk != asked) {
    return absl::DataLossError(
        absl::StrCat("chunk ", ref.chunk, " where ", asked, " was asked for"));
  }
  const int64_t numel = partition_->chunks()[ref.chunk].numel;
  const bool compressed = PullsCompressed();
  const size_t payload = compressed ? held_views_->PayloadBytes(views.bases[k], numel)
                                    : static_cast<size_t>(numel) * DTypeSize(dtype_);
  const size_t expected = at.in_segment() ? 0 : payload;  // a slot's bytes are not in the message
  if (ref.bytes != expected) {
    return absl::DataLossError(
        absl::StrCat("chunk ", ref.chunk, " has ", ref.bytes, " bytes, expected ", expected));
  }
  if (compressed) {  // the view held, moved on
    RETURN_IF_ERROR(held_views_->Take(ref.chunk, views.bases[k], views.views[k],
                                      at.Bytes(ref, payload), numel, dst));
  } else if (dtype_ == FP32) {
    at.CopyTo(ref, payload, reinterpret_cast<char*>(dst));
  } else {
    DecodeFloats(dtype_, at.Bytes(ref, payload), numel, dst);
  }
  return payload;
}

int64_t ChunkWire::EncodePush(const PushHeader& header, const std::vector<int32_t>& batch,
                              const std::vector<std::vector<float>>& grads,
                              const std::vector<const float*>* at, std::vector<PushChunk>* chunks,
                              std::vector<std::vector<char>>* compressed) const {
  const bool compressing = Compressing(header);
  compressed->resize(batch.size());
  int64_t bytes = 0;
  for (size_t j = 0; j < batch.size(); ++j) {
    const ChunkInfo& info = partition_->chunks()[batch[j]];
    const size_t mine = info.param - first_param_;
    const float* elsewhere = at != nullptr && mine < at->size() ? (*at)[mine] : nullptr;
    const float* values = (elsewhere != nullptr ? elsewhere : grads[mine].data()) + info.offset;
    chunks->push_back({batch[j], values, info.numel});
    if (compressing && Compresses(compression_, info.numel)) {
      feedback_->Encode(compression_, batch[j], generation_, header.clock, values, info.numel,
                        &(*compressed)[j]);
      bytes += static_cast<int64_t>((*compressed)[j].size());
    } else {
      bytes += info.numel * DTypeSize(header.dtype);
    }
  }
  return bytes;
}

void ChunkWire::WriteToSlots(DType dtype, const std::vector<PushChunk>& chunks,
                             const ShmLink& link) {
  for (const PushChunk& c : chunks) {
    char* slot = link.PushSlot(c.chunk);
    if (c.compressed != nullptr) {
      std::memcpy(slot, c.compressed, c.compressed_bytes);
    } else if (dtype == FP32) {
      std::memcpy(slot, c.values, c.numel * sizeof(float));
    } else {
      EncodeFloats(dtype, c.values, c.numel, slot);
    }
  }
}

}  // namespace pstrain
