/* The C ABI of a worker whose model lives outside pstrain (a PyTorch
 * script, python/pstrain/torch/): the worker's machinery -- the scheduler
 * client, heartbeats, the Status service, the clock loop with its
 * asynchronous parameter client, retries, generations, rollback resync, the
 * SSP read cache and prefetch -- runs in this library on threads of its own;
 * the caller only computes each clock's gradients.
 *
 * Plain C types only (raw pointers and sizes), so that any language's FFI
 * loads it (Python's ctypes, any CPython >= 3.9). Every call that can fail
 * returns 0 or an absl::StatusCode number (3 INVALID_ARGUMENT, 9
 * FAILED_PRECONDITION, 14 UNAVAILABLE, 16 UNAUTHENTICATED, ...) and writes a
 * message naming the cause to `err` (NUL-terminated, at most err_len bytes);
 * pst_error_daemon() then says which daemon the failed call went to. None
 * of them aborts the process.
 *
 * Life of a worker:
 *
 *   pst_set_flag(...)*        the flags ps_worker takes: scheduler, listen,
 *                             port_file, auth_token_file, tls_*, connect_timeout_s,
 *                             heartbeat_interval_ms, scheduler_timeout_ms,
 *                             id, metrics_port, overlap, wire_dtype,
 *                             channels_per_server, shm, shm_doorbell,
 *                             frontend
 *   pst_open                  starts the worker's gRPC service (Status)
 *   pst_join                  joins the job: its id and the job (optional;
 *                             pst_register joins otherwise)
 *   pst_register              declares the model
 *   pst_job, pst_job_json     what the job says (batch, clocks, id, ...)
 *   pst_start                 starts the clock loop (worker 0's initial
 *                             values are the servers')
 *   loop: pst_next            the next clock: this worker's example
 *                             indices; pst_weights() holds its weights
 *         (pst_set_hyper: the optimizer's hyperparameters from this clock)
 *         (compute; gradients into pst_grads(); pst_grads_ready per
 *          parameter as the backward makes them, pst_grads_absent for
 *          one that has none)
 *         pst_clock_done
 *   until pst_next says the job's clocks are done (the final weights in
 *   pst_weights)
 *   pst_finish                reports FINISHED or FAILED to the scheduler
 *   pst_close
 *
 * pst_next, pst_grads_ready and pst_clock_done come from one thread at a
 * time (the training loop's); pst_status from any.
 */
#ifndef PSTRAIN_WORKER_EXTERNAL_PSTRAIN_C_H_
#define PSTRAIN_WORKER_EXTERNAL_PSTRAIN_C_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pst_worker pst_worker;

/* The ABI's version: a loader checks it. 2: pst_step_done became
 * pst_clock_done, and pst_batch_indices takes no clocks_per_epoch (the
 * library's, from train_size and batch_size). 3: pst_job_info.overlap, pst_register's device.
 * 4: pst_join, pst_job_json, pst_set_hyper, pst_clock_share, pst_register's buffers,
 * pst_read_state, pst_seed_state. 5: pst_grads_absent. 6: pst_read_by_layer,
 * pst_weights_await; pst_grads no longer zeroed. 7: pst_weights alternates
 * between two buffers a parameter, and a clock's stay unchanged until the
 * next clock's pst_clock_done (the caller's tensors may be views of them);
 * pst_grads_at. 8: pst_seed_state is pst_write_state (writing optimizer
 * state is not a seed). 9: pst_error_daemon; pst_state_slots is
 * pst_state_arrays (a "slot" is a shared-memory one only). */
#define PST_ABI_VERSION 9
int pst_abi_version(void);

/* The daemon the calling thread's last failed call went to (or could not
 * reach): PST_SCHEDULER, PST_SERVER, or PST_NO_DAEMON when the failure was
 * the worker's own (a bad argument, a flag) or no call failed yet. A call
 * that reaches both (pst_next: the gate and the pulls; pst_clock_done: the
 * pushes and the gate) says which one failed. */
#define PST_NO_DAEMON 0
#define PST_SCHEDULER 1
#define PST_SERVER 2
int pst_error_daemon(void);

/* Sets one flag, as "--name=value" would on ps_worker's command line.
 * INVALID_ARGUMENT for an unknown flag or a bad value. */
int pst_set_flag(const char* name, const char* value, char* err, int err_len);

/* Starts a worker from the flags set so far: its gRPC service listens
 * (--listen), nothing is sent to the scheduler yet. */
