// A worker whose model lives outside pstrain -- a PyTorch script, through
// the C ABI of pstrain_c.h -- running the same machinery as ps_worker: the
// member daemon (Status service, heartbeats, the final report), the clock
// loop (worker/clock_loop.h) with the scheduler's gate and the asynchronous
// parameter client, on a thread of its own. The model's part is a stand-in
// whose computation of each clock is handed to the caller through a
// ClockExchange: the caller gets each clock's example indices with its
// weights in place, writes the gradients into the model's buffers and says
// when each is complete.
//
// The caller declares the model at registration (common/external_model.h):
// the first worker's parameter list is the job's. Worker 0's initial
// values are the servers' initial values (PushRequest.initial_values); every
// worker keeps the weights of clock 0, so any of them can push them again
// after a rollback to it.
#ifndef PSTRAIN_WORKER_EXTERNAL_EXTERNAL_WORKER_H_
#define PSTRAIN_WORKER_EXTERNAL_EXTERNAL_WORKER_H_

#include <atomic>
#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/member_daemon.h"
#include "common/partition.h"
#include "kernels/backend.h"
#include "proto/cluster.pb.h"
#include "worker/clock_loop.h"
#include "worker/data/dataset.h"
#include "worker/external/clock_exchange.h"
#include "worker/external/handed_model.h"
#include "worker/external/hyper_plan.h"
#include "worker/external/optimizer_state.h"
#include "worker/member_loop.h"
#include "worker/placed_partitions.h"
#include "worker/ps_client.h"
#include "worker/row_client.h"
#include "worker/worker_flags.h"
#include "worker/worker_service.h"

namespace pstrain {

struct ExternalWorkerOptions {
  MemberConfig member;
  WorkerFlags flags;  // ps_worker's --overlap, --wire_dtype, --channels_per_server, ...
  std::string frontend = "pytorch";  // what drives the worker, for Status
};

// Open, Register, Start, then Next / GradsReady / ClockDone from one thread
// until Next says the job is done, then Finish. Status from any thread.
class ExternalWorker {
 public:
  // Starts the worker's gRPC service; INVALID_ARGUMENT for bad options.
  static absl::StatusOr<std::unique_ptr<ExternalWorker>> Open(ExternalWorkerOptions options);
  // Stops the loop, reports FAILED unless Finish was called, ends the daemon.
  ~ExternalWorker();

  // Joins the job before the model is known (RegisterRequest.declare_later):
  // the id and the job (its model not yet declared) from now on, and
  // heartbeats. The scheduler's refusal as its status (FAILED_PRECONDITION
  // for a job of a built-in model).
  absl::Status Join();
  // Declares the model (`params`, in order; `train_size` examples),
  // registering first if Join did not: the scheduler's refusal as its
  // status (FAILED_PRECONDITION for a model that differs from the job's,
  // naming the parameter).
  absl::Status Register(const std::vector<ParamSpec>& params, int64_t train_size, bool cuda);
  const JobSpec& job() const { return job_; }
  int id() const { return id_; }
  // Whether Register declared the model.
  bool declared() const { return declared_; }
  // Whether gradients leave as GradsReady marks them (after Register).
  bool overlap() const { return overlap_; }
  int64_t start_clock() const { return start_clock_; }

  // Starts the clock loop; `initial` holds each parameter's initial values
  // (worker 0's are the servers' initial values).
  absl::Status Start(const std::vector<const float*>& initial);
  // The next clock (ClockExchange::Await): nullopt once the job's clocks
  // are done and the final weights are in weights().
  absl::StatusOr<std::optional<ClockExchange::OfferedClock>> Next(absl::Duration timeout);
  // The clock Next offered last, until ClockDone (nullopt outside a clock).
  const std::optional<ClockExchange::OfferedClock>& under_way() const { return under_way_; }
  // Before Start: whether the caller reads each parameter's weights only
  // once AwaitWeights said they are in, so that a clock may be offered
  // while its weights still arrive (HandedModel's `by_layer`).
  // FAILED_PRECONDITION after Start.
  absl::Status ReadByLayer(bool on);
  // During a clock: waits until parameter `param`'s weights are in
  // weights(param) (HandedModel::AwaitWeightsOf: the pull's error, for a
  // clock that is then lost). FAILED_PRECONDITION outside a clock,
  // INVALID_ARGUMENT for a bad index.
  absl::Status AwaitWeights(int param);
  // Parameter i's host buffers (null before Start or for a bad index).
  float* weights(int i);
  float* grads(int i);
  absl::Status GradsReady(int param);
  // Parameter `param`'s gradient is complete in the caller's memory at
  // `values` (ClockExchange::GradsAt; pst_grads_at says how long it must
  // stay).
  absl::Status GradsAt(int param, const float* values);
  // Parameter `param` has no gradient this clock (ClockExchange::GradsAbsent).
  absl::Status GradsAbsent(int param);
  // During a clock: the optimizer's hyperparameters from this clock on
  // (PushRequest.hyper, as JSON of OptimizerSpec's fields; "{}" or "" for
  // the job's). INVALID_ARGUMENT naming the field for one the job's
  // optimizer cannot take (common/job_optimizer.h WithHyper);
  // FAILED_PRECONDITION outside a clock.
  absl::Status SetHyper(const std::string& json);
  // Ends the clock; first pushes every sparse table this clock did not
  // push to (an empty push: a BSP round waits for every worker's).
  absl::Status ClockDone(const StepResult& result);

