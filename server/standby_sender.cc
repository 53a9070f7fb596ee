#include "server/standby_sender.h"

#include <poll.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/time/clock.h"
#include "common/log_limit.h"
#include "common/logging.h"
#include "common/partition.h"
#include "common/rpc.h"

namespace pstrain {
namespace {

// A batch's payload, at most (a single larger change goes alone).
constexpr int64_t kBatchBytes = 4 << 20;
// How long a standby has to answer, and the pause before a failed batch
// goes again.
constexpr absl::Duration kDeadline = absl::Seconds(10);
constexpr absl::Duration kRetryPause = absl::Milliseconds(50);
// Changes not flushed (ChunkStore::ChunkSink::Flush) go after this.
constexpr absl::Duration kFlushWait = absl::Milliseconds(2);

// The whole states of `keys` (`make(key)`: not OK when no longer served
// here) up to a batch's bytes (`bytes(update)` each); the keys whose
// states go in the next batches into *later.
template <typename Update, typename Key, typename Make, typename Bytes>
std::vector<Update> WholeStates(const std::set<Key>& keys, Make make, Bytes bytes,
                                std::set<Key>* later) {
  std::vector<Update> whole;
  int64_t whole_bytes = 0;
  for (const Key& key : keys) {
    if (!whole.empty() && whole_bytes >= kBatchBytes) {
      later->insert(key);
      continue;
    }
    absl::StatusOr<Update> u = make(key);
    if (!u.ok()) continue;
    whole_bytes += bytes(*u);
    whole.push_back(*std::move(u));
  }
  return whole;
}

}  // namespace

std::vector<bool> ServerRoles::shipped() const {
  std::vector<bool> out;
  for (const std::string& a : standby_address) out.push_back(!a.empty());
  return out;
}

ServerRoles RolesOf(const ServerRoutes& routes, int server_id) {
  ServerRoles roles;
  const int n = routes.serving_size();
  for (int home = 0; home < n; ++home) {
    const bool serves = routes.serving(home) == server_id;
    // The pair of `home` is home and the next server; the other one keeps the copy.
    const int standby = PairPartner(home, server_id, n);
    const std::string address =
        serves && standby < routes.addresses_size() ? routes.addresses(standby) : "";
    roles.serving.push_back(serves);
    roles.standby.push_back(address.empty() ? -1 : standby);
    roles.standby_address.push_back(address);
  }
  return roles;
}

StandbySender::StandbySender(ChunkStore* store, StandbySenderOptions options)
    : store_(store), options_(std::move(options)) {
  thread_ = std::thread([this] { Loop(); });
}

StandbySender::~StandbySender() { Stop(); }

void StandbySender::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void StandbySender::Changed(int home, ChunkUpdate update) {
  absl::MutexLock lock(&mu_);
  queues_[home].updates.push_back(std::move(update));
}

void StandbySender::NeedWhole(int home, int32_t chunk) {
  absl::MutexLock lock(&mu_);
  queues_[home].need_full.insert(chunk);
}

void StandbySender::ChangedTable(int home, TableUpdate update) {
  absl::MutexLock lock(&mu_);
  queues_[home].table_updates.push_back(std::move(update));
  flushed_ = true;
}

void StandbySender::NeedWholeTable(int home, const std::string& table) {
  absl::MutexLock lock(&mu_);
  queues_[home].tables_need_full.insert(table);
}

void StandbySender::Flush() {
  absl::MutexLock lock(&mu_);
  flushed_ = true;
}

void StandbySender::SetTargets(const ServerRoles& roles, int64_t generation) {
  absl::MutexLock lock(&mu_);
  generation_ = generation;
  for (int home = 0; home < static_cast<int>(roles.standby_address.size()); ++home) {
    const std::string& address = roles.standby_address[home];
    if (address.empty()) {
      queues_.erase(home);
      continue;
    }
    queues_[home].target = {address, roles.standby[home]};
  }
}

bool StandbySender::AsksWhole() const {
  for (const auto& [home, q] : queues_) {
    if (!q.target.address.empty() && (!q.need_full.empty() || !q.tables_need_full.empty())) {
      return true;
    }
  }
  return false;
}

bool StandbySender::HasWork() const {
  for (const auto& [home, q] : queues_) {
    if (q.Busy()) return true;
  }
  return false;
}

bool StandbySender::Next(Batch* batch) {
  absl::MutexLock lock(&mu_);
  // Whole states the standby asked for go at once; changes once flushed,
  // or kFlushWait after they came if no flush does.
  auto work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stop_ || (HasWork() && (flushed_ || AsksWhole()));
  };
  auto any = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || HasWork(); };
  bool timed_out = false;
  do {
    mu_.Await(absl::Condition(&any));
    timed_out = !mu_.AwaitWithTimeout(absl::Condition(&work), kFlushWait);
  } while (timed_out && !HasWork());
  if (stop_) return false;
  // The first home with work at or after next_home_, round the ring.
  auto it = queues_.lower_bound(next_home_);
  for (size_t tried = 0; tried <= queues_.size(); ++tried, ++it) {
    if (it == queues_.end()) it = queues_.begin();
    if (it->second.Busy()) break;
  }
  Queue& q = it->second;
  batch->home = it->first;
  batch->target = q.target;
  batch->generation = generation_;
  batch->updates.clear();
  next_home_ = it->first + 1;
  // Whole states first: later changes of the same chunk follow them.
  const std::set<int32_t> fulls = std::move(q.need_full);
  q.need_full.clear();
  std::set<int32_t> in_batch(fulls);
  int64_t bytes = 0;
  while (!q.updates.empty() && (batch->updates.empty() || bytes < kBatchBytes) &&
         in_batch.insert(q.updates.front().chunk()).second) {  // each chunk once
    bytes += static_cast<int64_t>(q.updates.front().grad().size());
    batch->updates.push_back(std::move(q.updates.front()));
    q.updates.pop_front();
  }
  NextTables(q, batch);
  if (!HasWork()) flushed_ = false;
  mu_.Unlock();
  std::set<int32_t> later;
  std::vector<ChunkUpdate> whole = WholeStates<ChunkUpdate>(
      fulls, [this](int32_t chunk) { return store_->FullUpdate(chunk); },
      [](const ChunkUpdate& u) {
        return static_cast<int64_t>(u.weights().size() + u.state().size());
      },
      &later);
  mu_.Lock();
  if (!later.empty()) {
    auto again = queues_.find(batch->home);
    if (again != queues_.end()) again->second.need_full.insert(later.begin(), later.end());
  }
  batch->updates.insert(batch->updates.begin(), std::make_move_iterator(whole.begin()),
                        std::make_move_iterator(whole.end()));
  return true;
}

