// The flags of a worker's parameter traffic that ps_worker and the PyTorch
// worker (libpstrain_torch.so, worker/external) both take, defined here
// once with their defaults and bounds: --overlap, --wire_dtype,
// --channels_per_server, --shm, --shm_doorbell and the tests'
// --debug_hold_push, --debug_delay_pull_param. (The member flags --
// scheduler, listen, id, ... -- are common/member_daemon's; each binary
// defines the rest itself.) A binary that links this library takes them.
#ifndef PSTRAIN_WORKER_WORKER_FLAGS_H_
#define PSTRAIN_WORKER_WORKER_FLAGS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/dtype.h"

namespace pstrain {

// The most TCP connections a worker opens to each server.
inline constexpr int kMaxChannelsPerServer = 64;

struct WorkerFlags {
  // auto, on or off: push each parameter's gradient as soon as the
  // backward has it, and under SSP/ASP prefetch the next clock's weights.
  // What auto means is the runtime's (worker_runtime.cc, external_worker.cc).
  std::string overlap = "auto";
  std::string wire_dtype;        // fp32, bf16 or fp16; "": the job's wire_dtype
  // TCP connections to each server, [1, kMaxChannelsPerServer].
  int64_t channels_per_server = 2;
  bool shm = true;               // PsClientOptions::shm
  bool shm_doorbell = true;      // PsClientOptions::shm_doorbell
  // Tests: PsClientOptions::debug_hold_push and debug_delay_pull_param
  // (-1: none).
  int64_t debug_hold_push = -1;
  int debug_delay_pull_param = -1;
};

// The flags' values, checked by CheckWorkerFlags (and a --wire_dtype given
// empty refused): INVALID_ARGUMENT naming the flag.
absl::StatusOr<WorkerFlags> WorkerFlagsFromFlags();

// The one check of these values, whether from the flags or set in code:
// INVALID_ARGUMENT naming the flag for an overlap other than auto, on or
// off, a wire_dtype other than fp32, bf16, fp16 or "", channels_per_server
// outside [1, kMaxChannelsPerServer]. *wire: the wire dtype, when given.
absl::Status CheckWorkerFlags(const WorkerFlags& flags, DType* wire);

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_WORKER_FLAGS_H_
