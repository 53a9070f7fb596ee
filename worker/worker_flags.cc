#include "worker/worker_flags.h"

#include <cstdint>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/flags.h"
#include "common/status_macros.h"

ABSL_FLAG(std::string, overlap, "auto",
          "on, off or auto: push each parameter's (layer's) gradients while the backward goes "
          "on, and under SSP/ASP pull the next clock's weights while this one computes. auto: "
          "on for ps_worker (under BSP its forward waits for each layer's weights as they "
          "land) and for a PyTorch script's parameters on CUDA or under SSP/ASP; never when "
          "the job needs the whole gradient first "
          "(micro_batches > 1, fp16 loss scaling, SSP/ASP clipping)");
ABSL_FLAG(std::string, wire_dtype, "",
          "fp32, bf16 or fp16 for this worker's pushes and pulls (default: the job's wire_dtype)");
ABSL_FLAG(int64_t, channels_per_server, 2, "TCP connections to each server (1..64)");
ABSL_FLAG(bool, shm, true,
          "move pushes and pulls through shared memory with the servers on this host that "
          "grant it (the others, and every server on another host or network namespace, "
          "get them in gRPC messages); --noshm: always in the messages");
ABSL_FLAG(bool, shm_doorbell, true,
          "with --shm: send the pushes and pulls to servers attached through shared memory "
          "as frames on the segment's Unix socket instead of gRPC calls (--noshm_doorbell: "
          "gRPC calls, the payloads still in shared memory)");
ABSL_FLAG(int64_t, debug_hold_push, -1,
          "tests: the push of this iteration waits 30 s before it goes, so that a worker "
          "killed meanwhile never sends it; with --overlap, only the first layer's push "
          "(-1: none)");
ABSL_FLAG(int64_t, debug_delay_pull_param, -1,
          "tests: every pull brings this parameter (an index into the model's) 100 ms after "
          "the others, so that a forward not waiting for its layer's weights reads old ones "
          "(-1: none)");

namespace pstrain {

absl::StatusOr<WorkerFlags> WorkerFlagsFromFlags() {
  RETURN_IF_ERROR(
      CheckFlagNotEmpty("wire_dtype", GivenFlag(FLAGS_wire_dtype), "fp32, bf16 or fp16"));
  WorkerFlags flags;
  flags.overlap = absl::GetFlag(FLAGS_overlap);
  flags.wire_dtype = absl::GetFlag(FLAGS_wire_dtype);
  flags.channels_per_server = absl::GetFlag(FLAGS_channels_per_server);
  flags.shm = absl::GetFlag(FLAGS_shm);
  flags.shm_doorbell = absl::GetFlag(FLAGS_shm_doorbell);
  flags.debug_hold_push = absl::GetFlag(FLAGS_debug_hold_push);
  flags.debug_delay_pull_param = static_cast<int>(absl::GetFlag(FLAGS_debug_delay_pull_param));
  DType wire = FP32;
  RETURN_IF_ERROR(CheckWorkerFlags(flags, &wire));
  return flags;
}

absl::Status CheckWorkerFlags(const WorkerFlags& flags, DType* wire) {
  RETURN_IF_ERROR(CheckFlagChoice("overlap", flags.overlap, {"auto", "on", "off"}));
  if (!flags.wire_dtype.empty() && !ParseDType(flags.wire_dtype, wire)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--wire_dtype=", flags.wire_dtype, ": expected fp32, bf16 or fp16"));
  }
  return CheckFlagRanges(
      {{"channels_per_server", flags.channels_per_server, 1, kMaxChannelsPerServer},
       {"debug_hold_push", flags.debug_hold_push, -1},
       {"debug_delay_pull_param", flags.debug_delay_pull_param, -1, 1 << 20}});
}

}  // namespace pstrain
