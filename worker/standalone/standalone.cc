#include "worker/standalone/standalone.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/params.h"
#include "common/status_macros.h"
#include "server/optimizer.h"

namespace pstrain {

absl::StatusOr<JobSpec> StandaloneJob(JobSpec job) {
  if (job.pipeline_stages() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--standalone trains the whole model in one worker; this job has ",
                     job.pipeline_stages(), " pipeline stages"));
  }
  ApplyJobDefaults(&job);
  job.set_num_workers(1);
  job.set_num_servers(1);
  RETURN_IF_ERROR(ValidateJobSpec(job));
  return job;
}

// A ParamClient whose operations run on the calling thread, against the
// standalone server's store.
class StandaloneParamClient : public ParamClient {
 public:
  explicit StandaloneParamClient(StandaloneServer* server) : server_(server) {}

  ParamTicket Pull(int64_t clock, int64_t min_clock, ParamBuffers* into,
                   PulledClocks* clocks, WeightArrivals* arrivals) override {
    const int64_t number = arrivals != nullptr ? arrivals->Begin() : 0;
    server_->AwaitReadable(min_clock);
    absl::Status st;
    if (clocks != nullptr) *clocks = PulledClocks();
    for (const ChunkInfo& c : server_->partition_.chunks()) {
      char* out = reinterpret_cast<char*>((*into)[c.param].data() + c.offset);
      PulledClocks chunk;
      st.Update(server_->store_->Read(0, clock, min_clock, c.id, FP32, out, &chunk));
      bytes_in_ += c.numel * 4;
      if (clocks != nullptr) clocks->Merge(chunk);
    }
    if (arrivals != nullptr) arrivals->Finish(number, st);
    return Done(st);
  }

  ParamTicket Push(int64_t clock, int num_samples, const ParamBuffers* grads, float norm,
                   std::vector<int> params, std::vector<bool>,
                   std::vector<const float*>) override {  // (built-in models: in *grads)
    ChunkStore::PushRequest push;
    push.clock = clock;
    push.num_samples = num_samples;
    push.grad_norm = norm;
    return Done(Send(push, *grads, params));
  }

  ParamTicket PushInitialValues(const ParamBuffers* weights) override {
    ChunkStore::PushRequest push;
    push.initial_values = true;
    return Done(Send(push, *weights, {}));
  }

  absl::Status Wait(ParamTicket ticket) override {
    auto it = done_.find(ticket);
    if (it == done_.end()) return absl::InternalError("unknown ticket");
    const absl::Status st = it->second;
    done_.erase(it);
    return st;
  }
  int64_t bytes_in() const override { return bytes_in_; }
  int64_t bytes_out() const override { return bytes_out_; }
  int64_t rpcs() const override { return 0; }

 private:
  // `push` with the chunks of `params` (every parameter when empty) from
  // `values`.
  absl::Status Send(ChunkStore::PushRequest push, const ParamBuffers& values,
                    const std::vector<int>& params) {
    std::vector<const float*> data;
    auto add = [&](const ChunkInfo& c) {
      push.parts.push_back({c.id, c.numel, c.numel * 4});
      data.push_back(values[c.param].data() + c.offset);
      bytes_out_ += c.numel * 4;
    };
    if (params.empty()) {
      for (const ChunkInfo& c : server_->partition_.chunks()) add(c);
    } else {
      for (int p : params) {
        for (int32_t id : server_->partition_.ParamChunks(p)) add(server_->partition_.chunks()[id]);
      }
    }
    return server_->store_->Push(
        push, [&](size_t i) { return absl::Span<const float>(data[i], push.parts[i].values); });
  }

  ParamTicket Done(absl::Status st) {
    done_[++next_] = std::move(st);
    return next_;
  }

  StandaloneServer* const server_;
  std::map<ParamTicket, absl::Status> done_;
  ParamTicket next_ = 0;
  int64_t bytes_in_ = 0, bytes_out_ = 0;
};

absl::StatusOr<std::unique_ptr<StandaloneServer>> StandaloneServer::Make(const JobSpec& job,
                                                                         int threads) {
  ASSIGN_OR_RETURN(Partition partition,
                   Partition::Make(ModelParams(job.model()), job.chunk_bytes(), 1));
  ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer, MakeOptimizer(job.optimizer()));
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::unique_ptr<StandaloneServer> server(
      new StandaloneServer(std::move(partition), std::make_unique<ThreadPool>(threads)));
  server->store_ = std::make_unique<ChunkStore>(job, server->partition_, 0, std::move(optimizer),
                                                server->pool_.get(), nullptr);
  RETURN_IF_ERROR(server->store_->health());
  // Clipping under BSP by the global norm: this server's norm is the norm.
  StandaloneServer* s = server.get();
  server->clipping_ = GlobalClipping::Start(
      server->store_.get(), job.optimizer().clip_norm(),
      [](int64_t, int64_t, double sum_squares) -> absl::StatusOr<double> { return sum_squares; },
      [s] {
        absl::MutexLock lock(&s->mu_);
        s->applied_.SignalAll();
      });
  return server;
}

StandaloneServer::StandaloneServer(Partition partition, std::unique_ptr<ThreadPool> pool)
    : partition_(std::move(partition)), pool_(std::move(pool)) {}

StandaloneServer::~StandaloneServer() {
  clipping_.reset();  // its thread uses mu_ and applied_
}

std::unique_ptr<ParamClient> StandaloneServer::Client() {
  return std::make_unique<StandaloneParamClient>(this);
}

void StandaloneServer::AwaitReadable(int64_t min_clock) {
  auto readable = [this, min_clock] {
    for (const ChunkInfo& c : partition_.chunks()) {
      if (!store_->Readable(c.id, min_clock)) return false;
    }
    return true;
  };
  absl::MutexLock lock(&mu_);
  // The clipping thread signals once it applied a round; the timeout covers
  // a round applied between the check and the wait.
  while (!readable()) applied_.WaitWithTimeout(&mu_, absl::Milliseconds(1));
}

absl::StatusOr<AdvanceClockResponse> StandaloneGate::AdvanceClock(const AdvanceClockRequest& req) {
  AdvanceClockResponse resp;
  resp.set_slowest_clock(req.clock());
  resp.set_job_state(RUNNING_JOB);
  resp.add_live_workers(0);
  resp.mutable_cluster()->add_servers()->set_address("in-process");
  resp.mutable_cluster()->add_workers()->set_address("in-process");
  return resp;
}

}  // namespace pstrain

namespace pstrain {

std::future<absl::StatusOr<AdvanceClockResponse>> StandaloneGate::AdvanceClockAsync(
    AdvanceClockRequest req) {
  std::promise<absl::StatusOr<AdvanceClockResponse>> answer;  // at once: nothing to wait for
  answer.set_value(AdvanceClock(req));
  return answer.get_future();
}

}  // namespace pstrain
