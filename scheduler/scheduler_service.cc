#include "scheduler/scheduler_service.h"

#include "common/process_stats.h"
#include "common/rpc.h"
#include "common/status_macros.h"
#include "common/tensor_wire.h"
#include "scheduler/manifest.h"
#include "scheduler/state_file.h"
#include "spdlog/spdlog.h"

namespace pstrain {
namespace {

constexpr char kLeaving[] = "the scheduler is leaving; the one that takes the job over answers";

std::vector<std::string> TableNames(const JobSpec& job) {
  std::vector<std::string> names;
  for (const TableSpec& t : job.tables()) names.push_back(t.name());
  return names;
}

}  // namespace

int64_t DirectoryCatalog::NewestCompleteSet(const std::vector<int>& servers, int64_t at_most) {
  return pstrain::NewestCompleteSet(dir_, servers, at_most, tables_);
}

SchedulerService::SchedulerService(const JobSpec& job, TraceWriter* trace, SchedulerPolicy policy)
    : job_(job),
      trace_(trace),
      catalog_(job.checkpoint_dir(), TableNames(job)),
      coordinator_(
          job, policy, &catalog_,
          [this](const TraceEvent& e) {
            if (trace_ != nullptr && trace_->enabled()) trace_->Write(e);
          },
          absl::Now()) {}

absl::Status SchedulerService::KeepState(const std::string& state_dir,
                                         const std::optional<SchedulerState>& takeover) {
  absl::MutexLock lock(&mu_);
  state_dir_ = state_dir;
  if (takeover.has_value()) RETURN_IF_ERROR(coordinator_.TakeOver(*takeover, absl::Now()));
  durable_key_ = coordinator_.DurableKey();
  absl::MutexLock write(&write_mu_);
  RETURN_IF_ERROR(WriteSchedulerState(state_dir_, coordinator_.Snapshot()));
  written_seq_ = ++snapshot_seq_;
  written_at_ = absl::Now();
  return absl::OkStatus();
}

void SchedulerService::PersistClocks() {
  if (state_dir_.empty()) return;
  {
    absl::MutexLock write(&write_mu_);
    if (absl::Now() - written_at_ < absl::Seconds(1)) return;
  }
  SchedulerState state;
  int64_t seq;
  {
    absl::MutexLock lock(&mu_);
    state = coordinator_.Snapshot();
    seq = ++snapshot_seq_;
  }
  absl::MutexLock write(&write_mu_);
  WriteState(state, seq);
}

bool SchedulerService::WriteState(const SchedulerState& state, int64_t seq) {
  if (seq <= written_seq_) return true;  // a newer one is on disk already
  const absl::Status st = WriteSchedulerState(state_dir_, state);
  if (st.ok()) {
    written_seq_ = seq;
    written_at_ = absl::Now();
    write_failed_ = false;
    return true;
  }
  if (!write_failed_) {
    spdlog::error("cannot write the scheduler state ({}); a restarted scheduler would take over "
                  "an older one",
                  std::string(st.message()));
    write_failed_ = true;
  }
  return false;
}

void SchedulerService::SetAddress(const std::string& address) {
  absl::MutexLock lock(&mu_);
  coordinator_.SetAddress(address);
}

void SchedulerService::SetMetricsAddress(const std::string& address) {
  absl::MutexLock lock(&mu_);
  metrics_address_ = address;
}

void SchedulerService::Abort(const std::string& message) {
  absl::MutexLock lock(&mu_);
  coordinator_.Abort(message, absl::Now());
  Deliver();
}

void SchedulerService::CheckLiveness(absl::Time now) {
  absl::MutexLock lock(&mu_);
  ForgetCancelled();
  coordinator_.Tick(now);
  Deliver();
}

void SchedulerService::Paused(absl::Duration gap) {
  absl::MutexLock lock(&mu_);
  coordinator_.Paused(gap, absl::Now());
}

JobState SchedulerService::job_state(std::string* message) const {
  absl::MutexLock lock(&mu_);
  return coordinator_.state(message);
}

bool SchedulerService::MembersEnded(absl::Duration grace) const {
  absl::MutexLock lock(&mu_);
  return coordinator_.MembersEnded(absl::Now(), grace);
}

ClusterStatus SchedulerService::GetStatus() {
  ClusterStatus out;
  {
    absl::MutexLock lock(&mu_);
    ForgetCancelled();
    out = coordinator_.Status(absl::Now());
    out.mutable_scheduler()->set_metrics_address(metrics_address_);
  }
  out.mutable_scheduler()->set_rss_bytes(ResidentBytes());
  return out;
}

void SchedulerService::Leave() {
  absl::MutexLock lock(&mu_);
  leaving_ = true;
  for (auto& [ticket, p] : parked_) {
    if (p.Claim()) p.reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, kLeaving));
  }
  parked_.clear();
}

