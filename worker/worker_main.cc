// ps_worker: trains its id's share of every clock's global batch.
//
//   ps_worker --scheduler=HOST:PORT [--listen=HOST:PORT] [--device=auto|cpu|cuda[:N]]
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "common/flags.h"
#include "worker/straggler.h"
#include "worker/worker_flags.h"
#include "worker/worker_runtime.h"

// The member flags (--scheduler, --listen, --port_file, --id,
// --connect_timeout_s, --heartbeat_interval_ms) are common/member_daemon's;
// --overlap, --wire_dtype, --channels_per_server, --shm and --shm_doorbell
// are worker/worker_flags' (the PyTorch worker takes them too).
ABSL_FLAG(std::string, compute_dtype, "fp32",
          "fp32, bf16 or fp16: what the matrix products take as inputs (fp32 accumulation; "
          "the servers keep fp32 master weights); fp16 adds dynamic loss scaling");
ABSL_FLAG(std::string, attention, "auto",
          "whose kernels the 16-bit attention runs on a CUDA device: auto (cuDNN's fused flash "
          "attention where libcudnn.so.9 loads and takes the shape, else the backend's own) or "
          "own (the backend's own tensor-core kernels); Status.attention_path says which ran");
ABSL_FLAG(bool, tf32, false,
          "with --compute_dtype=fp32 on a CUDA device of compute capability 8.0 or later: the "
          "matrix products (cuBLAS) on TF32 tensor cores, inputs rounded to 10-bit mantissas, "
          "fp32 accumulation (PyTorch's torch.backends.cuda.matmul.allow_tf32); off by default, "
          "as there; the attention stays fp32; Status.tf32 says it");
ABSL_FLAG(std::string, recompute, "none",
          "none, or block: a GPT recomputes each block's activations in the backward instead "
          "of keeping them (less memory)");
ABSL_FLAG(std::string, device, "auto",
          "auto (CUDA device 0 if there is one, else the CPU), cpu, cuda or cuda:N");
ABSL_FLAG(int64_t, device_memory_budget, 1,
          "bytes of device memory the model may hold at once (a GPT's weights go through it "
          "a window of layers at a time; activations beyond it are recomputed); 0: no budget");
ABSL_FLAG(int64_t, compute_threads, 1,
          "CPU backend: threads for the step -- matrix products, element-wise ops, rows and "
          "attention heads split over them (0: one, with OpenBLAS's default threads for the "
          "products; 0..1024)");
ABSL_FLAG(std::string, data_dir, "", "read the data set here instead of the job's data.path");
ABSL_FLAG(std::string, weights_out, "", "write the final weights (binary pstrain.TensorSet) here");
ABSL_FLAG(std::string, straggler, "none",
          "an injected delay in every clock, to see how a consistency model copes with slow "
          "workers: none, fixed:MS, uniform:LO:HI, pareto:SCALE:SHAPE (heavy-tailed, at least "
          "SCALE ms), each optionally @SHARE (only that share of the clocks); drawn from "
          "--straggler_seed, the worker's id and the clock, so a run repeats");
ABSL_FLAG(std::string, straggler_workers, "",
          "with --straggler: only these worker ids (e.g. 1,3) are slowed; empty: every worker");
ABSL_FLAG(int64_t, straggler_seed, 1, "with --straggler: the delays' seed");
ABSL_FLAG(bool, standalone, false,
          "train --job alone: the servers' store and optimizer in this process, no scheduler "
          "or servers (the ceiling bench/train_bench compares the cluster with; a debugging "
          "aid). The job's global batch, one worker.");
ABSL_FLAG(std::string, job, "", "with --standalone: the job spec (text-format pstrain.JobSpec)");
ABSL_FLAG(std::string, status_file, "",
          "with --standalone: write the final Status (JSON, as psctl status --json) here");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "ps_worker --scheduler=HOST:PORT [--listen=HOST:PORT] | --standalone --job=FILE");
  pstrain::ParseFlagsOrExit(argc, argv);
  pstrain::WorkerConfig config;
  config.member = pstrain::MemberConfigFromFlags(pstrain::WORKER);
  const std::optional<int64_t> budget = pstrain::GivenFlag(FLAGS_device_memory_budget);
  pstrain::ExitOnBadFlag(pstrain::CheckFlagRanges({
      {"compute_threads", absl::GetFlag(FLAGS_compute_threads), 0, 1024},
      {"device_memory_budget", budget, 1},
  }));
  for (const auto& [name, value] :
       {std::pair{"data_dir", pstrain::GivenFlag(FLAGS_data_dir)},
        std::pair{"weights_out", pstrain::GivenFlag(FLAGS_weights_out)},
        std::pair{"job", pstrain::GivenFlag(FLAGS_job)},
        std::pair{"status_file", pstrain::GivenFlag(FLAGS_status_file)}}) {
    pstrain::ExitOnBadFlag(pstrain::CheckFlagNotEmpty(name, value, "a value"));
  }
  absl::StatusOr<pstrain::WorkerFlags> worker_flags = pstrain::WorkerFlagsFromFlags();
  pstrain::ExitOnBadFlag(worker_flags.status());
  config.flags = *std::move(worker_flags);
  config.device = absl::GetFlag(FLAGS_device);
  config.compute_threads = static_cast<int>(absl::GetFlag(FLAGS_compute_threads));
  config.compute_dtype = absl::GetFlag(FLAGS_compute_dtype);
  config.attention = absl::GetFlag(FLAGS_attention);
  config.tf32 = absl::GetFlag(FLAGS_tf32);
  config.recompute = absl::GetFlag(FLAGS_recompute);
  config.training.device_memory_budget = budget.value_or(0);
  config.data_dir = absl::GetFlag(FLAGS_data_dir);
  config.training.weights_out = absl::GetFlag(FLAGS_weights_out);
  absl::StatusOr<pstrain::StragglerSpec> straggler = pstrain::ParseStraggler(
      absl::GetFlag(FLAGS_straggler), absl::GetFlag(FLAGS_straggler_workers),
      static_cast<uint64_t>(absl::GetFlag(FLAGS_straggler_seed)));
  pstrain::ExitOnBadFlag(straggler.status());
  config.training.straggler = *straggler;
  config.standalone = absl::GetFlag(FLAGS_standalone);
  config.job_file = absl::GetFlag(FLAGS_job);
  config.status_file = absl::GetFlag(FLAGS_status_file);
  return pstrain::RunWorker(config);
}
