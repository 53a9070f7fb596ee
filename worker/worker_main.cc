// ps_worker: trains its rank's share of every clock's global batch.
//
//   ps_worker --scheduler=HOST:PORT [--listen=HOST:PORT] [--device=auto|cpu|cuda[:N]]
#include <atomic>
#include <cstdlib>
#include <memory>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "common/daemon.h"
#include "common/dtype.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/rpc.h"
#include "common/scheduler_client.h"
#include "common/security.h"
#include "worker/dataset.h"
#include "worker/device.h"
#include "worker/trainer.h"
#include "worker/worker_service.h"

ABSL_FLAG(std::string, scheduler, "", "the scheduler's HOST:PORT (required)");
ABSL_FLAG(std::string, listen, "127.0.0.1:0",
          "HOST:PORT to serve Status on; port 0 lets the OS choose");
ABSL_FLAG(std::string, port_file, "", "write the bound HOST:PORT to this file");
ABSL_FLAG(std::string, compute_dtype, "fp32",
          "fp32, bf16 or fp16: what the dense layers' matrix products take as inputs (fp32 "
          "accumulation; the servers keep fp32 master weights); fp16 adds dynamic loss scaling");
ABSL_FLAG(std::string, overlap, "auto",
          "on, off or auto (on for a CUDA device, off on the CPU, where pushing competes with "
          "the backward for the same cores): push each layer's gradients while the backward "
          "goes on, when the job needs no whole-gradient step first (no accum_steps, fp16 loss "
          "scaling or SSP/ASP clipping)");
ABSL_FLAG(std::string, recompute, "none",
          "none, or block: a GPT recomputes each block's activations in the backward instead "
          "of keeping them (less memory)");
ABSL_FLAG(std::string, device, "auto",
          "auto (CUDA device 0 if there is one, else the CPU), cpu, cuda or cuda:N");
ABSL_FLAG(int, compute_threads, 1, "OpenBLAS threads of the CPU backend (0: OpenBLAS default)");
ABSL_FLAG(std::string, data_dir, "", "read the data set here instead of the job's data.path");
ABSL_FLAG(std::string, weights_out, "", "write the final weights (binary pstrain.TensorSet) here");
ABSL_FLAG(int, debug_slowdown_ms, 0, "sleep this long every iteration (consistency tests)");
ABSL_FLAG(int, connect_timeout_s, 60, "seconds to keep retrying an unreachable scheduler");
ABSL_FLAG(int, heartbeat_interval_ms, 500, "milliseconds between heartbeats");
ABSL_FLAG(int, rank, -1,
          "take over this worker id from a dead worker (under the scheduler's "
          "--on_worker_failure=wait); -1: the next free id");
ABSL_FLAG(std::string, wire_dtype, "",
          "fp32, bf16 or fp16 for this worker's pushes and pulls (default: the job's wire_dtype)");
ABSL_FLAG(int, channels_per_server, 2, "TCP connections to each server");