void SchedulerService::ForgetCancelled() {
  for (auto it = parked_.begin(); it != parked_.end();) {
    if (!it->second.Gone()) {
      ++it;
      continue;
    }
    coordinator_.Forget(it->first);
    it = parked_.erase(it);
  }
}

void SchedulerService::Deliver() {
  if (!state_dir_.empty()) {
    std::string key = coordinator_.DurableKey();
    if (key != durable_key_) {
      const int64_t seq = ++snapshot_seq_;
      absl::MutexLock write(&write_mu_);
      // Not written: the next event tries again.
      if (WriteState(coordinator_.Snapshot(), seq)) durable_key_ = std::move(key);
    }
  }
  for (Release& r : coordinator_.TakeReleases()) {
    auto it = parked_.find(r.ticket);
    if (it == parked_.end()) continue;
    Parked<HeldReply>& p = it->second;
    if (p.Claim()) {
      if (r.status.ok() && p.what.gate != nullptr) *p.what.gate = std::move(r.gate);
      if (r.status.ok() && p.what.norm != nullptr) p.what.norm->set_sum_squares(r.sum_squares);
      p.reactor->Finish(ToGrpc(r.status));
    }
    parked_.erase(it);
  }
}

grpc::ServerUnaryReactor* SchedulerService::Hold(grpc::CallbackServerContext* ctx, Ticket ticket,
                                                 HeldReply reply, const absl::Status& status,
                                                 bool parked) {
  if (parked && leaving_) {
    coordinator_.Forget(ticket);
    Deliver();
    return FinishNow(ctx, grpc::Status(grpc::StatusCode::UNAVAILABLE, kLeaving));
  }
  if (!parked) {
    Deliver();
    return FinishNow(ctx, ToGrpc(status));
  }
  auto* reactor = new ParkedReactor();
  parked_.emplace(ticket, Parked<HeldReply>(reactor, reply));
  Deliver();
  return reactor;
}

void SchedulerService::WriteDueManifest() {
  std::optional<int64_t> clock;
  std::vector<int> chunk_servers;
  {
    absl::MutexLock lock(&mu_);
    clock = coordinator_.TakeManifestToWrite();
    chunk_servers = coordinator_.chunk_servers();
  }
  if (!clock.has_value()) return;
  const absl::Status st =
      WriteManifest(job_.checkpoint_dir(), *clock, job_.num_servers(), chunk_servers);
  absl::MutexLock lock(&mu_);
  coordinator_.ManifestWritten(*clock, st, absl::Now());
  Deliver();
}

grpc::ServerUnaryReactor* SchedulerService::Register(grpc::CallbackServerContext* ctx,
                                                     const RegisterRequest* req,
                                                     RegisterResponse* resp) {
  std::optional<std::string> holder;
  {
    absl::MutexLock lock(&mu_);
    ForgetCancelled();
    holder = coordinator_.LiveHolder(*req);
  }
  if (!holder.has_value()) return FinishNow(ctx, ToGrpc(RegisterNow(*req, resp)));
  // The id's member may be live: it keeps its place if it still answers.
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  probe_.Probe(*holder, [this, req, resp, reactor](bool answered) {
    absl::Status st;
    if (answered) {
      absl::MutexLock lock(&mu_);
      st = coordinator_.RefuseLive(*req, absl::Now());
    } else {
      st = RegisterNow(*req, resp);
    }
    reactor->Finish(ToGrpc(st));
  });
  return reactor;
}

