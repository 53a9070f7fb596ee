#include "worker/call_flight.h"

#include <poll.h>

#include <algorithm>
#include <chrono>
#include <limits>

#include "common/rpc.h"
#include "common/shm.h"
#include "common/tensor_wire.h"
#include "proto/ps.pb.h"

namespace pstrain {
namespace {

// A pull may wait for slower workers (the read guarantee); one attempt waits
// this long before the client asks again.
constexpr absl::Duration kPullAttempt = absl::Seconds(30);
constexpr absl::Duration kPushAttempt = absl::Seconds(30);
// How often calls under way ask whether they were abandoned.
constexpr std::chrono::milliseconds kAbandonPoll(100);
const char kPushMethod[] = "/pstrain.ParameterServer/Push";
const char kPullMethod[] = "/pstrain.ParameterServer/Pull";
// Frames under way at once in one attempt (a few dozen bytes each answer).
constexpr int kMaxRingsUnderWay = 64;

}  // namespace

CallFlight::CallFlight(std::vector<ClientCall>& calls, FlightEnv env, bool bell)
    : calls_(calls),
      env_(std::move(env)),
      bell_(bell),
      results_(calls.size()),
      statuses_(calls.size()),
      replies_(calls.size()),
      contexts_(calls.size()),
      readers_(calls.size()),
      push_bytes_(env_.stubs->size(), 0),
      seq_(calls.size(), 0),
      deadline_(calls.size()),
      live_(calls.size(), 0) {}

CallFlight::~CallFlight() = default;

std::vector<absl::Status> CallFlight::Run(const std::vector<int>& todo, int* next_channel) {
  for (int i : todo) {
    if (Admit(i)) {
      Launch(i, next_channel);
    } else {
      held_.push_back(i);
    }
  }
  if (bell_) AwaitRings(next_channel);
  AwaitCalls(todo, next_channel);
  return results_;
}

bool CallFlight::Admit(int i) {
  const ClientCall& call = calls_[i];
  // Frames under way are bounded: their answers wait in the socket until
  // this thread reads them, and a server drops a connection whose answer
  // does not fit (a tensor of gigabytes is thousands of calls).
  if (bell_ && running_ >= kMaxRingsUnderWay) return false;
  if (call.is_pull) return true;
  const int64_t bytes = static_cast<int64_t>(call.request.Length());
  int64_t& under_way = push_bytes_[call.server];
  // A push goes when it fits the window, or alone.
  if (under_way > 0 && bytes > (*env_.push_window)[call.server] - under_way) return false;
  under_way += bytes;
  return true;
}

void CallFlight::Launch(int i, int* next_channel) {
  if (bell_) {
    Ring(i);
    return;
  }
  ClientCall& call = calls_[i];
  std::vector<std::unique_ptr<grpc::GenericStub>>& channels = (*env_.stubs)[call.server];
  call.channel = (*next_channel)++ % static_cast<int>(channels.size());
  contexts_[i] = ContextWithTimeout(call.is_pull ? kPullAttempt : kPushAttempt);
  readers_[i] = channels[call.channel]->PrepareUnaryCall(
      contexts_[i].get(), call.is_pull ? kPullMethod : kPushMethod, call.request, &cq_);
  readers_[i]->StartCall();
  readers_[i]->Finish(&replies_[i], &statuses_[i],
                       reinterpret_cast<void*>(static_cast<intptr_t>(i)));
  ++running_;
  ++*env_.rpcs;
}

void CallFlight::Ring(int i) {
  ClientCall& call = calls_[i];
  seq_[i] = ++*env_.next_seq;
  deadline_[i] = absl::Now() + (call.is_pull ? kPullAttempt : kPushAttempt);
  live_[i] = 1;
  ++running_;
  ++*env_.rpcs;
  ++*env_.shm_rings;
  const absl::Status st =
      call.link->Ring(call.is_pull ? kShmPull : kShmPush, seq_[i], FlattenSmall(call.request));
  if (!st.ok()) {  // ended by AwaitRings at once; the next attempt goes by gRPC
    statuses_[i] = grpc::Status(grpc::StatusCode::UNAVAILABLE, std::string(st.message()));
    deadline_[i] = absl::InfinitePast();
    env_.links->Lose(call.server, call.link);
  }
}

void CallFlight::EndRings(const ShmLink* link, const grpc::Status& status) {
  for (int i = 0; i < static_cast<int>(calls_.size()); ++i) {
    if (!live_[i] || (link != nullptr && calls_[i].link != link)) continue;
    statuses_[i] = status;
    Complete(i);
  }
}

void CallFlight::AwaitRings(int* next_channel) {
  std::vector<ShmLink*> links;
  for (const ClientCall& call : calls_) {
    if (call.link != nullptr && std::find(links.begin(), links.end(), call.link) == links.end()) {
      links.push_back(call.link);
    }
  }
  absl::Time abandon_check = absl::Now() + absl::FromChrono(kAbandonPoll);
  while (running_ > 0) {
    const absl::Time now = absl::Now();
    absl::Time wake = abandon_check;
    for (size_t i = 0; i < calls_.size(); ++i) {
      if (live_[i]) wake = std::min(wake, deadline_[i]);
    }
    std::vector<pollfd> fds;
    for (const ShmLink* link : links) fds.push_back({link->fd(), POLLIN, 0});
    const int64_t ms = std::max<int64_t>(0, absl::ToInt64Milliseconds(wake - now) + 1);
    if (wake > now) poll(fds.data(), fds.size(), static_cast<int>(std::min<int64_t>(ms, 1000)));
    for (size_t k = 0; k < links.size(); ++k) {
      if (fds[k].revents == 0) continue;
      const absl::Status st = links[k]->TakeReplies([&](const ShmFrame& frame) {
        for (int i = 0; i < static_cast<int>(calls_.size()); ++i) {
          if (!live_[i] || seq_[i] != frame.header.seq) continue;
          statuses_[i] =
              frame.header.code == 0
                  ? grpc::Status::OK
                  : grpc::Status(static_cast<grpc::StatusCode>(frame.header.code), frame.message);
          replies_[i] = BufferOf(frame.body);
          Complete(i);
        }
      });
      if (!st.ok()) {  // the server went, or dropped the segment
        EndRings(links[k], grpc::Status(grpc::StatusCode::UNAVAILABLE, std::string(st.message())));
        for (const ClientCall& call : calls_) {
          if (call.link == links[k]) env_.links->Lose(call.server, links[k]);
        }
        links.erase(links.begin() + static_cast<std::ptrdiff_t>(k));
        break;  // fds no longer matches links
      }
    }
    for (int i = 0; i < static_cast<int>(calls_.size()); ++i) {
      if (!live_[i] || deadline_[i] > absl::Now()) continue;
      if (statuses_[i].ok()) {
        statuses_[i] = grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "no answer in time");
      }
      Complete(i);
    }
    if (absl::Now() >= abandon_check) {
      abandon_check = absl::Now() + absl::FromChrono(kAbandonPoll);
      if (env_.abandon && env_.abandon()) {
        for (int i : held_) results_[i] = absl::AbortedError("given up before it was sent");
        held_.clear();
        EndRings(nullptr, grpc::Status(grpc::StatusCode::ABORTED, "given up"));
      }
    }
    LaunchHeld(next_channel);
  }
}

