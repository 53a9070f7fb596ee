// ps_server: holds the chunks of the model the partition gives it.
//
//   ps_server --scheduler=HOST:PORT [--listen=HOST:PORT] [--port_file=F]
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "common/daemon.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/partition.h"
#include "common/rpc.h"
#include "common/scheduler_client.h"
#include "common/security.h"
#include "common/simd.h"
#include "common/thread_pool.h"
#include "common/trace.h"
#include "server/checkpoint.h"
#include "server/chunk_store.h"
#include "server/ps_service.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, scheduler, "", "the scheduler's HOST:PORT (required)");
ABSL_FLAG(std::string, listen, "127.0.0.1:0", "HOST:PORT to serve on; port 0 lets the OS choose");
ABSL_FLAG(std::string, port_file, "", "write the bound HOST:PORT to this file");
ABSL_FLAG(std::string, trace_file, "", "write every apply and pull as JSON lines here");
ABSL_FLAG(int, connect_timeout_s, 60, "seconds to keep retrying an unreachable scheduler");
ABSL_FLAG(int, heartbeat_interval_ms, 500, "milliseconds between heartbeats");
ABSL_FLAG(int, server_threads, static_cast<int>(std::thread::hardware_concurrency()),
          "threads one large optimizer update is split over");
ABSL_FLAG(int, rank, -1,
          "take over this server id from a failed server (its checkpoint is loaded and the "
          "cluster rolls back to it); -1: the next free id, or a dead server's");
ABSL_FLAG(int, rpc_threads, 1,
          "threads serving pushes and pulls, each on its own completion queue (each one "
          "reads, applies and answers its calls; concurrent pushes of different chunks run "
          "in parallel over them)");

namespace pstrain {
namespace {

// The threads serving a PsService, one per completion queue. Stop (or the
// destructor) ends the server's calls, its queues and then the threads.
class Serving {
 public:
  Serving(PsService* service, grpc::Server* server,
          std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> queues)
      : service_(service), server_(server), queues_(std::move(queues)) {
    for (auto& q : queues_) {
      threads_.emplace_back([service, cq = q.get()] { service->Serve(cq); });
    }
  }
  ~Serving() { Stop(); }

  // Calls still running after `grace` are cancelled.
  void Stop(absl::Duration grace = absl::ZeroDuration()) {
    if (stopped_) return;
    stopped_ = true;
    service_->StopServing();
    server_->Shutdown(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(grace));
    for (auto& q : queues_) q->Shutdown();
    for (std::thread& t : threads_) t.join();
  }