void StandbySender::NextTables(Queue& q, Batch* batch) {
  batch->tables.clear();
  if (options_.tables == nullptr) return;
  int64_t bytes = 0;
  while (!q.table_updates.empty() && (batch->tables.empty() || bytes < kBatchBytes)) {
    bytes += static_cast<int64_t>(q.table_updates.front().values().size());
    batch->tables.push_back(std::move(q.table_updates.front()));
    q.table_updates.pop_front();
  }
  const std::set<std::string> fulls = std::move(q.tables_need_full);
  q.tables_need_full.clear();
  if (fulls.empty()) return;
  const int home = batch->home;
  mu_.Unlock();
  std::set<std::string> later;
  std::vector<TableUpdate> whole = WholeStates<TableUpdate>(
      fulls,
      [this, home](const std::string& table) { return options_.tables->FullUpdate(home, table); },
      [](const TableUpdate& u) { return static_cast<int64_t>(u.values().size()); }, &later);
  mu_.Lock();
  if (!later.empty()) {
    auto again = queues_.find(home);
    if (again != queues_.end()) again->second.tables_need_full.insert(later.begin(), later.end());
  }
  // Whole states first: the later changes of the same part follow them.
  batch->tables.insert(batch->tables.begin(), std::make_move_iterator(whole.begin()),
                       std::make_move_iterator(whole.end()));
}

