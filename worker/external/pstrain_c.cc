// The C ABI of pstrain_c.h over ExternalWorker: flags in, statuses out as
// codes and messages; no exception and no abort crosses it.
#include "worker/external/pstrain_c.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/daemon_status.h"
#include "common/flags.h"
#include "common/job_spec.h"
#include "common/rows.h"
#include "common/status_macros.h"
#include "google/protobuf/util/json_util.h"
#include "worker/data/dataset.h"
#include "worker/external/external_worker.h"
#include "worker/worker_flags.h"

// The flags ps_worker takes too (--overlap, --wire_dtype, --channels_per_server,
// --shm, --shm_doorbell) are worker/worker_flags'; the member flags
// common/member_daemon's.
ABSL_FLAG(std::string, frontend, "pytorch", "what drives this worker, as Status shows it");

struct pst_worker {
  std::unique_ptr<pstrain::ExternalWorker> worker;
};

namespace {

// The daemon of the calling thread's last failure (pst_error_daemon).
thread_local int last_error_daemon = PST_NO_DAEMON;

// Writes `st`'s message to err, and its daemon for pst_error_daemon;
// returns its code.
int Fail(const absl::Status& st, char* err, int err_len) {
  if (!st.ok()) {
    const pstrain::Role daemon = pstrain::DaemonOf(st);
    last_error_daemon = daemon == pstrain::SCHEDULER ? PST_SCHEDULER
                        : daemon == pstrain::SERVER  ? PST_SERVER
                                                     : PST_NO_DAEMON;
  }
  if (err != nullptr && err_len > 0) {
    const std::string message(st.message());
    const size_t n = std::min(message.size(), static_cast<size_t>(err_len - 1));
    std::memcpy(err, message.data(), n);
    err[n] = '\0';
  }
  return st.ok() ? 0 : static_cast<int>(st.code());
}

// Runs `f` (returning a Status), turning exceptions into INTERNAL or
// RESOURCE_EXHAUSTED: nothing is thrown into the caller's runtime.
template <typename F>
int Guarded(char* err, int err_len, F&& f) {
  try {
    return Fail(f(), err, err_len);
  } catch (const std::bad_alloc&) {
    return Fail(absl::ResourceExhaustedError("out of memory"), err, err_len);
  } catch (const std::exception& e) {
    return Fail(absl::InternalError(e.what()), err, err_len);
  }
}

absl::Status NoWorker() { return absl::InvalidArgumentError("no worker (null handle)"); }

}  // namespace

extern "C" {

int pst_abi_version(void) { return PST_ABI_VERSION; }

int pst_error_daemon(void) { return last_error_daemon; }

int pst_set_flag(const char* name, const char* value, char* err, int err_len) {
  return Guarded(err, err_len, [&]() -> absl::Status {
    if (name == nullptr || value == nullptr) return absl::InvalidArgumentError("null flag");
    return pstrain::GiveFlag(name, value);
  });
}

int pst_open(pst_worker** out, char* err, int err_len) {
  return Guarded(err, err_len, [&]() -> absl::Status {
    if (out == nullptr) return absl::InvalidArgumentError("null output");
    *out = nullptr;
    absl::StatusOr<pstrain::MemberConfig> member =
        pstrain::CheckedMemberConfigFromFlags(pstrain::WORKER);
    if (!member.ok()) return member.status();
    pstrain::ExternalWorkerOptions options;
    options.member = *std::move(member);
    ASSIGN_OR_RETURN(options.flags, pstrain::WorkerFlagsFromFlags());
    options.frontend = absl::GetFlag(FLAGS_frontend);
    absl::StatusOr<std::unique_ptr<pstrain::ExternalWorker>> worker =
        pstrain::ExternalWorker::Open(std::move(options));
    if (!worker.ok()) return worker.status();
    *out = new pst_worker{*std::move(worker)};
    return absl::OkStatus();
  });
}

int pst_join(pst_worker* w, char* err, int err_len) {
  return Guarded(err, err_len, [&]() -> absl::Status {
    if (w == nullptr) return NoWorker();
    return w->worker->Join();
  });
}

int pst_register(pst_worker* w, int n, const char* const* names, const int* ndims,
                 const int64_t* dims, const int* dtypes, const int* buffers, int64_t train_size,
                 int device, char* err, int err_len) {
  return Guarded(err, err_len, [&]() -> absl::Status {
    if (w == nullptr) return NoWorker();
    if (n < 1 || names == nullptr || ndims == nullptr || dims == nullptr || dtypes == nullptr ||
        buffers == nullptr) {
      return absl::InvalidArgumentError("declare at least one parameter");
    }
    if (train_size < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("the training set has ", train_size, " examples"));
    }
    if (device != PST_CPU && device != PST_CUDA) {
      return absl::InvalidArgumentError(
          absl::StrCat("device ", device, ": PST_CPU (0) or PST_CUDA (1)"));
    }
    std::vector<pstrain::ParamSpec> params(n);
    const int64_t* dim = dims;
    for (int i = 0; i < n; ++i) {
      if (names[i] == nullptr || ndims[i] < 0 || ndims[i] > 16) {
        return absl::InvalidArgumentError(absl::StrCat("parameter ", i, ": bad name or rank"));
      }
      params[i].set_name(names[i]);
      for (int d = 0; d < ndims[i]; ++d) params[i].add_shape(*dim++);
      if (dtypes[i] != PST_FP32) {
        return absl::InvalidArgumentError(
            absl::StrCat("parameter ", names[i], ": only float32 parameters are trained"));
      }
      params[i].set_dtype(pstrain::FP32);
      if (!pstrain::BufferRule_IsValid(buffers[i])) {
        return absl::InvalidArgumentError(
            absl::StrCat("parameter ", names[i], ": buffer rule ", buffers[i], " is unknown"));
      }
      params[i].set_buffer(static_cast<pstrain::BufferRule>(buffers[i]));
    }
    return w->worker->Register(params, train_size, device == PST_CUDA);
  });
}