int pst_open(pst_worker** out, char* err, int err_len);

/* Joins the job before the model is declared (retrying an unreachable
 * scheduler for --connect_timeout_s: UNAVAILABLE after it): from now on
 * pst_job and pst_job_json say the worker's id and the job (its model and
 * training set not yet declared: batch_size, the optimizer, num_workers),
 * and the worker heartbeats. The job starts once every worker declared its
 * model (pst_register). FAILED_PRECONDITION for a job of a built-in model
 * or a second join. */
int pst_join(pst_worker* w, char* err, int err_len);

/* Parameter dtypes of pst_register (only FP32 is trained; others are
 * refused with INVALID_ARGUMENT naming the parameter). */
#define PST_FP32 1

/* What a declared parameter is (pst_register; proto BufferRule): trained,
 * or a buffer whose values the servers keep as worker 0's (the lowest live
 * worker's) or as the workers' mean. */
#define PST_TRAINED 0
#define PST_BROADCAST 1
#define PST_AVERAGE 2

/* Where the parameters live (pst_register): under --overlap=auto a model
 * on CUDA overlaps its gradients' way to the servers with backward, as
 * ps_worker does on a GPU; one on the CPU only under SSP/ASP. */
#define PST_CPU 0
#define PST_CUDA 1

/* Declares the model's parameters in order -- names[i], dims ndims[i]
 * taken in turn from `dims`, dtypes[i], buffers[i] (PST_TRAINED, or a
 * module's buffer: PST_BROADCAST, PST_AVERAGE; its values go in pst_grads
 * each clock and come back in pst_weights by the rule) -- and the training
 * set's
 * size, and registers with the scheduler (retrying an unreachable one for
 * --connect_timeout_s: UNAVAILABLE after it). The first worker's list is
 * the job's model; a worker whose list differs is refused
 * (FAILED_PRECONDITION naming the first parameter that differs). `device`:
 * PST_CPU or PST_CUDA, where the parameters live. */
int pst_register(pst_worker* w, int n, const char* const* names, const int* ndims,
                 const int64_t* dims, const int* dtypes, const int* buffers, int64_t train_size,
                 int device, char* err, int err_len);

/* The job, after pst_join or pst_register (before pst_register:
 * total_clocks and clocks_per_epoch may be 0, start_clock and overlap
 * are not yet decided). */
typedef struct pst_job_info {
  int32_t worker_id;
  int32_t num_workers;
  int32_t num_servers;
  int64_t batch_size;      /* the global batch of a clock */
  int64_t total_clocks;    /* clocks of the whole job */
  int64_t start_clock;     /* where this worker starts (past 0: a resumed job) */
  int64_t clocks_per_epoch;
  uint64_t seed;
  int32_t consistency;     /* proto Consistency: 1 BSP, 2 SSP, 3 ASP */
  int32_t staleness;
  int32_t overlap;         /* 1: a gradient leaves as soon as pst_grads_ready
                              marks it, while backward goes on (the worker's
                              --overlap, as the library decided it) */
} pst_job_info;
int pst_job(pst_worker* w, pst_job_info* out);

/* The whole job spec (proto JobSpec, its defaults applied) as JSON with
 * the proto's field names, after pst_join or pst_register: its size
 * without the NUL, written to buf with a NUL if it fits in buf_len; -1
 * before joining. */
int pst_job_json(pst_worker* w, char* buf, int buf_len);

/* Starts the clock loop. `initial[i]` holds parameter i's initial values
 * (numel floats; copied before the call returns): worker 0's are the
 * servers' initial values; the others' are not used (they read worker 0's). */
int pst_start(pst_worker* w, const float* const* initial, char* err, int err_len);

/* Waits up to timeout_ms for the loop to offer the next clock.
 *   0 and *clock >= 0: clock *clock: *rows example indices of this
 *     worker's share of the global batch in indices[0..*rows) (at most
 *     max_rows are written; the share never exceeds the job's batch_size);
 *     pst_weights(w, i) holds the clock's weights (after pst_weights_await
 *     with pst_read_by_layer), pst_grads(w, i) the buffers its gradients go
 *     to: not zeroed (ABI 6), the caller writes each whole.
 *   0 and *clock == -1: the job's clocks are done; pst_weights holds the
 *     final weights (the servers' fp32 master weights).
 *   4 (DEADLINE_EXCEEDED): no clock yet; call again.
 *   another code: the loop failed (the job was aborted, a server could
 *     not be reached, ...): err says why. */