absl::Status SchedulerService::RegisterNow(const RegisterRequest& req, RegisterResponse* resp) {
  std::optional<JobSpec> declared;  // the job, when this worker declared its model
  absl::StatusOr<RegisterResponse> r;
  {
    absl::MutexLock lock(&mu_);
    ForgetCancelled();
    const bool undeclared = coordinator_.job().model().kind() == EXTERNAL &&
                            coordinator_.job().model().params_size() == 0;
    r = coordinator_.Register(req, absl::Now());
    if (r.ok()) *resp = std::move(*r);
    if (undeclared && coordinator_.job().model().params_size() > 0) declared = coordinator_.job();
    Deliver();
  }
  // The checkpoints' job file names the declared parameters (psctl export).
  if (declared.has_value()) {
    if (const absl::Status st = WriteCheckpointJob(*declared); !st.ok()) {
      spdlog::error("{}", std::string(st.message()));
    }
  }
  return r.status();
}

grpc::ServerUnaryReactor* SchedulerService::Heartbeat(grpc::CallbackServerContext* ctx,
                                                      const HeartbeatRequest* req,
                                                      HeartbeatResponse* resp) {
  absl::Status st;
  {
    absl::MutexLock lock(&mu_);
    ForgetCancelled();
    absl::StatusOr<HeartbeatResponse> r = coordinator_.Heartbeat(*req, absl::Now());
    if (r.ok()) *resp = std::move(*r);
    st = r.status();
    Deliver();
  }
  WriteDueManifest();
  return FinishNow(ctx, ToGrpc(st));
}

grpc::ServerUnaryReactor* SchedulerService::AdvanceClock(grpc::CallbackServerContext* ctx,
                                                         const AdvanceClockRequest* req,
                                                         AdvanceClockResponse* resp) {
  absl::MutexLock lock(&mu_);
  ForgetCancelled();
  const Ticket ticket = ++next_ticket_;
  bool parked = false;
  const absl::Status st = coordinator_.AdvanceClock(*req, ticket, absl::Now(), resp, &parked);
  return Hold(ctx, ticket, HeldReply{resp, nullptr}, st, parked);
}

grpc::ServerUnaryReactor* SchedulerService::ReduceNorm(grpc::CallbackServerContext* ctx,
                                                       const ReduceNormRequest* req,
                                                       ReduceNormResponse* resp) {
  absl::MutexLock lock(&mu_);
  ForgetCancelled();
  const Ticket ticket = ++next_ticket_;
  bool parked = false;
  double sum = 0;
  const absl::Status st = coordinator_.ReduceNorm(*req, ticket, absl::Now(), &sum, &parked);
  if (st.ok() && !parked) resp->set_sum_squares(sum);
  return Hold(ctx, ticket, HeldReply{nullptr, resp}, st, parked);
}

grpc::ServerUnaryReactor* SchedulerService::Status(grpc::CallbackServerContext* ctx,
                                                   const grpc::ByteBuffer* req,
                                                   grpc::ByteBuffer* resp) {
  StatusRequest request;
  if (!ParseSmall(*req, &request)) {
    return FinishNow(ctx, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                       "status: the request is not a StatusRequest"));
  }
  *resp = SerializeSmall(GetStatus());
  return FinishNow(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* SchedulerService::Control(grpc::CallbackServerContext* ctx,
                                                    const ControlRequest* req,
                                                    ControlResponse* resp) {
  absl::MutexLock lock(&mu_);
  ForgetCancelled();
  const absl::StatusOr<int64_t> clock = coordinator_.Control(*req, absl::Now());
  if (clock.ok()) resp->set_clock(*clock);
  Deliver();
  return FinishNow(ctx, ToGrpc(clock.status()));
}

}  // namespace pstrain