int pst_job(pst_worker* w, pst_job_info* out) {
  if (w == nullptr || out == nullptr || w->worker->id() < 0) {
    return static_cast<int>(absl::StatusCode::kFailedPrecondition);
  }
  const pstrain::JobSpec& job = w->worker->job();
  *out = pst_job_info{};
  out->worker_id = w->worker->id();
  out->num_workers = job.num_workers();
  out->num_servers = job.num_servers();
  out->batch_size = job.batch_size();
  out->total_clocks = pstrain::TotalClocks(job);
  out->start_clock = w->worker->start_clock();
  out->clocks_per_epoch = pstrain::ClocksPerEpoch(job);
  out->seed = job.seed();
  out->consistency = job.consistency();
  out->staleness = job.staleness();
  out->overlap = w->worker->overlap() ? 1 : 0;
  return 0;
}

int pst_job_json(pst_worker* w, char* buf, int buf_len) {
  if (w == nullptr || w->worker->id() < 0) return -1;
  try {
    std::string json;
    google::protobuf::util::JsonPrintOptions options;
    options.preserve_proto_field_names = true;
    options.always_print_primitive_fields = true;
    if (!google::protobuf::util::MessageToJsonString(w->worker->job(), &json, options).ok()) {
      return -1;
    }
    if (buf != nullptr && static_cast<int64_t>(json.size()) < buf_len) {
      std::memcpy(buf, json.data(), json.size());
      buf[json.size()] = '\0';
    }
    return static_cast<int>(json.size());
  } catch (const std::exception&) {
    return -1;
  }
}

int pst_start(pst_worker* w, const float* const* initial, char* err, int err_len) {
  return Guarded(err, err_len, [&]() -> absl::Status {
    if (w == nullptr) return NoWorker();
    if (initial == nullptr) return absl::InvalidArgumentError("no initial values");
    const int n = w->worker->job().model().params_size();
    return w->worker->Start(std::vector<const float*>(initial, initial + n));
  });
}

int pst_next(pst_worker* w, int timeout_ms, int64_t* clock, int* rows, int64_t* indices,
             int max_rows, char* err, int err_len) {
  return Guarded(err, err_len, [&]() -> absl::Status {
    if (w == nullptr) return NoWorker();
    if (clock == nullptr || rows == nullptr || (indices == nullptr && max_rows > 0)) {
      return absl::InvalidArgumentError("null output");
    }
    absl::StatusOr<std::optional<pstrain::ClockExchange::OfferedClock>> next =
        w->worker->Next(absl::Milliseconds(std::max(0, timeout_ms)));
    if (!next.ok()) return next.status();
    if (!next->has_value()) {
      *clock = -1;
      *rows = 0;
      return absl::OkStatus();
    }
    const pstrain::ClockExchange::OfferedClock& offer = **next;
    *clock = offer.clock;
    *rows = static_cast<int>(offer.indices.size());
    const size_t n = std::min(offer.indices.size(), static_cast<size_t>(std::max(0, max_rows)));
    std::copy(offer.indices.begin(), offer.indices.begin() + n, indices);
    return absl::OkStatus();
  });
}

