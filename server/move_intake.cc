#include "server/move_intake.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/placement.h"
#include "common/rpc.h"

namespace pstrain {
namespace {

// The chunk bytes one call asks for (at least one chunk): the weights,
// with up to three state arrays each, well within the transport's message
// limit, and small enough for a holder's calls to overlap.
constexpr int64_t kCallChunkBytes = 1 << 20;
// A holder's calls in flight at once.
constexpr int kCallsInFlight = 4;
// A holder not at the switch clock yet is asked again this soon.
constexpr absl::Duration kAgain = absl::Milliseconds(2);

bool SameMove(const MoveNews& a, const MoveNews& b) {
  return a.to().version() == b.to().version() && a.switch_clock() == b.switch_clock();
}

// A holder's refusal that asking again cannot get past: the answer too
// large for a message, a request it cannot take, its own failure.
bool Final(grpc::StatusCode code) {
  return code == grpc::StatusCode::RESOURCE_EXHAUSTED ||
         code == grpc::StatusCode::INVALID_ARGUMENT || code == grpc::StatusCode::INTERNAL ||
         code == grpc::StatusCode::UNIMPLEMENTED;
}

int64_t BytesOf(const HandOverResponse& r) {
  int64_t bytes = r.rows().values().size();
  for (const ChunkUpdate& u : r.chunks()) bytes += u.weights().size() + u.state().size();
  return bytes;
}

}  // namespace

MoveIntake::MoveIntake(int server_id, const JobSpec& job, std::function<void()> on_held)
    : server_id_(server_id), job_(job), on_held_(std::move(on_held)) {}

MoveIntake::~MoveIntake() {
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    if (current_ != nullptr) current_->stop = true;
    threads.swap(threads_);
  }
  for (std::thread& t : threads) t.join();
}

void MoveIntake::Follow(const MoveNews& news, int64_t generation) {
  absl::MutexLock lock(&mu_);
  if (SameMove(heard_, news) && heard_generation_ == generation) return;
  if (current_ != nullptr) current_->stop = true;  // its thread ends at its next step
  current_.reset();
  heard_ = news;
  heard_generation_ = generation;
  if (news.to().version() == 0 || HandoverTo(news.from(), news.to(), server_id_).empty()) return;
  current_ = std::make_shared<Intake>();
  current_->news = news;
  current_->generation = generation;
  {
    absl::MutexLock intake_lock(&current_->mu);
    current_->handed.version = news.to().version();
    current_->handed.switch_clock = news.switch_clock();
  }
  threads_.emplace_back([this, intake = current_] { Run(intake); });
}

void MoveIntake::AddStatus(ServerStatus* out) const {
  absl::MutexLock lock(&mu_);
  if (heard_.to().version() == 0) return;
  out->set_handover_version(heard_.to().version());
  out->set_handover_switch_clock(heard_.switch_clock());
  if (current_ == nullptr) {  // it takes nothing: held whole
    out->set_handed_over(true);
    return;
  }
  absl::MutexLock intake_lock(&current_->mu);
  out->set_handed_over_bytes(current_->handed.bytes);
  out->set_handed_over(current_->whole);
  out->set_handover_ms(current_->transfer_ms);
  out->set_handover_error(current_->error);
}

absl::StatusOr<std::optional<HandedOver>> MoveIntake::Take(int64_t version, int64_t clock) {
  absl::MutexLock lock(&mu_);
  if (heard_.to().version() != version || heard_.switch_clock() != clock) return std::nullopt;
  HandedOver handed;
  handed.version = version;
  handed.switch_clock = clock;
  if (current_ == nullptr) return handed;  // the move gives this server nothing
  absl::MutexLock intake_lock(&current_->mu);
  if (!current_->whole) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the move to placement ", version, " switched before server ", server_id_,
        " held all it takes (", current_->handed.bytes, " bytes came)"));
  }
  std::swap(handed, current_->handed);
  current_->handed.bytes = handed.bytes;  // what Status goes on reporting
  return handed;
}

int MoveIntake::ChunksPerCall() const {
  return static_cast<int>(std::max<int64_t>(1, kCallChunkBytes / std::max<int64_t>(
                                                                      1, job_.chunk_bytes())));
}