int pst_next(pst_worker* w, int timeout_ms, int64_t* clock, int* rows, int64_t* indices,
             int max_rows, char* err, int err_len);

/* During a clock: its indices are share *share_index of *num_shares of the
 * clock's global batch (the live workers', in the job's data order: what
 * pst_batch_indices gives for them). FAILED_PRECONDITION outside a clock. */
int pst_clock_share(pst_worker* w, int* share_index, int* num_shares);

/* Before pst_start: on != 0 says the caller reads each parameter's
 * weights only after pst_weights_await(w, i) returned, so that pst_next
 * may offer a clock while its weights still arrive (where the worker pulls
 * layer by layer: BSP with overlap) and a forward starts on the first
 * layers' weights. The run's clock 0 is offered with every weight in.
 * Either way a gradient leaves only once its own weights are in.
 * FAILED_PRECONDITION after pst_start. */
int pst_read_by_layer(pst_worker* w, int on, char* err, int err_len);

/* During a clock: waits until parameter i's weights are in pst_weights(w, i)
 * (at once when they are, or without pst_read_by_layer). Another code: the
 * pull failed, err says why; the clock is then lost (its gradients do not
 * leave: end it with pst_clock_done, and the worker offers it again). */
int pst_weights_await(pst_worker* w, int param, char* err, int err_len);

/* Parameter i's host buffers: weights and gradient (numel floats each).
 * Valid from pst_next until pst_clock_done (or, once done, until
 * pst_close); the addresses may change from one clock to the next.
 * pst_weights alternates between two buffers (ABI 7): a clock's pull
 * writes the one the clock before did not read, so the weights a clock
 * read stay as they are, and valid, until the next clock's pst_clock_done
 * (the next pull writes them then) -- a caller may keep views of them
 * through the clock and after it, e.g. an evaluation between clocks; the
 * final weights until pst_close. (A clock whose pull failed is offered
 * again: its new pull writes the other buffer, the one read before.) */
float* pst_weights(pst_worker* w, int param);
float* pst_grads(pst_worker* w, int param);

/* During a clock: parameter i's gradient is complete in pst_grads(w, i)
 * and may leave for the servers now (each parameter at most once a clock;
 * the rest leave at pst_clock_done). */
int pst_grads_ready(pst_worker* w, int param, char* err, int err_len);

/* During a clock, instead of writing pst_grads(w, i) and pst_grads_ready:
 * parameter i's gradient is complete at `values` (numel floats of the
 * caller's, e.g. a CPU tensor's), which the push reads from without a
 * copy: they must stay unchanged and allocated until pst_next offers the
 * clock after the next one (or pst_close). Errors as pst_grads_ready's;
 * INVALID_ARGUMENT for a null `values`. (ABI 7.) */
int pst_grads_at(pst_worker* w, int param, const float* values, char* err, int err_len);

/* During a clock: parameter i has no gradient this clock (the script froze
 * it, requires_grad False, or its .grad is None): it leaves now without
 * one and takes no update from this worker's push (under BSP a round in
 * which no worker has a gradient takes no optimizer step, as torch.optim
 * skips such a parameter). Instead of pst_grads_ready, at most once a
 * clock. */
int pst_grads_absent(pst_worker* w, int param, char* err, int err_len);

/* During a clock, before its gradients leave: the optimizer's
 * hyperparameters from this clock on, as a JSON object of JobSpec
 * optimizer fields (learning_rate, beta1, beta2, momentum, epsilon,
 * weight_decay, rho, ...; "{}" for the job's own): each replaces the job's
 * -- learning_rate its schedule's -- in the servers' updates of this
 * clock's pushes (PushRequest.hyper). A clock redone after a rollback
 * keeps the values it had. INVALID_ARGUMENT naming the field when the
 * job's optimizer cannot take it; FAILED_PRECONDITION outside a clock. */
int pst_set_hyper(pst_worker* w, const char* json, char* err, int err_len);

/* Ends the clock: every gradient is in pst_grads. loss: the clock's mean
 * loss; correct/predicted: predictions that were right / made (0/0: none
 * counted). They go to Status. */
int pst_clock_done(pst_worker* w, double loss, int64_t correct, int64_t predicted, char* err,
                   int err_len);