int pst_clock_share(pst_worker* w, int* share_index, int* num_shares) {
  if (w == nullptr || share_index == nullptr || num_shares == nullptr ||
      !w->worker->under_way().has_value()) {
    return static_cast<int>(absl::StatusCode::kFailedPrecondition);
  }
  *share_index = w->worker->under_way()->share_index;
  *num_shares = w->worker->under_way()->num_shares;
  return 0;
}

int pst_read_by_layer(pst_worker* w, int on, char* err, int err_len) {
  return Guarded(err, err_len, [&]() -> absl::Status {
    if (w == nullptr) return NoWorker();
    return w->worker->ReadByLayer(on != 0);
  });
}

int pst_weights_await(pst_worker* w, int param, char* err, int err_len) {
  return Guarded(err, err_len, [&]() -> absl::Status {
    if (w == nullptr) return NoWorker();
    return w->worker->AwaitWeights(param);
  });
}

float* pst_weights(pst_worker* w, int param) {
  return w == nullptr ? nullptr : w->worker->weights(param);
}

float* pst_grads(pst_worker* w, int param) {
  return w == nullptr ? nullptr : w->worker->grads(param);
}

int pst_grads_ready(pst_worker* w, int param, char* err, int err_len) {
  return Guarded(err, err_len, [&]() -> absl::Status {
    if (w == nullptr) return NoWorker();
    return w->worker->GradsReady(param);
  });
}

int pst_grads_at(pst_worker* w, int param, const float* values, char* err, int err_len) {
  return Guarded(err, err_len, [&]() -> absl::Status {
    if (w == nullptr) return NoWorker();
    return w->worker->GradsAt(param, values);
  });
}

int pst_grads_absent(pst_worker* w, int param, char* err, int err_len) {
  return Guarded(err, err_len, [&]() -> absl::Status {
    if (w == nullptr) return NoWorker();
    return w->worker->GradsAbsent(param);
  });
}

int pst_set_hyper(pst_worker* w, const char* json, char* err, int err_len) {
  return Guarded(err, err_len, [&]() -> absl::Status {
    if (w == nullptr) return NoWorker();
    return w->worker->SetHyper(json == nullptr ? "" : json);
  });
}

int pst_clock_done(pst_worker* w, double loss, int64_t correct, int64_t predicted, char* err,
                   int err_len) {
  return Guarded(err, err_len, [&]() -> absl::Status {
    if (w == nullptr) return NoWorker();
    pstrain::StepResult result;
    result.loss = static_cast<float>(loss);
    result.correct = correct;
    result.predicted = predicted;
    return w->worker->ClockDone(result);
  });
}

int pst_read_state(pst_worker* w, char* err, int err_len) {
  return Guarded(err, err_len, [&]() -> absl::Status {
    if (w == nullptr) return NoWorker();
    return w->worker->ReadState();
  });
}

int pst_state_arrays(pst_worker* w, int param) {
  if (w == nullptr || param < 0 || param >= static_cast<int>(w->worker->state().size())) {
    return -1;
  }
  return static_cast<int>(w->worker->state()[param].arrays.size());
}

const float* pst_state(pst_worker* w, int param, int array) {
  if (pst_state_arrays(w, param) <= array || array < 0) return nullptr;
  return w->worker->state()[param].arrays[array].data();
}

int64_t pst_state_steps(pst_worker* w, int param) {
  if (pst_state_arrays(w, param) < 0) return -1;
  return w->worker->state()[param].steps;
}

int pst_write_state(pst_worker* w, int param, int64_t steps, int arrays, const float* const* state,
                    char* err, int err_len) {
  return Guarded(err, err_len, [&]() -> absl::Status {
    if (w == nullptr) return NoWorker();
    const int n = w->worker->job().model().params_size();
    if (param < 0 || param >= n || arrays < 0 || arrays > 8 || (arrays > 0 && state == nullptr)) {
      return absl::InvalidArgumentError(
          absl::StrCat("pst_write_state: parameter ", param, " of ", n, ", ", arrays, " arrays"));
    }
    int64_t numel = 1;
    for (int64_t d : w->worker->job().model().params(param).shape()) numel *= d;
    std::vector<std::vector<float>> values;
    for (int k = 0; k < arrays; ++k) {
      if (state[k] == nullptr) return absl::InvalidArgumentError("pst_write_state: a null array");
      values.emplace_back(state[k], state[k] + numel);
    }
    return w->worker->SetStartState(param, steps, std::move(values));
  });
}