void StandbySender::TablesAnswered(const Batch& batch, const ReplicateResponse& resp) {
  if (options_.tables == nullptr || batch.tables.empty()) return;
  const std::set<std::string> need_full(resp.need_full_tables().begin(),
                                        resp.need_full_tables().end());
  for (const TableUpdate& u : batch.tables) {
    if (need_full.count(u.table()) > 0) continue;
    options_.tables->Confirmed(batch.home, u.table(), u.version(),
                               {u.applied().begin(), u.applied().end()});
  }
  if (need_full.empty()) return;
  absl::MutexLock lock(&mu_);
  auto it = queues_.find(batch.home);
  if (it != queues_.end() && it->second.target.address == batch.target.address) {
    it->second.tables_need_full.insert(need_full.begin(), need_full.end());
  }
}

ParameterServer::Stub& StandbySender::StubFor(const std::string& address) {
  std::unique_ptr<ParameterServer::Stub>& stub = stubs_[address];
  if (stub == nullptr) stub = ParameterServer::NewStub(MakeBulkChannel(address));
  return *stub;
}

ShmLink* StandbySender::LinkFor(const Target& target) {
  if (!options_.layout_of || target.server < 0) return nullptr;
  auto it = links_.find(target.address);
  if (it != links_.end()) return it->second.get();
  absl::StatusOr<std::unique_ptr<ShmLink>> link =
      ShmLink::Open(target.address, /*worker_id=*/-1, options_.layout_of(target.server));
  if (!link.ok()) {
    spdlog::info("standby server {}: changes in the messages ({})", target.server,
                 link.status().message());
    return links_.emplace(target.address, nullptr).first->second.get();
  }
  spdlog::info("standby server {}: gradients through shared memory", target.server);
  return links_.emplace(target.address, *std::move(link)).first->second.get();
}

ReplicateRequest StandbySender::Request(Batch& batch, ShmLink* link,
                                        std::vector<std::string>* held) {
  ReplicateRequest req;
  req.set_from_server(options_.server_id);
  req.set_generation(batch.generation);
  held->assign(batch.updates.size(), std::string());
  for (size_t i = 0; i < batch.updates.size(); ++i) {
    ChunkUpdate& u = batch.updates[i];
    if (link != nullptr && !u.full() && !u.grad().empty() && link->layout().Has(u.chunk())) {
      std::memcpy(link->PushSlot(u.chunk()), u.grad().data(), u.grad().size());
      (*held)[i] = std::move(*u.mutable_grad());
      u.clear_grad();
      u.set_grad_in_shm(true);
      req.set_shm_segment(link->id());
    }
    *req.add_updates() = std::move(u);
  }
  req.set_table_home(batch.home);
  for (TableUpdate& u : batch.tables) *req.add_tables() = std::move(u);
  return req;
}

grpc::Status StandbySender::Ring(ShmLink& link, const ReplicateRequest& req,
                                 ReplicateResponse* resp) {
  const uint64_t seq = ++seq_;
  if (const absl::Status st = link.Ring(kShmReplicate, seq, req.SerializeAsString()); !st.ok()) {
    return ToGrpc(st);
  }
  const absl::Time deadline = absl::Now() + kDeadline;
  while (true) {
    bool got = false;
    grpc::Status answer;
    const absl::Status read = link.TakeReplies([&](const ShmFrame& frame) {
      if (frame.header.seq != seq) return;  // (an older call's, given up)
      got = true;
      answer = frame.header.code == 0
                   ? grpc::Status::OK
                   : grpc::Status(static_cast<grpc::StatusCode>(frame.header.code), frame.message);
      if (answer.ok() && !resp->ParseFromString(frame.body)) {
        answer = grpc::Status(grpc::StatusCode::INTERNAL, "replicate: a malformed answer");
      }
    });
    if (got) return answer;
    if (!read.ok()) return ToGrpc(read);
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "replicate: no answer in time");
    }
    pollfd p{link.fd(), POLLIN, 0};
    poll(&p, 1, static_cast<int>(std::max<int64_t>(1, absl::ToInt64Milliseconds(left))));
  }
}