void MoveIntake::Run(std::shared_ptr<Intake> intake) const {
  const MoveNews& news = intake->news;
  const Handover handover = HandoverTo(news.from(), news.to(), server_id_);
  HandOverRequest base;
  base.set_generation(intake->generation);
  base.set_clock(news.switch_clock());
  base.set_to_server(server_id_);
  // Per holder, its calls: the chunks in batches, then each table's rows.
  std::map<int, std::vector<HandOverRequest>> calls;
  for (const auto& [holder, chunks] : handover.chunks) {
    for (size_t i = 0; i < chunks.size(); i += ChunksPerCall()) {
      HandOverRequest& req = calls[holder].emplace_back(base);
      const size_t end = std::min(chunks.size(), i + ChunksPerCall());
      for (size_t c = i; c < end; ++c) req.add_chunks(chunks[c]);
    }
  }
  for (int holder : handover.rows) {
    for (const TableSpec& t : job_.tables()) {
      HandOverRequest& req = calls[holder].emplace_back(base);
      *req.mutable_placement() = news.to();
      req.set_table(t.name());
    }
  }
  // The holders asked at once, each with a few calls in flight.
  Span span;
  std::atomic<bool> all{true};
  std::vector<std::thread> threads;
  std::map<int, std::atomic<size_t>> next;
  std::map<int, std::unique_ptr<ParameterServer::Stub>> stubs;  // a connection each
  const auto& addresses = news.addresses();
  for (const auto& [holder, reqs] : calls) {
    if (holder < 0 || holder >= addresses.size() || addresses[holder].empty()) {
      spdlog::warn("the move names no address of server {}: it cannot hand over", holder);
      all = false;
      continue;
    }
    ParameterServer::Stub* stub =
        (stubs[holder] = ParameterServer::NewStub(MakeBulkChannel(addresses[holder]))).get();
    std::atomic<size_t>* holder_next = &next[holder];
    for (size_t t = 0; t < std::min<size_t>(kCallsInFlight, reqs.size()); ++t) {
      threads.emplace_back([&, holder = holder, &reqs = reqs, stub, holder_next] {
        if (!TakeFrom(*intake, holder, *stub, reqs, holder_next, &span)) all = false;
      });
    }
  }
  for (std::thread& t : threads) t.join();
  if (!all) return;  // stopped: the move changed or went
  {
    absl::MutexLock lock(&intake->mu);
    intake->whole = true;
    intake->transfer_ms = span.ms();
    spdlog::info("holds its handover of placement {} at clock {}: {} chunks, {} bytes in {} ms",
                 intake->handed.version, intake->handed.switch_clock, intake->handed.chunks.size(),
                 intake->handed.bytes, intake->transfer_ms);
  }
  if (on_held_ != nullptr) on_held_();
}

bool MoveIntake::TakeFrom(Intake& intake, int holder, ParameterServer::Stub& stub,
                          const std::vector<HandOverRequest>& reqs, std::atomic<size_t>* next,
                          Span* span) const {
  for (size_t i = (*next)++; i < reqs.size(); i = (*next)++) {
    const HandOverRequest& req = reqs[i];
    absl::Time started;
    absl::StatusOr<HandOverResponse> got = Ask(intake, holder, stub, req, &started);
    if (!got.ok()) return false;
    span->Add(started, absl::Now());
    absl::MutexLock lock(&intake.mu);
    intake.handed.bytes += BytesOf(*got);
    for (ChunkUpdate& u : *got->mutable_chunks()) {
      const int32_t id = u.chunk();
      intake.handed.chunks[id] = std::move(u);
    }
    if (!req.table().empty()) {
      intake.handed.rows[req.table()].push_back(std::move(*got->mutable_rows()));
    }
  }
  return true;
}

absl::StatusOr<HandOverResponse> MoveIntake::Ask(Intake& intake, int holder,
                                                 ParameterServer::Stub& stub,
                                                 const HandOverRequest& req,
                                                 absl::Time* started) const {
  absl::Duration backoff = kAgain;
  absl::Status last;
  while (!intake.stop.load()) {
    HandOverResponse resp;
    *started = absl::Now();
    auto ctx = ContextWithTimeout(absl::Seconds(60));
    const grpc::Status st = stub.HandOver(ctx.get(), req, &resp);
    if (st.ok()) return resp;
    if (Final(st.error_code())) {
      const std::string why =
          absl::StrCat("server ", holder, " cannot hand over: ", st.error_message());
      spdlog::error("{}", why);
      absl::MutexLock lock(&intake.mu);
      intake.error = why;
      return absl::Status(static_cast<absl::StatusCode>(st.error_code()), why);
    }
    // Not at the clock yet, or unreachable for now (a failure the
    // scheduler acts on: the move is abandoned, and this intake stops).
    if (st.error_code() != grpc::StatusCode::UNAVAILABLE &&
        (last.ok() || static_cast<int>(last.code()) != static_cast<int>(st.error_code()))) {
      spdlog::warn("server {} does not hand over yet: {}", holder, st.error_message());
    }
    last = absl::Status(static_cast<absl::StatusCode>(st.error_code()), st.error_message());
    absl::SleepFor(backoff);
    backoff = st.error_code() == grpc::StatusCode::UNAVAILABLE ? kAgain : absl::Milliseconds(100);
  }
  return absl::CancelledError("the move is no longer followed");
}

}  // namespace pstrain
