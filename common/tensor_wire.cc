#include "common/tensor_wire.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "proto/ps.pb.h"

namespace pstrain {
namespace {

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLen = 2, kFixed32 = 5 };

// A push's hyperparameters (an OptimizerSpec of a few floats) are far
// smaller; a larger field is malformed.
constexpr uint64_t kMaxHyperBytes = 4096;
constexpr uint64_t kMaxCompressionBytes = 256;

void AppendVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

void AppendTag(std::string* out, uint32_t field, WireType type) {
  AppendVarint(out, (field << 3) | type);
}

// int32 fields are encoded as the sign-extended 64-bit varint.
uint64_t Int32Varint(int32_t v) { return static_cast<uint64_t>(static_cast<int64_t>(v)); }

// The ChunkData framing in front of a payload, as the `field` of its parent.
std::string ChunkPrefix(uint32_t field, int32_t chunk, uint64_t payload_bytes) {
  std::string inner;
  AppendTag(&inner, 1, kVarint);
  AppendVarint(&inner, Int32Varint(chunk));
  AppendTag(&inner, 2, kLen);
  AppendVarint(&inner, payload_bytes);
  std::string out;
  AppendTag(&out, field, kLen);
  AppendVarint(&out, inner.size() + payload_bytes);
  out += inner;
  return out;
}

absl::Status Malformed(const char* what) {
  return absl::InvalidArgumentError(absl::StrCat("malformed ", what));
}

// Skips a field of `type` whose tag was just read; false for field number
// 0, which protobuf does not allow.
bool SkipField(SliceReader& r, uint32_t field, uint32_t type) {
  uint64_t v = 0;
  if (field == 0) return false;
  switch (type) {
    case kVarint:
      return r.ReadVarint(&v);
    case kFixed64:
      return r.Skip(8);
    case kFixed32:
      return r.Skip(4);
    case kLen:
      return r.ReadVarint(&v) && v <= r.remaining() && r.Skip(v);
    default:
      return false;  // groups and unknown types
  }
}

// Reads a ChunkData of `length` bytes: its id and where its data lies.
bool ReadChunkData(SliceReader& r, uint64_t length, PayloadRef* ref) {
  if (length > r.remaining()) return false;
  const size_t end = r.position() + length;
  bool has_data = false;
  ref->chunk = 0;  // proto3 leaves a zero id out
  ref->bytes = 0;
  while (r.position() < end) {
    uint64_t tag = 0, v = 0;
    if (!r.ReadVarint(&tag)) return false;
    const uint32_t field = static_cast<uint32_t>(tag >> 3), type = tag & 7;
    if (field == 1 && type == kVarint) {
      if (!r.ReadVarint(&v)) return false;
      ref->chunk = static_cast<int32_t>(v);
    } else if (field == 2 && type == kLen) {
      if (!r.ReadVarint(&v) || v > end - r.position()) return false;
      ref->offset = r.position();
      ref->bytes = v;
      has_data = true;
      if (!r.Skip(v)) return false;
    } else if (!SkipField(r, field, type)) {
      return false;
    }
  }
  if (!has_data) ref->offset = end;
  return r.position() == end;
}

// A repeated varint field's values, packed (`type` kLen) or one (kVarint),
// appended to *out.
bool ReadVarints(SliceReader& r, uint32_t type, std::vector<uint64_t>* out) {
  uint64_t v = 0;
  if (type != kLen) {
    if (!r.ReadVarint(&v)) return false;
    out->push_back(v);
    return true;
  }
  if (!r.ReadVarint(&v) || v > r.remaining()) return false;
  const size_t end = r.position() + v;
  while (r.position() < end) {
    if (!r.ReadVarint(&v)) return false;
    out->push_back(v);
  }
  return r.position() == end;
}

}  // namespace

SliceReader::SliceReader(const grpc::ByteBuffer& buffer) {
  if (buffer.Valid()) (void)buffer.Dump(&slices_);
  starts_.reserve(slices_.size() + 1);
  for (const grpc::Slice& s : slices_) {
    starts_.push_back(size_);
    size_ += s.size();
  }
  starts_.push_back(size_);
}

void SliceReader::Seek(size_t position) {
  position = std::min(position, size_);
  slice_ = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), position) -
                               starts_.begin()) -
           1;
  if (slice_ >= slices_.size()) slice_ = slices_.size();  // at the end
  offset_ = position - starts_[slice_];
}

bool SliceReader::Copy(size_t n, char* dst) {
  if (n > remaining()) return false;
  while (n > 0) {
    const grpc::Slice& s = slices_[slice_];
    const size_t take = std::min(n, s.size() - offset_);
    if (dst != nullptr) {
      std::memcpy(dst, s.begin() + offset_, take);
      dst += take;
    }
    n -= take;
    offset_ += take;
    if (offset_ == s.size()) {
      ++slice_;
      offset_ = 0;
    }
  }
  return true;
}

