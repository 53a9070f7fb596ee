#include "server/server_runtime.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/daemon.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/partition.h"
#include "common/placement.h"
#include "common/rpc.h"
#include "common/status_macros.h"
#include "common/thread_pool.h"
#include "common/trace.h"
#include "server/checkpoint.h"
#include "server/chunk_store.h"
#include "server/global_clipping.h"
#include "server/member_loop.h"
#include "server/memory_plan.h"
#include "server/move_intake.h"
#include "server/move_wait.h"
#include "server/placed_shard.h"
#include "server/ps_service.h"
#include "server/ps_serving.h"
#include "server/shard.h"
#include "server/shard_actions.h"
#include "server/standby_sender.h"

namespace pstrain {
namespace {

// Whether this server uses shared memory with the workers and standbys on
// its host: when asked (--shm) and not offloaded (an offloaded server keeps
// its payloads in messages: its budget bounds the requests and replies in
// flight, and segments would lie outside it).
bool OffersShm(const ServerConfig& config) { return config.shm && config.offload_dir.empty(); }

// The bound on request bytes in flight before the job is known, and its
// least value after (common/rpc.h, ServerOptions::quota).
constexpr int64_t kMinRequestsInFlight = int64_t{64} << 20;

// The least quota of an offloaded server: a few of the transport's reads
// (common/rpc.h reads up to 4 MiB at once per connection).
constexpr int64_t kMinTransportQuota = int64_t{8} << 20;

// One server's life after it registered.
class Server {
 public:
  Server(const ServerConfig& config, MemberDaemon* daemon, PsService* service, Serving* serving,
         TraceWriter* trace, grpc::ResourceQuota* quota)
      : config_(config),
        daemon_(daemon),
        service_(service),
        serving_(serving),
        trace_(trace),
        quota_(quota) {}

  int Run(const RegisterResponse& reg);

 private:
  // An EXTERNAL model is declared by the first worker that registers: its
  // parameters join the job then (the servers poll the scheduler's job).
  absl::Status AwaitDeclaredModel();
  // The shard by the registration's placement, from its generation and
  // clock, served.
  absl::Status Start(const RegisterResponse& reg);
  // A server that joined the running job (--join): once the chunks and
  // rows the move gives it are handed over (as they are at the move's
  // switch clock), its shard of the move's placement is made of them and
  // served (its Status says it holds them: the move may switch); then it
  // waits for the switch, whose generation is the next. AwaitMove's errors.
  absl::Status Join(const RegisterResponse& reg);
  // The shard of this server's share of the job by placement_ (its chunk
  // store, with checkpoints, and its part of the sparse tables), its chunks
  // holding `start` values -- for a switch (kNone), the one made ahead
  // when there is one -- installed as the one this server serves.
  absl::Status MakeShard(ChunkStore::StartValues start = ChunkStore::StartValues::kSeed);
  ShardInputs Inputs() const {
    return ShardInputs{&job_,
                       id_,
                       pool_.get(),
                       trace_,
                       OffloadOptions{config_.offload_dir, config_.memory_budget, id_,
                                      config_.offload_direct, config_.offload_io},
                       config_.table_spill_dir};
  }
  // A move followed: the intake takes what it hands over here; in memory,
  // the shard of its placement is made ahead when this server is in it,
  // and the room of the answers that give its chunks away.
  void FollowMove(const MoveNews& move, int64_t generation);
  // BSP clipping by the global norm over the store (when the job clips).
  void StartClipping();
  // The member loop's actions on the shard (it follows the shard placed anew).
  ShardActions Actions() {
    return ShardActions(
        &shard_, service_, sender_.get(), id_,
        [this](int64_t generation, int64_t clock, const Placement& placement) {
          return Restore(generation, clock, placement);
        },
        [this](const MoveNews& move, int64_t generation) { FollowMove(move, generation); });
  }
  // The member loop's restore: a move's switch (a newer `placement`, the
  // move followed) makes the shard anew from what the one served keeps
  // and what was handed over, and the service serves the new one; a
  // rollback under a newer placement loads its checkpoint into a shard
  // placed anew.
  absl::Status Restore(int64_t generation, int64_t clock, const Placement& placement);
  // The shard of placement_ (a new one) serves from now on, in `generation`
  // of `clock`: from what `before` keeps and `handed` (a switch), else
  // from the checkpoint.
  absl::Status Replace(int64_t generation, int64_t clock, std::optional<HandedOver> handed,
                       Shard* before);
  // Standby copies: the sender of the served chunks' and tables' changes.
  void StartReplication();
  // Bounds the requests and replies in flight: an offloaded server's by
  // its budget's shares (`plan`), else by the job's size.
  void LimitInFlight(const std::optional<ServerMemoryPlan>& plan);
  // The state the shard starts from: the checkpoint the registration
  // names (0: the initial values), or, a replacement whose own chunks a
  // standby serves now (standby copies), standby copies to be filled.
  absl::Status StartState(const RegisterResponse& reg);
  // Serves until the job ends; its end state and message.
  absl::StatusOr<JobState> Serve(std::string* message);
  int Fail(const absl::Status& st);
  int Finish(JobState end, const std::string& message);
  // The Status heartbeats carry: the service's, with the last BSP norm this
  // server reported (a scheduler that took the job over completes its round).
  MemberStatus HeartbeatStatus() {
    MemberStatus st = service_->GetStatus();
    if (intake_ != nullptr) intake_->AddStatus(st.mutable_server());
    absl::MutexLock lock(&norm_mu_);
    if (last_norm_.has_value()) *st.mutable_server()->mutable_last_norm() = *last_norm_;
    return st;
  }