  // Reads the optimizer's state of every parameter from the servers as
  // they hold it now (worker/external/optimizer_state.h) into state();
  // within a clock once its weights are all in (the state of the weights
  // it reads). FAILED_PRECONDITION before Start.
  absl::Status ReadState();
  // What the last ReadState read, by parameter.
  const std::vector<ParamState>& state() const { return state_; }
  // Before Start: parameter `param`'s optimizer state the servers start
  // from (a torch state the script loaded), given to them before the
  // initial values this worker pushes. INVALID_ARGUMENT for a bad index,
  // negative steps, or arrays of another size than the parameter's;
  // FAILED_PRECONDITION after Start.
  absl::Status SetStartState(int param, int64_t steps, std::vector<std::vector<float>> arrays);

  // Sparse tables (JobSpec.tables), from the caller's thread. The rows of
  // `ids` of `table` (ids.size() x width floats into *rows) for the clock
  // under way, or after the last clock for the one after it (e.g. an
  // evaluation once the clocks are done), waiting for the read guarantee
  // of the tables' consistency. INVALID_ARGUMENT for a `width` other than
  // the table's, NOT_FOUND for a table the job does not declare.
  //
  // A server that cannot be reached is retried (worker/row_client.h) until
  // the scheduler rolls the cluster back (it was declared dead) or the job
  // ends (ABORTED). A clock of a generation the cluster rolled back past is
  // void -- the loop throws its dense gradients away and offers the clock
  // again -- so its row calls change nothing and fail nothing: a pull gives
  // zeros, a push is dropped. UNAVAILABLE names the server that could not
  // be reached.
  absl::Status PullRows(const std::string& table, int width, absl::Span<const uint64_t> ids,
                        std::vector<float>* rows);
  // During a clock: the clock's gradients of the rows of `ids` of `table`
  // (ids.size() x width floats; a repeated id's summed), once per table
  // and clock, from the clock's samples. FAILED_PRECONDITION outside a
  // clock or for a second push of the table in the clock.
  absl::Status PushRows(const std::string& table, int width, absl::Span<const uint64_t> ids,
                        absl::Span<const float> grads);

  // Reports the end: FINISHED when `ok` and every clock was done (with the
  // test accuracy when >= 0), else FAILED with `message`. Once.
  void Finish(bool ok, double accuracy, const std::string& message);
  MemberStatus Status();

 private:
  explicit ExternalWorker(ExternalWorkerOptions options);
  void RunLoop();
  // Stops the loop once the scheduler says the job was aborted (its calls
  // to a dead server would otherwise retry out their window): the loop's
  // end is then that abort. Polls until the loop ends.
  void Watch();
  ClockLoopOptions LoopOptions() const;
  // The client of the tables' rows, after checking `table` and `width`
  // against the job.
  absl::StatusOr<RowClient*> Rows(const std::string& table, int width);
  // What a row call of the caller's is of: the clock under way and its
  // generation (after the last clock: the next clock, the cluster's
  // generation now),
  // given up on once the cluster moved past that generation or the job
  // was aborted.
  RowCall RowCallNow();
  // Whether the cluster rolled back past `generation`: as the heartbeats
  // say, else as a heartbeat sent now does (a server refused a row request
  // as of an older generation before the heartbeats told this worker).
  bool RolledBackSince(int64_t generation);
  // A row call of the clock under way failed with `failure`: OK (and the
  // clock void from now on) when the cluster rolled back past the clock,
  // else `failure`.
  absl::Status VoidClockOr(const absl::Status& failure);

