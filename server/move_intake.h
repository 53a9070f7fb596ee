// A server's side of a move of the placement (scheduler/placement_moves.h)
// that gives it chunks or table rows (common/placement.h HandoverTo): once
// it hears of the move (MoveNews, in the scheduler's heartbeat answers),
// a thread of its own asks each server holding them for their state at
// the switch clock (ParameterServer.HandOver, server/handover_requests.h)
// -- the holder answers once the workers have trained every clock before
// it -- and holds what came until the switch takes it (Take). A move that
// changes or goes (abandoned, a rollback) is dropped with what came of it.
// Status says which move it heard of, the bytes that came and whether it
// holds all of them (the scheduler switches once every server of the move
// heard of it and every one it gives anything holds it).
#ifndef PSTRAIN_SERVER_MOVE_INTAKE_H_
#define PSTRAIN_SERVER_MOVE_INTAKE_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/cluster.pb.h"
#include "proto/job.pb.h"
#include "proto/ps.grpc.pb.h"
#include "proto/status.pb.h"
#include "server/handover.h"

namespace pstrain {

// Thread-safe.
class MoveIntake {
 public:
  // For server `server_id` of `job` (complete, valid; it outlives this);
  // `on_held` (may be null) is called once a handover is all here.
  MoveIntake(int server_id, const JobSpec& job, std::function<void()> on_held = nullptr);
  ~MoveIntake();  // stops every thread (what they asked for is dropped)

  // Follows the move `news` names (none: news.to() of version 0), of the
  // job's generation `generation`: the one followed already goes on; any
  // other is heard of -- and taken from its start when it gives this
  // server anything -- the one before dropped.
  void Follow(const MoveNews& news, int64_t generation);
  // The followed move's handover in *out (ServerStatus.handover_*).
  void AddStatus(ServerStatus* out) const;
  // At a new generation of placement `version` from clock `clock`: the
  // handover of that move, when it is the one followed -- taken out (its
  // Status stays until another is followed), empty when it gives this
  // server nothing -- or nullopt when it is not (a rollback's placement).
  // FAILED_PRECONDITION when not all of it is here.
  absl::StatusOr<std::optional<HandedOver>> Take(int64_t version, int64_t clock);

 private:
  // One move being taken: what its thread fills in.
  struct Intake {
    MoveNews news;
    int64_t generation = 0;
    std::atomic<bool> stop{false};
    absl::Mutex mu;
    HandedOver handed ABSL_GUARDED_BY(mu);
    bool whole ABSL_GUARDED_BY(mu) = false;
    int64_t transfer_ms ABSL_GUARDED_BY(mu) = 0;  // once whole (ServerStatus.handover_ms)
    std::string error ABSL_GUARDED_BY(mu);        // ServerStatus.handover_error
  };
  // From the first answering call's start to the last answer.
  class Span {
   public:
    void Add(absl::Time start, absl::Time end) {
      absl::MutexLock lock(&mu_);
      first_ = std::min(first_, start);
      last_ = std::max(last_, end);
    }
    int64_t ms() const {
      absl::MutexLock lock(&mu_);
      return first_ > last_ ? 0 : absl::ToInt64Milliseconds(last_ - first_);
    }

   private:
    mutable absl::Mutex mu_;
    absl::Time first_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
    absl::Time last_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  };
  // The thread: asks every holder for what the move gives this server.
  void Run(std::shared_ptr<Intake> intake) const;
  // One holder's calls from `*next` on, each taken by the first of the
  // threads calling it to get there (a few in flight at once: a holder
  // encodes one answer while another travels and the one before is read
  // here); false once the intake stopped.
  bool TakeFrom(Intake& intake, int holder, ParameterServer::Stub& stub,
                const std::vector<HandOverRequest>& reqs, std::atomic<size_t>* next,
                Span* span) const;
  // One call's answer, asked again until it comes or the intake stops
  // (CANCELLED then) -- or, for a refusal asking again cannot get past
  // (the call's message too large, a malformed answer), that error,
  // recorded for Status; *started: when the call that answered began.
  absl::StatusOr<HandOverResponse> Ask(Intake& intake, int holder, ParameterServer::Stub& stub,
                                       const HandOverRequest& req, absl::Time* started) const;
  // The chunks a call asks for at most.
  int ChunksPerCall() const;

  const int server_id_;
  const JobSpec& job_;
  const std::function<void()> on_held_;
  mutable absl::Mutex mu_;
  MoveNews heard_ ABSL_GUARDED_BY(mu_);  // the move followed (version 0: none)
  int64_t heard_generation_ ABSL_GUARDED_BY(mu_) = 0;
  std::shared_ptr<Intake> current_ ABSL_GUARDED_BY(mu_);  // null: it gives this server nothing
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);  // one per move followed
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_MOVE_INTAKE_H_