bool StandbySender::Send(Batch& batch) {
  ShmLink* link = LinkFor(batch.target);
  std::vector<std::string> held;
  ReplicateRequest req = Request(batch, link, &held);
  int64_t bytes = static_cast<int64_t>(req.ByteSizeLong());
  for (const std::string& g : held) bytes += static_cast<int64_t>(g.size());
  ReplicateResponse resp;
  grpc::Status st;
  // A small request (the gradients in the segment) rings the doorbell; a
  // whole state goes in a gRPC call.
  if (link != nullptr && req.ByteSizeLong() < kMaxShmFrame / 2) {
    req.set_shm_segment(link->id());  // a frame names its connection's segment
    st = Ring(*link, req, &resp);
    if (!st.ok()) links_[batch.target.address] = nullptr;  // the messages from now on
  } else {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + kDeadline));
    st = StubFor(batch.target.address).Replicate(&ctx, req, &resp);
  }
  // Moved back as they were: a failed batch goes again.
  for (int i = 0; i < req.tables_size(); ++i) batch.tables[i] = std::move(*req.mutable_tables(i));
  for (int i = 0; i < req.updates_size(); ++i) {
    ChunkUpdate& u = batch.updates[i];
    u = std::move(*req.mutable_updates(i));
    if (u.grad_in_shm()) {
      *u.mutable_grad() = std::move(held[i]);
      u.set_grad_in_shm(false);
    }
  }
  if (!st.ok()) {
    // The standby lost the segment (it restarted): the messages from now on.
    if (st.error_code() == grpc::StatusCode::NOT_FOUND) links_[batch.target.address] = nullptr;
    static LogLimit limit;
    int64_t held_back = 0;
    if (limit.Allow(&held_back)) {
      spdlog::warn("standby at {} of server {}'s chunks did not take {} changes: {}",
                   batch.target.address, batch.home, batch.updates.size() + batch.tables.size(),
                   st.error_message());
    }
    return false;
  }
  if (options_.bytes != nullptr) *options_.bytes += bytes;
  const std::set<int32_t> need_full(resp.need_full().begin(), resp.need_full().end());
  for (const ChunkUpdate& u : batch.updates) {
    if (need_full.count(u.chunk()) > 0) continue;
    store_->Confirmed(u.chunk(), u.version(), {u.applied().begin(), u.applied().end()});
  }
  if (!need_full.empty()) {
    absl::MutexLock lock(&mu_);
    auto it = queues_.find(batch.home);
    if (it != queues_.end() && it->second.target.address == batch.target.address) {
      it->second.need_full.insert(need_full.begin(), need_full.end());
    }
  }
  TablesAnswered(batch, resp);
  if (options_.on_confirmed) options_.on_confirmed();
  return true;
}

void StandbySender::Loop() {
  Batch batch;
  while (Next(&batch)) {
    if (Send(batch)) continue;
    // Again, ahead of what came since (whole states are made anew); a
    // home whose standby went has no queue any more.
    {
      absl::MutexLock lock(&mu_);
      auto it = queues_.find(batch.home);
      if (it != queues_.end()) {
        Queue& q = it->second;
        for (auto u = batch.updates.rbegin(); u != batch.updates.rend(); ++u) {
          if (u->full()) {
            q.need_full.insert(u->chunk());
          } else {
            q.updates.push_front(std::move(*u));
          }
        }
        for (auto u = batch.tables.rbegin(); u != batch.tables.rend(); ++u) {
          if (u->full()) {
            q.tables_need_full.insert(u->table());
          } else {
            q.table_updates.push_front(std::move(*u));
          }
        }
      }
    }
    absl::SleepFor(kRetryPause);
  }
}

}  // namespace pstrain