const char* SliceReader::Contiguous(size_t position, size_t n) {
  if (position > size_ || n > size_ - position) return nullptr;
  Seek(position);
  if (slice_ >= slices_.size() || n > slices_[slice_].size() - offset_) return nullptr;
  return reinterpret_cast<const char*>(slices_[slice_].begin()) + offset_;
}

bool SliceReader::Skip(size_t n) {
  if (n > remaining()) return false;
  Seek(position() + n);
  return true;
}

bool SliceReader::ReadVarint(uint64_t* value) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    char byte;
    if (!Copy(1, &byte)) return false;
    v |= static_cast<uint64_t>(byte & 0x7F) << shift;
    if ((byte & 0x80) == 0) {
      *value = v;
      return true;
    }
  }
  return false;
}

bool SliceReader::ReadFixed32(uint32_t* value) {
  char b[4];
  if (!Copy(4, b)) return false;
  std::memcpy(value, b, 4);  // little-endian hosts only (x86-64, aarch64)
  return true;
}

int64_t PushChunkWireBytes(DType dtype, int64_t numel) {
  const int64_t payload = numel * DTypeSize(dtype);
  return static_cast<int64_t>(ChunkPrefix(5, INT32_MAX, payload).size()) + payload;
}

grpc::ByteBuffer EncodePush(const PushHeader& header, const std::vector<PushChunk>& chunks) {
  PushRequest fields;
  fields.set_worker_id(header.worker_id);
  fields.set_clock(header.clock);
  fields.set_num_samples(header.num_samples);
  fields.set_dtype(header.dtype);
  fields.set_grad_norm(header.grad_norm);
  fields.set_generation(header.generation);
  fields.set_checkpoint_clock(header.checkpoint_clock);
  fields.set_apply_at_once(header.apply_at_once);
  fields.set_initial_values(header.initial_values);
  fields.set_shm_segment(header.shm_segment);
  if (!header.hyper.empty()) fields.mutable_hyper()->ParseFromString(header.hyper);
  if (!header.compression.empty()) {
    fields.mutable_compression()->ParseFromString(header.compression);
  }
  fields.mutable_without_gradient()->Add(header.without_gradient.begin(),
                                         header.without_gradient.end());
  std::vector<grpc::Slice> slices;
  slices.reserve(1 + 2 * chunks.size());
  slices.emplace_back(fields.SerializeAsString());
  for (const PushChunk& c : chunks) {
    if (header.shm_segment != 0) {
      slices.emplace_back(ChunkPrefix(5, c.chunk, 0));
      continue;
    }
    if (c.compressed != nullptr) {
      const uint64_t payload = static_cast<uint64_t>(c.compressed_bytes);
      slices.emplace_back(ChunkPrefix(5, c.chunk, payload));
      slices.emplace_back(c.compressed, payload, grpc::Slice::STATIC_SLICE);
      continue;
    }
    const uint64_t payload = static_cast<uint64_t>(c.numel) * DTypeSize(header.dtype);
    slices.emplace_back(ChunkPrefix(5, c.chunk, payload));
    if (header.dtype == FP32) {
      slices.emplace_back(c.values, payload, grpc::Slice::STATIC_SLICE);
    } else {
      grpc::Slice s(payload);
      EncodeFloats(header.dtype, c.values, c.numel,
                   reinterpret_cast<char*>(const_cast<uint8_t*>(s.begin())));
      slices.push_back(std::move(s));
    }
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

absl::Status DecodePush(SliceReader& r, PushHeader* h, std::vector<PayloadRef>* chunks) {
  *h = PushHeader();
  chunks->clear();
  while (r.remaining() > 0) {
    uint64_t tag = 0, v = 0;
    if (!r.ReadVarint(&tag)) return Malformed("push: bad tag");
    const uint32_t field = static_cast<uint32_t>(tag >> 3), type = tag & 7;
    bool ok = true;
    if (type == kVarint && ((field >= 1 && field <= 4) || (field >= 7 && field <= 11))) {
      ok = r.ReadVarint(&v);
      if (field == 1) h->worker_id = static_cast<int32_t>(v);
      if (field == 2) h->clock = static_cast<int64_t>(v);
      if (field == 3) h->num_samples = static_cast<int32_t>(v);
      if (field == 4) h->dtype = static_cast<DType>(static_cast<int32_t>(v));
      if (field == 7) h->generation = static_cast<int64_t>(v);
      if (field == 8) h->checkpoint_clock = static_cast<int64_t>(v);
      if (field == 9) h->apply_at_once = v != 0;
      if (field == 10) h->initial_values = v != 0;
      if (field == 11) h->shm_segment = v;
    } else if (field == 5 && type == kLen) {
      PayloadRef ref;
      ok = r.ReadVarint(&v) && ReadChunkData(r, v, &ref);
      if (ok) chunks->push_back(ref);
    } else if (field == 6 && type == kFixed32) {
      uint32_t bits = 0;
      ok = r.ReadFixed32(&bits);
      if (ok) std::memcpy(&h->grad_norm, &bits, 4);
    } else if ((field == 12 || field == 13) && type == kLen) {
      std::string& bytes = field == 12 ? h->hyper : h->compression;
      const uint64_t most = field == 12 ? kMaxHyperBytes : kMaxCompressionBytes;
      ok = r.ReadVarint(&v) && v <= most && v <= r.remaining();
      if (ok) bytes.resize(v);
      ok = ok && r.Copy(v, bytes.data());
    } else if (field == 14 && (type == kLen || type == kVarint)) {
      std::vector<uint64_t> ids;
      ok = ReadVarints(r, type, &ids);
      for (uint64_t id : ids) {
        ok = ok && id <= static_cast<uint64_t>(std::numeric_limits<int32_t>::max());
        h->without_gradient.push_back(static_cast<int32_t>(id));
      }
    } else {
      ok = SkipField(r, field, type);
    }
    if (!ok) return Malformed("push: truncated or bad field");
  }
  return absl::OkStatus();
}

grpc::ByteBuffer EncodePullResponse(const std::vector<int32_t>& chunk_ids,
                                    const std::vector<int64_t>& payload_bytes,
                                    absl::FunctionRef<void(size_t, char*)> fill,
                                    const PulledClocks& clocks, const PulledViews* views) {
  std::vector<grpc::Slice> slices;
  slices.reserve(chunk_ids.size() + 1);
  for (size_t i = 0; i < chunk_ids.size(); ++i) {
    const std::string prefix = ChunkPrefix(1, chunk_ids[i], payload_bytes[i]);
    grpc::Slice s(prefix.size() + payload_bytes[i]);
    char* dst = reinterpret_cast<char*>(const_cast<uint8_t*>(s.begin()));
    std::memcpy(dst, prefix.data(), prefix.size());
    fill(i, dst + prefix.size());
    slices.push_back(std::move(s));
  }
  PullResponse tail;
  for (int64_t a : clocks.applied) tail.add_applied_clock(a);
  if (!chunk_ids.empty()) {
    tail.set_own_applied_most(clocks.own_applied_most);
    tail.set_own_held_least(clocks.own_held_least);
  }
  if (views != nullptr) {
    for (uint64_t v : views->views) tail.add_views(v);
    for (uint64_t b : views->bases) tail.add_bases(b);
  }
  slices.emplace_back(tail.SerializeAsString());
  return grpc::ByteBuffer(slices.data(), slices.size());
}

absl::Status DecodePullResponse(SliceReader& r, std::vector<PayloadRef>* chunks,
                                PulledClocks* clocks, PulledViews* views) {
  chunks->clear();
  *clocks = PulledClocks();
  std::vector<uint64_t> applied;
  PulledViews unused;
  if (views == nullptr) views = &unused;
  views->views.clear();
  views->bases.clear();
  views->unknown.clear();
  while (r.remaining() > 0) {
    uint64_t tag = 0, v = 0;
    if (!r.ReadVarint(&tag)) return Malformed("pull reply: bad tag");
    const uint32_t field = static_cast<uint32_t>(tag >> 3), type = tag & 7;
    bool ok = true;
    if (field == 1 && type == kLen) {
      PayloadRef ref;
      ok = r.ReadVarint(&v) && ReadChunkData(r, v, &ref);
      if (ok) chunks->push_back(ref);
    } else if (field >= 2 && field <= 5 && (type == kLen || type == kVarint)) {
      std::vector<uint64_t>* out = field == 2   ? &applied
                                   : field == 3 ? &views->views
                                   : field == 4 ? &views->bases
                                                : &views->unknown;
      ok = ReadVarints(r, type, out);
    } else if ((field == 6 || field == 7) && type == kVarint) {
      ok = r.ReadVarint(&v);
      (field == 6 ? clocks->own_applied_most : clocks->own_held_least) = static_cast<int64_t>(v);
    } else {
      ok = SkipField(r, field, type);
    }
    if (!ok) return Malformed("pull reply: truncated or bad field");
  }
  for (uint64_t a : applied) clocks->applied.push_back(static_cast<int64_t>(a));
  return absl::OkStatus();
}


std::string FlattenSmall(const grpc::ByteBuffer& buffer) {
  SliceReader r(buffer);
  std::string bytes(r.size(), '\0');
  r.Copy(bytes.size(), bytes.data());
  return bytes;
}

grpc::ByteBuffer BufferOf(std::string bytes) {
  grpc::Slice s(std::move(bytes));
  return grpc::ByteBuffer(&s, 1);
}

bool ParseSmall(const grpc::ByteBuffer& buffer, google::protobuf::MessageLite* message) {
  return message->ParseFromString(FlattenSmall(buffer));
}

grpc::ByteBuffer SerializeSmall(const google::protobuf::MessageLite& message) {
  grpc::Slice s(message.SerializeAsString());
  return grpc::ByteBuffer(&s, 1);
}

}  // namespace pstrain
