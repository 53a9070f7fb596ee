// A primary's side of standby copies (JobSpec.standby_copies): every change of
// a chunk served here goes, in order, to the chunk's standby server as
// ReplicateRequests sent by one thread, one queue per home server served
// here. On one host the gradients go through a segment the standby grants
// (common/shm_link.h), as a worker's pushes do, and the request carries
// the rest; elsewhere in the request. A standby that cannot follow a
// change (it is new, or was rolled back) is sent the chunk's whole state
// instead. The sparse tables' parts go the same way (a table part's
// changes go at once, unflushed). Each change the standby confirms goes
// back to the store (ChunkStore::Confirmed, SparseTables::Confirmed) and
// wakes the pushes waiting for it; a standby
// that does not answer is retried until the scheduler's routes name
// another (or none).
#ifndef PSTRAIN_SERVER_STANDBY_SENDER_H_
#define PSTRAIN_SERVER_STANDBY_SENDER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/shm.h"
#include "common/shm_link.h"
#include "proto/member.pb.h"
#include "proto/ps.grpc.pb.h"
#include "server/chunk_store.h"
#include "server/shard.h"
#include "server/sparse_tables.h"

namespace pstrain {

// What the scheduler's routes make of server `server_id`, by home server:
// whether it serves that home's chunks, and where their standby listens
// ("" for none: not served here, or the standby is dead).
struct ServerRoles {
  std::vector<bool> serving;
  std::vector<int> standby;  // the standby's id (-1: none)
  std::vector<std::string> standby_address;
  std::vector<bool> shipped() const;  // a standby to wait for
};
ServerRoles RolesOf(const ServerRoutes& routes, int server_id);

struct StandbySenderOptions {
  int server_id = 0;
  // Gradients through shared memory with a standby on this host, laid out
  // as `layout_of(standby id)` (ShmLayout::OfServer); null: never.
  std::function<ShmLayout(int server)> layout_of;
  std::function<void()> on_confirmed;     // after each confirmation
  SparseTables* tables = nullptr;         // whose parts are shipped too (may be null)
  std::atomic<int64_t>* bytes = nullptr;  // what was sent (may be null)
};

// Thread-safe.
class StandbySender : public StandbySink {
 public:
  // The sender for `store` (which outlives it).
  StandbySender(ChunkStore* store, StandbySenderOptions options);
  ~StandbySender() override;

  void Changed(int home, ChunkUpdate update) override;
  void Flush() override;
  void NeedWhole(int home, int32_t chunk) override;
  void ChangedTable(int home, TableUpdate update) override;
  void NeedWholeTable(int home, const std::string& table) override;
  // Where the standby of each home server's chunks served here is (from
  // RolesOf), and the generation the changes are of. A home whose standby
  // went loses its queue (the store counts its changes replicated).
  void SetTargets(const ServerRoles& roles, int64_t generation);
  // Ends the thread; changes not yet sent are dropped.
  void Stop();

 private:
  struct Target {
    std::string address;  // "": none now
    int server = -1;
  };
  struct Queue {
    std::deque<ChunkUpdate> updates;
    std::set<int32_t> need_full;  // chunks whose whole state goes next
    std::deque<TableUpdate> table_updates;
    std::set<std::string> tables_need_full;
    Target target;
    bool Busy() const {
      return !target.address.empty() && (!updates.empty() || !need_full.empty() ||
                                         !table_updates.empty() || !tables_need_full.empty());
    }
  };
  // One batch: the home it is for, its standby, the changes (each chunk
  // at most once).
  struct Batch {
    int home = -1;
    Target target;
    int64_t generation = 0;
    std::vector<ChunkUpdate> updates;
    std::vector<TableUpdate> tables;  // in order, whole states first
  };
  void Loop();
  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool AsksWhole() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes the next batch off a queue (false: stopping).
  bool Next(Batch* batch);
  // Next's part for the tables: the queue's changes, and the whole states
  // asked for (made without the lock).
  void NextTables(Queue& q, Batch* batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Send's part for the tables: what the standby confirmed, or asks whole.
  void TablesAnswered(const Batch& batch, const ReplicateResponse& resp);
  // Sends it; the store hears of what the standby confirmed, the queue of
  // what it needs whole. False when it failed (to be sent again).
  bool Send(Batch& batch);
  // The request for `batch`, its gradients moved into it or into `link`'s
  // slots (then kept in `*held`, to be moved back).
  ReplicateRequest Request(Batch& batch, ShmLink* link, std::vector<std::string>* held);
  ParameterServer::Stub& StubFor(const std::string& address);
  // The call as a frame on `link`'s socket (the doorbell, common/shm.h).
  grpc::Status Ring(ShmLink& link, const ReplicateRequest& req, ReplicateResponse* resp);
  // The segment shared with the standby at `target` (tried once; null: none).
  ShmLink* LinkFor(const Target& target);

  ChunkStore* const store_;
  const StandbySenderOptions options_;
  absl::Mutex mu_;
  std::map<int, Queue> queues_ ABSL_GUARDED_BY(mu_);  // by home server
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool flushed_ ABSL_GUARDED_BY(mu_) = false;  // the changes queued may go
  int next_home_ ABSL_GUARDED_BY(mu_) = 0;     // where the next search for work starts
  // The thread's: a stub and a segment (or none) per standby address.
  std::map<std::string, std::unique_ptr<ParameterServer::Stub>> stubs_;
  std::map<std::string, std::unique_ptr<ShmLink>> links_;
  uint64_t seq_ = 0;  // the last frame's
  std::thread thread_;
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_STANDBY_SENDER_H_