  const ExternalWorkerOptions options_;
  const absl::Time start_;
  std::unique_ptr<WorkerService> service_;
  std::unique_ptr<MemberDaemon> daemon_;
  std::unique_ptr<kernels::Backend> backend_;
  JobSpec job_;
  int id_ = -1;
  bool declared_ = false;
  int64_t generation_ = 0, start_clock_ = 0;
  PsClientOptions ps_;
  HyperPlan hyper_;  // what ps_.hyper reads
  bool overlap_ = false;
  bool read_by_layer_ = false;                    // ReadByLayer's
  std::unique_ptr<PlacedPartitions> partitions_;  // the generations' (their clients)
  std::unique_ptr<ClockExchange> exchange_;
  std::unique_ptr<ExternalData> data_;
  std::unique_ptr<HandedModel> model_;
  ParamBuffers initial_;  // the loop thread's once it runs
  // The caller's thread's: the clock under way (from Next to ClockDone),
  // its generation and whether it is void (the cluster rolled back past
  // it), the clock a pull is for, the tables pushed this clock, the
  // servers' client.
  std::optional<ClockExchange::OfferedClock> under_way_;
  int64_t under_way_generation_ = 0;
  bool under_way_void_ = false;
  int64_t next_clock_ = 0;
  std::set<std::string> tables_pushed_;
  std::vector<ParamState> state_;        // ReadState's
  std::vector<ParamState> start_state_;  // SetStartState's: what the servers start from
  std::unique_ptr<RowClient> rows_;
  // With standby copies under BSP a table's push is answered only once
  // its round is applied and its standby holds it: a clock's table pushes
  // then go at once, each table's on a client of its own, and ClockDone
  // waits for them (a push that waited in turn would hold back this
  // worker's push of another table, which another worker's round of the
  // first may wait for).
  std::map<std::string, std::unique_ptr<RowClient>> push_clients_;
  std::vector<std::future<absl::Status>> row_pushes_;
  bool PushesRowsAsync() const;
  // The clock's table pushes under way, waited for: the first failure
  // (VoidClockOr's), after every one ended.
  absl::Status AwaitRowPushes();
  std::unique_ptr<RowClient> NewRowClient();
  // The servers' addresses, as the loop's latest list of members has them.
  std::vector<std::string> servers() const;
  // For each home server, the address serving its chunks and rows now:
  // servers(), with standby copies where the scheduler's routes say
  // (HomeAddresses). The one routing path of the rows and the state calls.
  std::vector<std::string> HomeAddressesNow() const;
  // The state calls' routing, of the cluster's generation now.
  StateCalls StateCallsNow() const;
  // Given up on (ABORTED) once the job was aborted or the cluster rolled
  // back past `generation`: what every call of this worker's to the
  // servers asks before each retry.
  std::function<absl::Status()> AbandonAfter(int64_t generation) const;
  // The chunks as the cluster of the generation now places them (the
  // optimizer state's calls go by it; one of partitions_).
  const Partition& PlacedNow() const;
  // The rows' placement of that cluster (version 0: the initial spread).
  Placement PlacementNow() const;
  mutable absl::Mutex servers_mu_;
  std::vector<std::string> servers_ ABSL_GUARDED_BY(servers_mu_);
  const Partition* placed_ ABSL_GUARDED_BY(servers_mu_) = nullptr;
  Placement placement_ ABSL_GUARDED_BY(servers_mu_);
  std::atomic<bool> stop_{false};
  std::atomic<bool> loop_over_{false};
  std::thread loop_thread_, watch_thread_;
  bool finished_ = false;

  absl::Mutex mu_;
  const ClockLoop* loop_ ABSL_GUARDED_BY(mu_) = nullptr;  // while it runs
  ClockMetrics last_ ABSL_GUARDED_BY(mu_);                // once it ended
  bool loop_done_ ABSL_GUARDED_BY(mu_) = false;           // every clock and the final read
  // Status' fields that do not come from the loop (role, id, address,
  // frontend, wire dtype, start clock).
  MemberStatus identity_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pstrain

#endif  // PSTRAIN_WORKER_EXTERNAL_EXTERNAL_WORKER_H_
