#include "server/answer_room.h"

#include <sys/mman.h>

#include "common/fault_in.h"

namespace pstrain {
namespace {

constexpr size_t kPage = 4096;

// What a slice over the room holds: the room, until gRPC drops the slice.
void Release(void* held) { delete static_cast<std::shared_ptr<AnswerRoom>*>(held); }

}  // namespace

AnswerRoom::AnswerRoom(int64_t bytes) {
  if (bytes <= 0) return;
  const size_t n = (static_cast<size_t>(bytes) + kPage - 1) / kPage * kPage;
  void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return;
  (void)madvise(p, n, MADV_HUGEPAGE);
  FaultIn(p, n);
  data_ = static_cast<char*>(p);
  bytes_ = n;
}

AnswerRoom::~AnswerRoom() {
  if (data_ != nullptr) munmap(data_, bytes_);
}

int64_t AnswerRoom::ChunkBytes(int64_t whole_bytes, int workers) {
  // The field tags and lengths, chunk, version, full, steps, has_values,
  // and each worker's applied clock as a varint: well within 128 + 11 a
  // worker.
  return whole_bytes + 128 + int64_t{11} * workers;
}

char* AnswerRoom::Take(size_t n) {
  if (data_ == nullptr) return nullptr;
  size_t at = used_.load();
  do {
    if (at + n > bytes_) return nullptr;
  } while (!used_.compare_exchange_weak(at, at + n));
  return data_ + at;
}

grpc::Slice AnswerRoom::SliceOf(const std::shared_ptr<AnswerRoom>& room, char* p, size_t n) {
  return grpc::Slice(p, n, &Release, new std::shared_ptr<AnswerRoom>(room));
}

}  // namespace pstrain