/* Reads the optimizer's state of every parameter from the servers as they
 * hold it now (blocking; under BSP, during a clock before its gradients
 * leave or once the clocks are done, the state of the weights in
 * pst_weights). UNIMPLEMENTED for an optimizer that keeps no elementwise
 * state (Adafactor); FAILED_PRECONDITION before pst_start. Then, per
 * parameter i: pst_state_arrays(w, i) state arrays (Adam: 2, m and v; -1
 * for a bad index) of numel floats each at pst_state(w, i, array), and
 * pst_state_steps(w, i) updates so far. */
int pst_read_state(pst_worker* w, char* err, int err_len);
int pst_state_arrays(pst_worker* w, int param);
const float* pst_state(pst_worker* w, int param, int array);
int64_t pst_state_steps(pst_worker* w, int param);

/* After pst_register, before pst_start: parameter i's optimizer state the
 * servers start from -- `arrays` arrays of its numel floats (the layout
 * pst_state gives) and `steps` updates so far -- given to them before this
 * worker's initial values (a chunk takes the first state it gets before
 * its values). INVALID_ARGUMENT for a bad index or negative steps;
 * FAILED_PRECONDITION after pst_start. */
int pst_write_state(pst_worker* w, int param, int64_t steps, int arrays, const float* const* state,
                    char* err, int err_len);

/* Sparse tables (JobSpec.tables), from the training loop's thread.
 *
 * The rows of the n ids `ids` (may repeat) of table `table` into out
 * (n x width floats, in order), made on their servers if new: during a
 * clock, for it; outside one, for the clock after the last (an evaluation
 * once pst_next said the clocks are done). Waits for the read
 * guarantee of the tables' consistency (BSP: every worker's pushes of the
 * clocks before). NOT_FOUND for a table the job does not declare;
 * INVALID_ARGUMENT for a width other than the table's; a server's refusal
 * (OUT_OF_RANGE for an id at or beyond the table's num_ids, ...). */
int pst_pull_rows(pst_worker* w, const char* table, int64_t n, const uint64_t* ids, int width,
                  float* out, char* err, int err_len);

/* During a clock: its gradients of the rows of the n ids `ids` of `table`
 * (n x width floats in grads; a repeated id's rows are summed), of the
 * clock's samples, once per table and clock. pst_clock_done pushes the
 * tables a clock did not push to (with no rows: a BSP round waits for
 * every worker's push). FAILED_PRECONDITION outside a clock or for a
 * second push of the table in the clock, FAILED_PRECONDITION from a server
 * for a row no pull made; the others as pst_pull_rows'. */
int pst_push_rows(pst_worker* w, const char* table, int64_t n, const uint64_t* ids, int width,
                  const float* grads, char* err, int err_len);

/* The values a table's rows start with, as the servers make them: rows of
 * `width` floats uniform in [-init_scale, init_scale] from the job's seed,
 * the table's name and each id (n ids into out, n x width floats). Needs
 * no worker: a script training alone starts from the cluster's rows. -1
 * for bad arguments, else 0. */
int pst_initial_rows(uint64_t seed, const char* table, int width, float init_scale, int64_t n,
                     const uint64_t* ids, float* out);

/* Reports the worker's end to the scheduler: FINISHED (ok != 0, with the
 * test accuracy if >= 0) or FAILED with `message`, and stops the loop if it
 * still runs. */
int pst_finish(pst_worker* w, int ok, double accuracy, const char* message);

/* This worker's Status (a serialized pstrain.MemberStatus) into buf;
 * returns its size, or -1 if buf_len is too small. */
int pst_status(pst_worker* w, char* buf, int buf_len);

/* Example indices of share `share_index` of `num_shares` of clock `clock`'s global
 * batch in the data order of a job of `seed`, `batch_size` and a training
 * set of `train_size` examples -- the order every worker of that job
 * follows, its clocks per epoch the library's (as pst_job_info's); share 0
 * of 1 is the whole global batch: at most max_rows written to out; returns
 * the share's size, or -1 for bad arguments (a batch_size beyond
 * train_size). Needs no worker: a script training alone uses it to see the
 * cluster's batches. */
int pst_batch_indices(uint64_t seed, int64_t train_size, int64_t batch_size, int64_t clock,
                      int num_shares, int share_index, int64_t* out, int max_rows);

/* Stops everything and frees the worker (pst_finish first, or the
 * scheduler sees the worker die). */
void pst_close(pst_worker* w);

#ifdef __cplusplus
}
#endif

#endif /* PSTRAIN_WORKER_EXTERNAL_PSTRAIN_C_H_ */