 private:
  PsService* service_;
  grpc::Server* server_;
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> queues_;
  std::vector<std::thread> threads_;
  bool stopped_ = false;
};

int Run() {
  SetLogIdentity("server", -1);
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
  auto trace = TraceWriter::Open(absl::GetFlag(FLAGS_trace_file));
  if (!trace.ok()) {
    spdlog::error("{}", trace.status().message());
    return 2;
  }
  auto service = std::make_unique<PsService>();
  std::string bound;
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> queues;
  ServerOptions server_options;
  server_options.num_queues = std::max(1, absl::GetFlag(FLAGS_rpc_threads));
  server_options.queues = &queues;
  auto server = StartServer(absl::GetFlag(FLAGS_listen), {service.get()}, &bound, server_options);
  if (!server.ok()) {
    spdlog::error("{}", server.status().message());
    return 2;
  }
  Serving serving(service.get(), server->get(), std::move(queues));
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
  options.role = SERVER;
  options.address = address;
  options.connect_timeout = absl::Seconds(absl::GetFlag(FLAGS_connect_timeout_s));
  options.heartbeat_interval = absl::Milliseconds(absl::GetFlag(FLAGS_heartbeat_interval_ms));
  options.rank = absl::GetFlag(FLAGS_rank);
  SchedulerClient client(options);
  auto reg = client.Register();
  if (!reg.ok()) {
    spdlog::error("{}", reg.status().message());
    serving.Stop();
    return 3;
  }
  const int id = reg->id();
  const JobSpec& job = reg->job();
  SetLogIdentity("server", id);
  service->SetIdentity(id, address);
  // Heartbeats from now on: making a large store may take longer than the
  // scheduler's heartbeat timeout.
  client.StartHeartbeats([&service] { return service->GetStatus(); });

  auto partition = Partition::Make(ModelParams(job.model()), job.chunk_bytes(), job.num_servers());
  auto optimizer = MakeOptimizer(job.optimizer());
  if (!partition.ok() || !optimizer.ok()) {
    const absl::Status st = partition.ok() ? optimizer.status() : partition.status();
    spdlog::error("bad job spec from the scheduler: {}", st.message());
    NodeStatus failed = service->GetStatus();
    failed.set_state(FAILED);
    failed.set_message(std::string(st.message()));
    (void)client.ReportFinal(failed);
    serving.Stop();
    return 1;
  }
  ThreadPool pool(absl::GetFlag(FLAGS_server_threads));
  auto store =
      std::make_shared<ChunkStore>(job, *partition, id, std::move(*optimizer), &pool, trace->get());
  spdlog::info(
      "holding {} chunks, {} parameters, {:.2f} bytes per parameter ({}, {} update "
      "threads, {} loops)",
      store->chunk_ids().size(), store->NumParams(),
      store->NumParams() > 0 ? double(store->BytesHeld()) / store->NumParams() : 0.0,
      OptimizerType_Name(job.optimizer().type()), pool.parallelism(), SimdLevel());
  std::unique_ptr<CheckpointWriter> checkpoint;
  if (job.checkpoint_every() > 0) {
    checkpoint = std::make_unique<CheckpointWriter>(job.checkpoint_dir(), id,
                                                    OptimizerType_Name(job.optimizer().type()),
                                                    store->CheckpointLayout());
    store->SetCheckpointing(checkpoint.get(), job.checkpoint_every());
    spdlog::info("checkpointing every {} clocks into {}", job.checkpoint_every(),
                 job.checkpoint_dir());
  }
  // Loads the checkpoint of `clock` (clock 0: the initial weights) as the
  // state of `generation`.
  auto restore = [&](int64_t generation, int64_t clock) -> absl::Status {
    std::optional<CheckpointFile> file;
    if (clock > 0) {
      absl::StatusOr<CheckpointFile> opened =
          CheckpointFile::Open(CheckpointPath(job.checkpoint_dir(), id, clock));
      if (!opened.ok()) return opened.status();
      file = std::move(*opened);
    }
    const absl::Status st = store->Restore(generation, clock, file ? &*file : nullptr);
    if (st.ok())
      spdlog::warn("generation {}: restored the checkpoint of clock {}", generation, clock);
    return st;
  };
  auto fail = [&](const absl::Status& st) {
    spdlog::error("{}", st.message());
    store->StopGlobalClipping();
    NodeStatus failed = service->GetStatus();
    failed.set_state(FAILED);
    failed.set_message(std::string(st.message()));
    (void)client.ReportFinal(failed);
    serving.Stop();
    return 1;
  };
  if (reg->generation() > 0 || reg->start_clock() > 0) {
    if (const absl::Status st = restore(reg->generation(), reg->start_clock()); !st.ok()) {
      return fail(st);
    }
  } else if (checkpoint != nullptr) {
    checkpoint->Rollback(0);  // files of an earlier job that left no manifest
  }
  service->SetStore(store, TotalClocks(job));
  store->StartGlobalClipping(
      [&client, id](int64_t generation, int64_t clock, double sum_squares) {
        return client.ReduceNorm(id, generation, clock, sum_squares);
      },
      [&service] { service->WakePulls(); });

  std::string message;
  JobState end = WAITING;
  std::vector<bool> removed(job.num_workers(), false);
  int64_t pruned_before = 0;
  while (!ShutdownRequested()) {
    end = client.job_state(&message);
    if (end == DONE || end == ABORTED) break;
    // Workers the scheduler declared dead leave the rounds and the read
    // guarantee; pulls that waited on them may now be answered.
    bool changed = false;
    for (int w : client.dead_workers()) {
      if (w < 0 || w >= job.num_workers() || removed[w]) continue;
      removed[w] = true;
      changed = true;
      spdlog::warn("worker {} was declared dead: going on without it", w);
      store->RemoveWorker(w);
    }
    if (changed) service->WakePulls();
    // The cluster rolled back to a checkpoint (a server failed): load it.
    int64_t restore_clock = 0;
    const int64_t generation = client.generation(&restore_clock);
    if (generation > store->generation()) {
      if (const absl::Status st = restore(generation, restore_clock); !st.ok()) return fail(st);
      service->CancelParked(
          grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                       absl::StrCat("the cluster rolled back to clock ", restore_clock,
                                    " (generation ", generation, ")")));
    }
    if (checkpoint != nullptr && client.manifest_clock() > pruned_before) {
      pruned_before = client.manifest_clock();
      checkpoint->Prune(pruned_before);
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  if (ShutdownRequested()) {
    spdlog::warn("interrupted; shutting down");
    end = ABORTED;
    message = "interrupted";
  }
  store->StopGlobalClipping();  // it uses `client`, which goes first
  service->SetState(end == DONE ? FINISHED : FAILED, message);
  service->CancelParked(grpc::Status(grpc::StatusCode::ABORTED, "server shutting down"));
  serving.Stop(absl::Seconds(2));
  if (end == DONE) {
    const NodeStatus st = service->GetStatus();
    spdlog::info("job done; {} pushes, {} pulls served; {} bytes in, {} bytes out", st.pushes(),
                 st.pulls(), st.bytes_in(), st.bytes_out());
    return 0;
  }
  spdlog::error("job aborted: {}", message);
  return 1;
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("ps_server --scheduler=HOST:PORT [--listen=HOST:PORT]");
  absl::ParseCommandLine(argc, argv);
  return pstrain::Run();
}
