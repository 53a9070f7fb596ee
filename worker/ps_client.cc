#include "worker/ps_client.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "common/logging.h"
#include "common/rpc.h"

namespace pstrain {
namespace {

// A pull may wait for slower workers (the read guarantee); one attempt waits
// this long before the client asks again.
constexpr absl::Duration kPullAttempt = absl::Seconds(30);
constexpr absl::Duration kPushAttempt = absl::Seconds(30);

}  // namespace

PsClient::PsClient(const ClusterView& cluster, const Partition* partition, int worker_id,
                   absl::Duration retry_window)
    : partition_(partition), worker_id_(worker_id), retry_window_(retry_window) {
  for (const Member& s : cluster.servers()) {
    stubs_.push_back(ParameterServer::NewStub(MakeChannel(s.address())));
  }
}

template <typename Request, typename Response>
absl::Status PsClient::CallAll(std::vector<Request>& requests, std::vector<Response>* responses,
                               bool is_pull) {
  const int n = static_cast<int>(requests.size());
  responses->assign(n, Response());
  std::vector<bool> done(n, false);
  const absl::Time give_up = absl::Now() + retry_window_;
  Backoff backoff;
  while (true) {
    std::vector<int> todo;
    for (int s = 0; s < n; ++s) {
      if (!done[s] && !requests[s].chunks().empty()) todo.push_back(s);
    }
    if (todo.empty()) return absl::OkStatus();
    std::vector<grpc::Status> results(n);
    std::vector<std::unique_ptr<grpc::ClientContext>> contexts(n);
    absl::BlockingCounter pending(static_cast<int>(todo.size()));
    for (int s : todo) {
      contexts[s] = ContextWithTimeout(is_pull ? kPullAttempt : kPushAttempt);
      (*responses)[s].Clear();
      auto on_done = [&results, &pending, s](grpc::Status st) {
        results[s] = std::move(st);
        pending.DecrementCount();
      };
      if constexpr (std::is_same_v<Request, PullRequest>) {
        stubs_[s]->async()->Pull(contexts[s].get(), &requests[s], &(*responses)[s], on_done);
      } else {
        stubs_[s]->async()->Push(contexts[s].get(), &requests[s], &(*responses)[s], on_done);
      }
    }
    pending.Wait();
    absl::Status first_error;
    for (int s : todo) {
      const absl::Status st = FromGrpc(results[s]);
      if (st.ok()) {
        done[s] = true;
        continue;
      }
      // A pull that waited out its attempt is still waiting for slower
      // workers: ask again, without counting it against the retry window.
      if (is_pull && absl::IsDeadlineExceeded(st)) {
        spdlog::info("pull from server {} still waiting for its read guarantee", s);
        continue;
      }
      if (!IsRetryable(st) || absl::Now() > give_up) {
        return absl::Status(st.code(), absl::StrCat(is_pull ? "pull from" : "push to",
                                                    " server ", s, ": ", st.message()));
      }
      if (first_error.ok()) first_error = st;
    }
    if (!first_error.ok()) {
      spdlog::warn("retrying {}: {}", is_pull ? "pull" : "push", first_error.message());
      absl::SleepFor(backoff.Next());
    }
  }
}

absl::Status PsClient::Pull(int64_t clock, int64_t min_clock,
                            std::vector<std::vector<float>>* weights,
                            std::vector<int64_t>* applied) {
  std::vector<PullRequest> requests(stubs_.size());
  for (int s = 0; s < static_cast<int>(stubs_.size()); ++s) {
    requests[s].set_worker_id(worker_id_);
    requests[s].set_clock(clock);
    requests[s].set_min_clock(min_clock);
    for (int32_t id : partition_->ServerChunks(s)) requests[s].add_chunks(id);
  }
  std::vector<PullResponse> responses;
  const absl::Status st = CallAll(requests, &responses, /*is_pull=*/true);
  if (!st.ok()) return st;
  if (applied != nullptr) applied->clear();
  int64_t bytes = 0;
  for (int s = 0; s < static_cast<int>(responses.size()); ++s) {
    const PullResponse& resp = responses[s];
    if (resp.chunks_size() != requests[s].chunks_size()) {
      return absl::DataLossError(absl::StrCat("pull from server ", s, ": wrong chunk count"));
    }
    for (const ChunkData& c : resp.chunks()) {
      if (c.chunk() < 0 || c.chunk() >= static_cast<int>(partition_->chunks().size())) {
        return absl::DataLossError(absl::StrCat("pull from server ", s, ": unknown chunk"));
      }
      const ChunkInfo& info = partition_->chunks()[c.chunk()];
      if (info.server != s || c.data().size() != info.numel * sizeof(float)) {
        return absl::DataLossError(
            absl::StrCat("pull from server ", s, ": chunk ", c.chunk(), " does not match"));
      }
      std::memcpy((*weights)[info.param].data() + info.offset, c.data().data(), c.data().size());
      bytes += static_cast<int64_t>(c.data().size());
    }
    if (applied != nullptr) {
      for (int w = 0; w < resp.applied_clock_size(); ++w) {
        if (static_cast<int>(applied->size()) <= w) applied->push_back(resp.applied_clock(w));
        (*applied)[w] = std::min((*applied)[w], resp.applied_clock(w));
      }
    }
  }
  bytes_in_ += bytes;
  return absl::OkStatus();
}

absl::Status PsClient::Push(int64_t clock, int num_samples,
                            const std::vector<std::vector<float>>& grads) {
  std::vector<PushRequest> requests(stubs_.size());
  int64_t bytes = 0;
  for (int s = 0; s < static_cast<int>(stubs_.size()); ++s) {
    PushRequest& req = requests[s];
    req.set_worker_id(worker_id_);
    req.set_clock(clock);
    req.set_num_samples(num_samples);
    for (int32_t id : partition_->ServerChunks(s)) {
      const ChunkInfo& info = partition_->chunks()[id];
      ChunkData* c = req.add_chunks();
      c->set_chunk(id);
      c->set_data(reinterpret_cast<const char*>(grads[info.param].data() + info.offset),
                  info.numel * sizeof(float));
      bytes += info.numel * static_cast<int64_t>(sizeof(float));
    }
  }
  std::vector<PushResponse> responses;
  const absl::Status st = CallAll(requests, &responses, /*is_pull=*/false);
  if (st.ok()) bytes_out_ += bytes;
  return st;
}

}  // namespace pstrain
