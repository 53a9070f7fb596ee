// A worker's shared memory with the parameter servers on its host, one link
// a server at most (common/shm_link.h): attached on first use, at most once
// an attempt of calls and kMaxTries times in the client's life (for good
// after a refusal that will not change: another host or network namespace,
// shared memory turned off), and dropped when its server no longer knows
// the segment (it restarted) -- kept mapped, though, until the calls that
// may still use it are done (ReleaseLost). Not thread-safe: the client's
// calling thread owns it.
#ifndef PSTRAIN_WORKER_SHM_LINKS_H_
#define PSTRAIN_WORKER_SHM_LINKS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/partition.h"
#include "common/shm.h"
#include "common/shm_link.h"

namespace pstrain {

class ShmLinks {
 public:
  // Attempts to attach a server's shared memory in one client's life.
  static constexpr int kMaxTries = 10;

  // Worker `worker_id`'s links to the servers at `addresses` (in the order
  // of their ids), whose segments lay out each server's chunks of
  // `partition` (with `standby_copies`, ShmLayout::OfServer); none are
  // tried unless `enabled`.
  ShmLinks(const std::vector<std::string>& addresses, const Partition& partition, int worker_id,
           bool enabled, int standby_copies = 0);
  ~ShmLinks();

  // Server `s`'s link in attempt `attempt` (attaching it first if it may be
  // tried now), or null: the payloads go in the messages.
  ShmLink* For(int s, uint64_t attempt);
  // Server `s` no longer knows `link`'s segment: the next calls carry their
  // payloads until a new segment is attached.
  void Lose(int s, ShmLink* link);
  // Server `s` listens at `address` now (a replacement): its link, if
  // any, is lost, and a new one may be tried.
  void Readdress(int s, const std::string& address);
  // No call holds a lost link any more: they go.
  void ReleaseLost() { lost_.clear(); }
  // Segments attached now.
  int attached() const { return attached_.load(std::memory_order_relaxed); }

 private:
  std::vector<std::string> addresses_;
  const int worker_id_;
  const bool enabled_;
  std::vector<ShmLayout> layouts_;               // [server]
  std::vector<std::unique_ptr<ShmLink>> links_;  // [server]; null: none
  std::vector<int> tries_;                       // [server]
  std::vector<uint64_t> asked_in_;               // [server]: the attempt it was last tried in
  std::vector<std::unique_ptr<ShmLink>> lost_;
  std::atomic<int> attached_{0};
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_SHM_LINKS_H_