// Starts the held pushes that fit now, in order.
void CallFlight::LaunchHeld(int* next_channel) {
  for (auto it = held_.begin(); it != held_.end();) {
    if (Admit(*it)) {
      Launch(*it, next_channel);
      it = held_.erase(it);
    } else {
      ++it;
    }
  }
}

void CallFlight::Complete(int i) {
  ClientCall& call = calls_[i];
  --running_;
  live_[i] = 0;
  if (!call.is_pull) {
    push_bytes_[call.server] -= static_cast<int64_t>(call.request.Length());
    PushResponse response;
    if (statuses_[i].ok() && ParseSmall(replies_[i], &response)) {
      (*env_.push_window)[call.server] = response.window_bytes() > 0
                                      ? response.window_bytes()
                                      : std::numeric_limits<int64_t>::max();
    }
  }
  if (statuses_[i].error_code() == grpc::StatusCode::NOT_FOUND && call.link != nullptr) {
    // The server does not know the segment: ask again with the payloads.
    env_.links->Lose(call.server, call.link);
    results_[i] = absl::UnavailableError(statuses_[i].error_message());
    return;
  }
  results_[i] = statuses_[i].ok() ? call.finish(replies_[i], call.link, call.server)
                                    : FromGrpc(statuses_[i]);
}

void CallFlight::AwaitCalls(const std::vector<int>& todo, int* next_channel) {
  // Waits in slices, so that calls the caller gave up on (the job ended,
  // the cluster rolls back) are cancelled at once instead of running out
  // their deadline against a server that may never answer.
  bool cancelled = false;
  while (running_ > 0) {
    void* tag = nullptr;
    bool ok = false;
    const grpc::CompletionQueue::NextStatus next =
        cq_.AsyncNext(&tag, &ok, std::chrono::system_clock::now() + kAbandonPoll);
    if (next == grpc::CompletionQueue::SHUTDOWN) break;
    if (next == grpc::CompletionQueue::TIMEOUT) {
      if (!cancelled && env_.abandon && env_.abandon()) {
        cancelled = true;
        for (int i : held_) results_[i] = absl::AbortedError("given up before it was sent");
        held_.clear();
        for (int i : todo) {
          if (contexts_[i] != nullptr) contexts_[i]->TryCancel();
        }
      }
      continue;
    }
    Complete(static_cast<int>(reinterpret_cast<intptr_t>(tag)));
    LaunchHeld(next_channel);
  }
  cq_.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (cq_.Next(&tag, &ok)) {
  }
}

}  // namespace pstrain
