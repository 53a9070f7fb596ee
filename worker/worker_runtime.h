// A worker from start to end: its device, the member-daemon skeleton
// (common/member_daemon.h), its data set, and the training loop
// (worker/trainer.h) until the job ends. ps_worker's main only parses flags
// into a WorkerConfig.
#ifndef PSTRAIN_WORKER_WORKER_RUNTIME_H_
#define PSTRAIN_WORKER_WORKER_RUNTIME_H_

#include <string>

#include "common/member_daemon.h"
#include "worker/training_options.h"
#include "worker/worker_flags.h"

namespace pstrain {

struct WorkerConfig {
  MemberConfig member;
  std::string device = "auto";         // auto, cpu, cuda or cuda:N
  int compute_threads = 1;             // OpenBLAS threads of the CPU backend
  std::string compute_dtype = "fp32";  // fp32, bf16 or fp16
  std::string attention = "auto";      // 16-bit attention: auto (cuDNN where it has it) or own
  bool tf32 = false;                   // fp32 products on TF32 tensor cores
  std::string recompute = "none";      // none or block
  WorkerFlags flags;                   // --overlap, --wire_dtype, --channels_per_server, --shm, ...
  std::string data_dir;                // "": the job's data.path
  // The trainer's and the clock loop's options: main fills what the
  // command line says as is (the straggler, the weights file, the device
  // memory budget); the runtime settles overlap, loss scaling and
  // recompute from the strings above, the job and the device.
  TrainingOptions training;
  // --standalone: train `job_file` alone, the servers' store in this
  // process (worker/standalone/standalone.h); the final Status as JSON to status_file.
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
