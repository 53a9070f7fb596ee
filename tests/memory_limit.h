// A memory limit the kernel enforces on the processes started under it, for
// tests that must fail when a daemon holds more than it should: a memory
// cgroup of its own when one can be made here (cgroup v2 with the memory
// controller, or cgroup v1's), else RLIMIT_DATA. Going over is an OOM kill
// (cgroup) or a failed allocation (RLIMIT_DATA).
#ifndef PSTRAIN_TESTS_MEMORY_LIMIT_H_
#define PSTRAIN_TESTS_MEMORY_LIMIT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pstrain {
namespace testing {

class MemoryLimit {
 public:
  enum Kind { kCgroupV2, kCgroupV1, kRlimitData };

  // A limit of `bytes` named after `name` (and this process). A cgroup
  // counts anonymous memory and the page cache the processes cause (which
  // the kernel reclaims before it kills); RLIMIT_DATA counts private
  // writable mappings, virtual (thread stacks are then 1 MiB). With
  // `allow_rlimit` false, only a cgroup will do (FAILED_PRECONDITION when
  // none can be made here); with it and PSTRAIN_MEMORY_LIMIT=rlimit in the
  // environment, RLIMIT_DATA even where a cgroup could be made.
  static absl::StatusOr<MemoryLimit> Make(const std::string& name, int64_t bytes,
                                          bool allow_rlimit);
  MemoryLimit(MemoryLimit&& other) noexcept;
  MemoryLimit& operator=(MemoryLimit&& other) = delete;
  ~MemoryLimit();  // removes the cgroup (its processes must have exited)

  // What a command line starts with to run under the limit (a shell that
  // joins the cgroup or sets the rlimit, then execs the command in its pid).
  std::vector<std::string> prefix() const;
  Kind kind() const { return kind_; }
  std::string Describe() const;
  int64_t bytes() const { return bytes_; }
  // Processes the kernel killed for going over (a cgroup's OOM kills; 0
  // for RLIMIT_DATA, where an allocation fails instead).
  int64_t OomKills() const;
  // The cgroup's peak usage, anonymous memory and page cache (-1 where the
  // kernel does not say).
  int64_t PeakBytes() const;

 private:
  MemoryLimit(Kind kind, std::string dir, int64_t bytes)
      : kind_(kind), dir_(std::move(dir)), bytes_(bytes) {}

  Kind kind_;
  std::string dir_;  // the cgroup's folder ("" for RLIMIT_DATA)
  int64_t bytes_;
};

}  // namespace testing
}  // namespace pstrain

#endif  // PSTRAIN_TESTS_MEMORY_LIMIT_H_
