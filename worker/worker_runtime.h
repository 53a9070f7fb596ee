// A worker from start to end: its device, the member-daemon skeleton
// (common/member_daemon.h), its data set, and the training loop
// (worker/trainer.h) until the job ends. ps_worker's main only parses flags
// into a WorkerConfig.
#ifndef PSTRAIN_WORKER_WORKER_RUNTIME_H_
#define PSTRAIN_WORKER_WORKER_RUNTIME_H_

#include <string>

#include "common/member_daemon.h"

namespace pstrain {

struct WorkerConfig {
  MemberConfig member;
  std::string device = "auto";         // auto, cpu, cuda or cuda:N
  int compute_threads = 1;             // OpenBLAS threads of the CPU backend
  std::string compute_dtype = "fp32";  // fp32, bf16 or fp16
  std::string overlap = "auto";        // auto, on or off
  std::string recompute = "none";      // none or block
  int64_t device_memory_budget = 0;    // bytes; 0: none (worker/models/gpt_model.h)
  std::string wire_dtype;              // "": the job's
  int channels_per_server = 2;
  std::string data_dir;     // "": the job's data.path
  std::string weights_out;  // "": none
  int debug_slowdown_ms = 0;
  // --standalone: train `job_file` alone, the servers' store in this
  // process (worker/standalone.h); the final Status as JSON to status_file.
  bool standalone = false;
  std::string job_file;
  std::string status_file;
};

// Runs the worker to the job's end; returns the process's exit code (0 the
// job finished, 1 it was aborted or this worker failed, 2 a bad command line,
// job file (standalone) or device, 3 no scheduler).
int RunWorker(const WorkerConfig& config);

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_WORKER_RUNTIME_H_