int pst_pull_rows(pst_worker* w, const char* table, int64_t n, const uint64_t* ids, int width,
                  float* out, char* err, int err_len) {
  return Guarded(err, err_len, [&]() -> absl::Status {
    if (w == nullptr) return NoWorker();
    if (table == nullptr || n < 0 || (n > 0 && (ids == nullptr || out == nullptr))) {
      return absl::InvalidArgumentError("pst_pull_rows: a null table, ids or out, or n < 0");
    }
    std::vector<float> rows;
    RETURN_IF_ERROR(w->worker->PullRows(table, width, absl::MakeConstSpan(ids, n), &rows));
    std::copy(rows.begin(), rows.end(), out);
    return absl::OkStatus();
  });
}

int pst_push_rows(pst_worker* w, const char* table, int64_t n, const uint64_t* ids, int width,
                  const float* grads, char* err, int err_len) {
  return Guarded(err, err_len, [&]() -> absl::Status {
    if (w == nullptr) return NoWorker();
    if (table == nullptr || n < 0 || width < 1 || (n > 0 && (ids == nullptr || grads == nullptr))) {
      return absl::InvalidArgumentError(
          "pst_push_rows: a null table, ids or grads, n < 0 or width < 1");
    }
    return w->worker->PushRows(table, width, absl::MakeConstSpan(ids, n),
                               absl::MakeConstSpan(grads, n * width));
  });
}

int pst_initial_rows(uint64_t seed, const char* table, int width, float init_scale, int64_t n,
                     const uint64_t* ids, float* out) {
  if (table == nullptr || width < 1 || n < 0 || !(init_scale >= 0) ||
      (n > 0 && (ids == nullptr || out == nullptr))) {
    return -1;
  }
  const uint64_t key = pstrain::TableInitKey(seed, table);
  for (int64_t i = 0; i < n; ++i)
    pstrain::InitialRow(key, ids[i], width, init_scale, out + i * width);
  return 0;
}

int pst_finish(pst_worker* w, int ok, double accuracy, const char* message) {
  return Guarded(nullptr, 0, [&]() -> absl::Status {
    if (w == nullptr) return NoWorker();
    w->worker->Finish(ok != 0, accuracy, message == nullptr ? "" : message);
    return absl::OkStatus();
  });
}

int pst_status(pst_worker* w, char* buf, int buf_len) {
  if (w == nullptr || buf == nullptr) return -1;
  try {
    const std::string bytes = w->worker->Status().SerializeAsString();
    if (static_cast<int64_t>(bytes.size()) > buf_len) return -1;
    std::memcpy(buf, bytes.data(), bytes.size());
    return static_cast<int>(bytes.size());
  } catch (const std::exception&) {
    return -1;
  }
}

void pst_close(pst_worker* w) {
  try {
    delete w;
  } catch (const std::exception&) {
  }
}

int pst_batch_indices(uint64_t seed, int64_t train_size, int64_t batch_size, int64_t clock,
                      int num_shares, int share_index, int64_t* out, int max_rows) {
  if (train_size < 1 || batch_size < 1 || batch_size > train_size || batch_size > INT32_MAX ||
      clock < 0 || num_shares < 1 || share_index < 0 || share_index >= num_shares ||
      out == nullptr) {
    return -1;
  }
  try {
    // The order of a job of this seed, batch and training set: the workers'.
    // Its sampler is kept per thread for the next call, which keeps the
    // epoch's permutation (a ClockBatchSampler asks clock after clock).
    struct Order {
      uint64_t seed;
      int64_t train_size, batch_size;
      std::optional<pstrain::BatchSampler> sampler;
    };
    thread_local Order last{0, 0, 0, std::nullopt};
    if (!last.sampler.has_value() || last.seed != seed || last.train_size != train_size ||
        last.batch_size != batch_size) {
      pstrain::JobSpec job;
      job.set_seed(seed);
      job.set_batch_size(static_cast<int32_t>(batch_size));
      job.mutable_data()->set_dataset(pstrain::EXTERNAL_DATA);
      job.mutable_data()->set_train_size(train_size);
      last = Order{seed, train_size, batch_size, pstrain::ExternalDataOrder(job)};
    }
    const std::vector<int64_t> indices = last.sampler->Indices(clock, num_shares, share_index);
    const size_t n = std::min(indices.size(), static_cast<size_t>(std::max(0, max_rows)));
    std::copy(indices.begin(), indices.begin() + n, out);
    return static_cast<int>(indices.size());
  } catch (const std::exception&) {
    return -1;
  }
}

}  // extern "C"
