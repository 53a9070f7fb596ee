// The memory a move's holder writes its handover answers in (server/
// handover_requests.h): mapped and faulted in when the holder hears of the
// move, while training goes on, so that the answers at the switch clock --
// on the path the workers wait on -- are one copy from the chunks into
// memory already there, sent from where they lie (gRPC slices over the
// room, which they keep alive). Fresh memory is what an answer cost
// without it: on a loaded host, a VM above all, the first touch of a page
// costs more than copying it (measured on the 2-core VM: a 3 MB chunk's
// first answer 35-63 ms, the next ones 1-3 ms). No gRPC calls.
#ifndef PSTRAIN_SERVER_ANSWER_ROOM_H_
#define PSTRAIN_SERVER_ANSWER_ROOM_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "grpcpp/support/slice.h"

namespace pstrain {

class AnswerRoom {
 public:
  // `bytes` mapped and faulted in (none where the memory cannot be had:
  // every Take is null then).
  explicit AnswerRoom(int64_t bytes);
  ~AnswerRoom();
  AnswerRoom(const AnswerRoom&) = delete;
  AnswerRoom& operator=(const AnswerRoom&) = delete;

  // The room one chunk's answer takes at most: its weights' and optimizer
  // state's bytes, and its metadata for `workers` workers.
  static int64_t ChunkBytes(int64_t whole_bytes, int workers);
  // `n` bytes of it for one answer, or null once it is used up (the
  // answer takes memory as it comes then). Thread-safe.
  char* Take(size_t n);
  // A slice of `n` bytes at `p` (from `room`'s Take) that keeps `room`
  // alive until gRPC is done with it.
  static grpc::Slice SliceOf(const std::shared_ptr<AnswerRoom>& room, char* p, size_t n);

 private:
  char* data_ = nullptr;
  size_t bytes_ = 0;
  std::atomic<size_t> used_{0};
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_ANSWER_ROOM_H_