  const ServerConfig& config_;
  MemberDaemon* daemon_;
  PsService* service_;
  Serving* serving_;
  TraceWriter* trace_;
  grpc::ResourceQuota* quota_;  // the requests in flight (common/rpc.h)
  JobSpec job_;
  int id_ = -1;
  Placement placement_;  // the job's once a move changed it (version 0: the initial)
  // The updates' threads: one pool for every placement (a store placed
  // anew shares it with the calls still on the old one).
  std::unique_ptr<ThreadPool> pool_;
  // In memory, the shard of a move's placement made ahead of its switch
  // (null offloaded: two stores at once would not fit the budget; the
  // switch makes it). It uses the members above.
  std::unique_ptr<ShardAhead> ahead_;
  int64_t following_ = 0;  // the version of the move followed (0: none)
  std::shared_ptr<ChunkStore> store_;
  ShmLayout shm_layout_;  // where the store's chunks lie in a worker's segment
  absl::Mutex norm_mu_;
  std::optional<NormReport> last_norm_ ABSL_GUARDED_BY(norm_mu_);
  // BSP clipping by the global norm (null when the job does not clip under
  // BSP). Its thread uses the members above: it is stopped first.
  std::unique_ptr<GlobalClipping> clipping_;
  std::optional<Partition> partition_;  // the job's chunks (MakeShard)
  std::shared_ptr<Shard> shard_;        // set by Run: the store and the tables
  // Standby copies: ships the served chunks' and table parts' changes
  // (null without). Stopped before the shard goes.
  std::unique_ptr<StandbySender> sender_;
  // What moves give this server (set by Run; its threads end first).
  std::unique_ptr<MoveIntake> intake_;
};

int Server::Run(const RegisterResponse& reg) {
  job_ = reg.job();
  id_ = reg.id();
  placement_ = reg.placement();
  daemon_->client().SetPlacement(reg.placement());
  intake_ = std::make_unique<MoveIntake>(id_, job_, [this] { daemon_->client().BeatNow(); });
  service_->SetIdentity(id_, daemon_->address());
  // Heartbeats from now on: making a large store may take longer than the
  // scheduler's heartbeat timeout.
  daemon_->StartHeartbeats([this] { return HeartbeatStatus(); });
  if (const absl::Status st = AwaitDeclaredModel(); !st.ok()) return Fail(st);
  if (job_.checkpoint_every() > 0) {
    spdlog::info("checkpointing every {} clocks into {}", job_.checkpoint_every(),
                 job_.checkpoint_dir());
  }
  pool_ = std::make_unique<ThreadPool>(config_.server_threads);
  if (config_.offload_dir.empty()) ahead_ = std::make_unique<ShardAhead>(Inputs());
  // A retried join answered after the switch starts there, as any server.
  const auto& placed = reg.placement().servers();
  const bool joins = config_.join && std::find(placed.begin(), placed.end(), id_) == placed.end();
  if (const absl::Status st = joins ? Join(reg) : Start(reg); !st.ok()) return Fail(st);
  std::string message;
  const absl::StatusOr<JobState> end = Serve(&message);
  if (!end.ok()) return Fail(end.status());
  return Finish(*end, message);
}

absl::Status Server::Start(const RegisterResponse& reg) {
  RETURN_IF_ERROR(MakeShard());
  if (job_.standby_copies() > 0) StartReplication();
  RETURN_IF_ERROR(StartState(reg));
  StartClipping();
  service_->SetShard(shard_, TotalClocks(job_), shm_layout_, placement_.version());
  return absl::OkStatus();
}

absl::Status Server::StartState(const RegisterResponse& reg) {
  const int64_t generation = reg.generation();
  const ServerRoutes& routes = reg.routes();
  if (job_.standby_copies() > 0 && routes.serving_size() > id_ && routes.serving(id_) != id_) {
    spdlog::info("server {}'s chunks are served by server {}: joining as their standby", id_,
                 routes.serving(id_));
    shard_->JoinAsStandby(generation);
  } else {
    RETURN_IF_ERROR(shard_->Restore(generation, reg.start_clock()));
  }
  daemon_->client().SetRoutes(routes);
  if (routes.serving_size() > 0) Actions().SetRoutes(routes);
  return absl::OkStatus();
}

absl::Status Server::Join(const RegisterResponse& reg) {
  const int64_t clock = reg.start_clock();
  const int64_t version = reg.next_placement().version();
  spdlog::info("joined the running job as server {}: its chunks are handed over at clock {}", id_,
               clock);
  SchedulerClient& client = daemon_->client();
  if (ahead_ != nullptr) ahead_->Start(reg.placement(), reg.next_placement());
  RETURN_IF_ERROR(AwaitMove(client, [&] {
    // (Its own move only: the switch may come as soon as it holds it all.)
    const MoveNews move = client.move();
    if (move.to().version() == version) intake_->Follow(move, reg.generation());
    ServerStatus st;
    intake_->AddStatus(&st);
    return st.handover_version() == version && st.handover_switch_clock() == clock &&
           st.handed_over();
  }));
  ASSIGN_OR_RETURN(std::optional<HandedOver> handed, intake_->Take(version, clock));
  placement_ = reg.next_placement();
  // The switch is the generation after the one it joined in (a rollback
  // before it abandons the move).
  RETURN_IF_ERROR(Replace(reg.generation() + 1, clock, std::move(handed), nullptr));
  spdlog::info("holds its {} chunks of placement {} from clock {}: waiting for the switch",
               ChunksOn(placement_, id_).size(), placement_.version(), clock);
  RETURN_IF_ERROR(AwaitMove(client, [&] { return client.generation() > reg.generation(); }));
  client.SetPlacement(placement_);  // switched: the scheduler's news names no other version
  return absl::OkStatus();
}

absl::Status Server::MakeShard(ChunkStore::StartValues start) {
  std::optional<PlacedShard> placed;
  if (start == ChunkStore::StartValues::kNone && ahead_ != nullptr) {
    placed = ahead_->Take(placement_.version());
  }
  if (!placed.has_value()) {
    ASSIGN_OR_RETURN(placed, PlaceShard(Inputs(), placement_, start));
  }
  store_ = std::move(placed->store);
  shard_ = std::move(placed->shard);
  shm_layout_ = std::move(placed->shm_layout);
  partition_ = std::move(placed->partition);
  LimitInFlight(placed->plan);
  return absl::OkStatus();
}

void Server::FollowMove(const MoveNews& move, int64_t generation) {
  intake_->Follow(move, generation);
  if (ahead_ == nullptr) return;
  const auto& placed = move.to().servers();
  const bool here = std::find(placed.begin(), placed.end(), id_) != placed.end();
  ahead_->Start(move.from(), here ? move.to() : Placement());  // (no move: none)
  if (move.to().version() <= placement_.version()) {
    if (following_ > 0) shard_->DropAnswerRooms();  // the move went
    following_ = 0;
    return;
  }
  following_ = move.to().version();
  shard_->PrepareToGive(ChunksLeaving(move.from(), move.to(), id_));
}

void Server::StartClipping() {
  // Clipping listens to the store before any push can close a round.
  clipping_ = GlobalClipping::Start(
      store_.get(), job_.optimizer().clip_norm(),
      [this](int64_t generation, int64_t clock, double sum_squares) {
        {
          absl::MutexLock lock(&norm_mu_);
          last_norm_.emplace();
          last_norm_->set_clock(clock);
          last_norm_->set_generation(generation);
          last_norm_->set_sum_squares(sum_squares);
        }
        return daemon_->client().ReduceNorm(id_, generation, clock, sum_squares);
      },
      [this] { service_->WakePulls(); });
}

absl::Status Server::Restore(int64_t generation, int64_t clock, const Placement& placement) {
  if (placement.version() <= placement_.version()) return shard_->Restore(generation, clock);
  ASSIGN_OR_RETURN(std::optional<HandedOver> handed, intake_->Take(placement.version(), clock));
  spdlog::info("placement {} from clock {} (generation {}): holding {} chunks", placement.version(),
               clock, generation, ChunksOn(placement, id_).size());
  // A push of the clock before the switch may still be on its way here.
  for (int polls = 0; handed.has_value() && !shard_->Reached(clock); ++polls) {
    if (polls > 60000) return absl::DeadlineExceededError("the switch clock was never reached");
    absl::SleepFor(absl::Milliseconds(1));
  }
  placement_ = placement;
  // The old shard serves on until the new one is in place: the calls of
  // the old generation end there.
  const std::shared_ptr<Shard> before = shard_;
  return Replace(generation, clock, std::move(handed), before.get());
}

absl::Status Server::Replace(int64_t generation, int64_t clock, std::optional<HandedOver> handed,
                             Shard* before) {
  if (clipping_ != nullptr) clipping_->Stop();
  clipping_.reset();
  // (Every chunk is written next: no initial values.)
  RETURN_IF_ERROR(MakeShard(ChunkStore::StartValues::kNone));
  RETURN_IF_ERROR(handed.has_value() ? shard_->Adopt(generation, *std::move(handed), before)
                                     : shard_->Restore(generation, clock));
  StartClipping();
  service_->SetShard(shard_, TotalClocks(job_), shm_layout_, placement_.version());
  daemon_->client().BeatNow();  // the scheduler waits for every server's new generation
  return absl::OkStatus();
}

absl::Status Server::AwaitDeclaredModel() {
  if (job_.model().kind() != EXTERNAL || job_.model().params_size() > 0) return absl::OkStatus();
  spdlog::info("the job's model is EXTERNAL: waiting for the first worker to declare it");
  for (int polls = 0; !ShutdownRequested(); ++polls) {
    std::string message;
    const JobState state = daemon_->client().job_state(&message);
    if (state == DONE || state == ABORTED) {
      return absl::AbortedError(
          absl::StrCat("the job ended before a worker declared its model: ", message));
    }
    // (A scheduler being restarted answers again within the members' window.)
    absl::StatusOr<JobSpec> job = daemon_->client().CurrentJob();
    if (job.ok() && job->model().params_size() > 0) {
      job_ = *std::move(job);
      return absl::OkStatus();
    }
    absl::SleepFor(absl::Milliseconds(polls < 50 ? 100 : 500));
  }
  return absl::CancelledError("interrupted");
}

void Server::StartReplication() {
  StandbySenderOptions o;
  o.server_id = id_;
  // Gradients through shared memory with a standby on this host, as a
  // worker's pushes.
  if (OffersShm(config_)) {
    o.layout_of = [partition = *partition_, standby_copies = job_.standby_copies()](int server) {
      return ShmLayout::OfServer(partition, server, standby_copies);
    };
  }
  o.on_confirmed = [this] { service_->WakePushes(); };
  o.bytes = &service_->counters().replicated_bytes;
  o.tables = shard_->tables().get();
  sender_ = std::make_unique<StandbySender>(store_.get(), std::move(o));
  shard_->SetStandbySink(sender_.get());
}

void Server::LimitInFlight(const std::optional<ServerMemoryPlan>& plan) {
  if (plan.has_value()) {
    // Offloaded: the budget's shares bound the pushes the workers have
    // under way here (their windows) and the replies built, so that the
    // budget bounds the process. gRPC's quota counts what the transport holds: the requests (which
    // the workers' windows keep within their share) and the transport's
    // own buffers. It is a cut-off, not a throttle -- near it gRPC sends
    // GOAWAYs and cancels streams, which the workers retry or fail on -- so
    // it gets twice the requests' and replies' shares (half the budget;
    // measured at a quarter: a few GOAWAYs a run), never less than the
    // transport needs for its reads.
    quota_->Resize(
        static_cast<size_t>(std::max(2 * (plan->requests + plan->replies), kMinTransportQuota)));
    service_->SetReplyLimit(plan->replies);
    service_->SetPushWindow(plan->push_window);
    return;
  }
  // Requests in flight: each worker's pushes of two clocks and its pulls of
  // this server's share (fp32) with room to spare -- 8 shares a worker --
  // and never less than the minimum.
  const int64_t inflight = std::max<int64_t>(
      kMinRequestsInFlight, int64_t{8} * job_.num_workers() * store_->NumParams() * 4);
  quota_->Resize(static_cast<size_t>(inflight));
  spdlog::info("admitting at most {} MiB of requests in flight", inflight >> 20);
}

absl::StatusOr<JobState> Server::Serve(std::string* message) {
  ShardActions actions = Actions();
  ServerMemberLoop loop(job_.num_workers(), &actions);
  while (!ShutdownRequested()) {
    RETURN_IF_ERROR(store_->health());  // offloading failed: this server fails
    const ClusterNews news = NewsFrom(daemon_->client());
    ASSIGN_OR_RETURN(const std::optional<JobState> end, loop.Adopt(news));
    if (end.has_value()) {
      daemon_->client().job_state(message);
      if (!news.leave.empty()) *message = news.leave;  // drained
      return *end;
    }
    absl::SleepFor(absl::Milliseconds(10));  // (a move's steps wait for it)
  }
  spdlog::warn("interrupted; shutting down");
  *message = "interrupted";
  return ABORTED;
}

int Server::Fail(const absl::Status& st) {
  spdlog::error("{}", st.message());
  if (clipping_ != nullptr) clipping_->Stop();
  daemon_->ReportFinal(service_->GetStatus(), FAILED, std::string(st.message()));
  serving_->Stop();
  return 1;
}

int Server::Finish(JobState end, const std::string& message) {
  // It uses the scheduler client, which goes first.
  if (clipping_ != nullptr) clipping_->Stop();
  const MemberState state = end == DONE ? FINISHED : FAILED;
  service_->SetState(state, message);
  service_->CancelParked(absl::AbortedError("server shutting down"));
  // The scheduler waits for every member's last state before it writes
  // the job's final status (--status_file).
  daemon_->ReportFinal(service_->GetStatus(), state, message);
  serving_->Stop(absl::Seconds(2));
  if (end != DONE) {
    spdlog::error("job aborted: {}", message);
    return 1;
  }
  const MemberStatus st = service_->GetStatus();
  spdlog::info("job done; {} pushes, {} pulls served; {} bytes in, {} bytes out", st.pushes(),
               st.pulls(), st.bytes_in(), st.bytes_out());
  return 0;
}

}  // namespace

int RunServer(const ServerConfig& config) {
  SetLogIdentity("server", -1);
  InstallShutdownHandlers();
  InstallOutOfMemoryExit();
  if (config.offload_dir.empty()) {
    TuneMallocForBulkTraffic();
  } else {
    TuneMallocForBoundedMemory();
  }
  auto trace = TraceWriter::Open(config.trace_file);
  if (!trace.ok()) {
    spdlog::error("{}", trace.status().message());
    return 2;
  }
  PsService service;
  if (OffersShm(config)) {
    absl::StatusOr<std::unique_ptr<ShmRegistry>> shm = ShmRegistry::Start();
    if (shm.ok()) {
      service.SetShm(std::move(*shm));
    } else {
      spdlog::warn("no shared memory for workers on this host: {}", shm.status().message());
    }
  }
  MemoryGiveBack give_back([&service] { return service.refused(); });
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> queues;
  MemberConfig member = config.member;
  member.server.quota = std::make_shared<grpc::ResourceQuota>("ps_server requests");
  // Until the job is known (registration's messages are small); an
  // offloaded server within its budget's shares from the start.
  member.server.quota->Resize(static_cast<size_t>(
      config.offload_dir.empty() ? kMinRequestsInFlight
                                 : std::clamp<int64_t>(config.memory_budget / 2, kMinTransportQuota,
                                                       kMinRequestsInFlight)));
  member.server.num_queues = std::max(1, config.rpc_threads);
  member.server.queues = &queues;
  int code = 0;
  absl::StatusOr<std::unique_ptr<MemberDaemon>> daemon =
      MemberDaemon::Start(member, {&service}, &code);
  if (!daemon.ok()) return code;
  Serving serving(&service, (*daemon)->server(), std::move(queues));
  RegisterRequest declared;
  declared.set_join(config.join);
  const absl::StatusOr<RegisterResponse> reg = (*daemon)->Register(&code, declared);
  if (!reg.ok()) {
    serving.Stop();
    // A join the job cannot take (its reason logged) is a bad start.
    return config.join && absl::IsFailedPrecondition(reg.status()) ? 2 : code;
  }
  Server server(config, daemon->get(), &service, &serving, trace->get(), member.server.quota.get());
  return server.Run(*reg);
}

}  // namespace pstrain