namespace pstrain {
namespace {

int Run() {
  SetLogIdentity("worker", -1);
  InstallShutdownHandlers();
  if (const absl::Status st = ConfigureSecurityFromFlags(); !st.ok()) {
    spdlog::error("{}", st.message());
    return 2;
  }
  TuneMallocForBulkTraffic();
  const std::string scheduler = absl::GetFlag(FLAGS_scheduler);
  if (scheduler.empty()) {
    spdlog::error("--scheduler=HOST:PORT is required");
    return 2;
  }
  const std::string overlap_flag = absl::GetFlag(FLAGS_overlap);
  if (overlap_flag != "auto" && overlap_flag != "on" && overlap_flag != "off") {
    spdlog::error("--overlap={}: expected auto, on or off", overlap_flag);
    return 2;
  }
  const std::string recompute = absl::GetFlag(FLAGS_recompute);
  if (recompute != "none" && recompute != "block") {
    spdlog::error("--recompute={}: expected none or block", recompute);
    return 2;
  }
  // The device first: a worker that cannot compute says so before it joins.
  std::string device_note;
  auto backend =
      OpenDevice(absl::GetFlag(FLAGS_device), absl::GetFlag(FLAGS_compute_threads), &device_note);
  if (!backend.ok()) {
    spdlog::error("{}", backend.status().message());
    return 2;
  }
  const std::string compute = absl::GetFlag(FLAGS_compute_dtype);
  kernels::Precision precision = kernels::Precision::kFp32;
  if (compute == "bf16") {
    precision = kernels::Precision::kBf16;
  } else if (compute == "fp16") {
    precision = kernels::Precision::kFp16;
  } else if (compute != "fp32") {
    spdlog::error("--compute_dtype={}: expected fp32, bf16 or fp16", compute);
    return 2;
  }
  if (std::string why; !(*backend)->SetPrecision(precision, &why)) {
    spdlog::error("--compute_dtype={}: {}", compute, why);
    return 2;
  }
  spdlog::info("computing on {} in {}", device_note, compute);
  DType wire_dtype = FP32;
  const std::string wire_flag = absl::GetFlag(FLAGS_wire_dtype);
  if (!wire_flag.empty() && !ParseDType(wire_flag, &wire_dtype)) {
    spdlog::error("--wire_dtype={}: expected fp32, bf16 or fp16", wire_flag);
    return 2;
  }
  if (absl::GetFlag(FLAGS_channels_per_server) < 1) {
    spdlog::error("--channels_per_server must be >= 1");
    return 2;
  }
  std::unique_ptr<Trainer> trainer;
  absl::Mutex trainer_mu;
  auto status_fn = [&]() {
    absl::MutexLock lock(&trainer_mu);
    NodeStatus st;
    if (trainer != nullptr) st = trainer->Status();
    st.set_role(WORKER);
    return st;
  };
  WorkerService service(status_fn);
  std::string bound;
  ServerOptions server_options;
  server_options.max_receive_bytes = kMaxControlMessageBytes;
  server_options.max_streams_per_client = 16;
  auto server = StartServer(absl::GetFlag(FLAGS_listen), {&service}, &bound, server_options);
  if (!server.ok()) {
    spdlog::error("{}", server.status().message());
    return 2;
  }
  const std::string address = AdvertisedAddress(bound);
  spdlog::info("listening on {}", address);
  if (!absl::GetFlag(FLAGS_port_file).empty()) {
    const absl::Status st = WritePortFile(absl::GetFlag(FLAGS_port_file), address);
    if (!st.ok()) {
      spdlog::error("{}", st.message());
      return 2;
    }
  }

  SchedulerClientOptions options;
  options.scheduler = scheduler;
  options.role = WORKER;
  options.address = address;
  options.connect_timeout = absl::Seconds(absl::GetFlag(FLAGS_connect_timeout_s));
  options.heartbeat_interval = absl::Milliseconds(absl::GetFlag(FLAGS_heartbeat_interval_ms));
  options.rank = absl::GetFlag(FLAGS_rank);
  SchedulerClient client(options);
  auto reg = client.Register();
  if (!reg.ok()) {
    spdlog::error("{}", reg.status().message());
    return 3;
  }
  const int id = reg->id();
  JobSpec job = reg->job();
  SetLogIdentity("worker", id);
  if (!absl::GetFlag(FLAGS_data_dir).empty()) {
    job.mutable_data()->set_path(absl::GetFlag(FLAGS_data_dir));
  }
  // Every way out reports to the scheduler, so the job never waits on a
  // worker that is gone.
  auto member_status = [&](MemberState state) {
    NodeStatus st = status_fn();
    st.set_id(id);
    st.set_address(address);
    st.set_state(state);
    return st;
  };
  auto report = [&](MemberState state, const std::string& message, double accuracy) {
    NodeStatus st = member_status(state);
    st.set_message(message);
    if (accuracy >= 0) st.set_test_accuracy(accuracy);
    (void)client.ReportFinal(st);
  };
  // Heartbeats from now on: loading the data may take longer than the
  // scheduler's heartbeat timeout.
  client.StartHeartbeats([&] { return member_status(RUNNING); });

  absl::StatusOr<TrainTest> data = LoadDataset(job);
  if (!data.ok()) {
    spdlog::error("cannot load the data set: {}", data.status().message());
    report(FAILED, absl::StrCat("data: ", data.status().message()), -1);
    return 1;
  }
  spdlog::info("data: {} training and {} test examples of {} features", data->train.size,
               data->test.size, data->train.dim);

  TrainerOptions topts;
  topts.worker_id = id;
  topts.job = job;
  topts.debug_slowdown_ms = absl::GetFlag(FLAGS_debug_slowdown_ms);
  topts.weights_out = absl::GetFlag(FLAGS_weights_out);
  topts.recompute = recompute == "block";
  const std::string overlap = absl::GetFlag(FLAGS_overlap);
  topts.overlap =
      overlap == "on" || (overlap == "auto" && std::string((*backend)->name()) == "cuda");
  topts.loss_scaling = compute == "fp16";
  if (topts.loss_scaling && job.optimizer().allow_nonfinite()) {
    spdlog::error(
        "--compute_dtype=fp16 skips overflowing steps through the servers' refusal of non-finite "
        "gradients, which this job turns off (optimizer.allow_nonfinite)");
    report(FAILED, "fp16 compute with allow_nonfinite", -1);
    return 2;
  }
  topts.ps.wire_dtype = wire_flag.empty() ? job.wire_dtype() : wire_dtype;
  topts.ps.channels_per_server = absl::GetFlag(FLAGS_channels_per_server);
  topts.generation = reg->generation();
  topts.start_clock = reg->start_clock();
  {
    absl::MutexLock lock(&trainer_mu);
    trainer = std::make_unique<Trainer>(topts, &client, backend->get(), std::move(*data));
  }

  std::atomic<bool> stop{false};
  std::thread watcher([&stop] {
    while (!stop) {
      if (ShutdownRequested()) stop = true;
      absl::SleepFor(absl::Milliseconds(50));
    }
  });
  absl::StatusOr<double> acc = trainer->Run(stop);
  const bool interrupted = ShutdownRequested();
  stop = true;
  watcher.join();
  int code = 0;
  if (acc.ok()) {
    report(FINISHED, "", *acc);
  } else {
    const std::string why = interrupted ? "interrupted" : std::string(acc.status().message());
    spdlog::error("training stopped: {}", why);
    report(FAILED, why, -1);
    code = 1;
  }
  (*server)->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  return code;
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("ps_worker --scheduler=HOST:PORT [--listen=HOST:PORT]");
  absl::ParseCommandLine(argc, argv);
  return pstrain::Run();
}
