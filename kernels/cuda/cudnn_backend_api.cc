// See cudnn_backend_api.h.
#include "kernels/cuda/cudnn_backend_api.h"

#include <dlfcn.h>

#include <algorithm>
#include <type_traits>
#include <utility>

namespace pstrain {
namespace kernels {
namespace {


// dlsym of each entry point; false and *why when one is missing.
bool Resolve(CudnnApi* api, std::string* why) {
  bool ok = true;
  auto get = [&](auto*& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(api->library, name));
    if (fn == nullptr && ok) {
      *why = std::string("libcudnn has no ") + name;
      ok = false;
    }
  };
  get(api->GetVersion, "cudnnGetVersion");
  get(api->GetErrorString, "cudnnGetErrorString");
  get(api->Create, "cudnnCreate");
  get(api->Destroy, "cudnnDestroy");
  get(api->SetStream, "cudnnSetStream");
  get(api->CreateDescriptor, "cudnnBackendCreateDescriptor");
  get(api->DestroyDescriptor, "cudnnBackendDestroyDescriptor");
  get(api->Finalize, "cudnnBackendFinalize");
  get(api->SetAttribute, "cudnnBackendSetAttribute");
  get(api->GetAttribute, "cudnnBackendGetAttribute");
  get(api->Execute, "cudnnBackendExecute");
  // Optional (9.0 and later have it): a better message.
  api->GetLastErrorString = reinterpret_cast<void (*)(char*, size_t)>(
      dlsym(api->library, "cudnnGetLastErrorString"));
  return ok;
}


// Whether engine configuration `config` carries a non-determinism note
// (one that cannot be read counts as noted).
bool NotedNondeterministic(const CudnnApi* api, cudnnBackendDescriptor_t config) {
  std::string error;
  CudnnDesc engine(api, CUDNN_BACKEND_ENGINE_DESCRIPTOR, &error);
  if (engine.get() == nullptr) return true;
  int64_t count = 0;
  if (api->GetAttribute(config, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                        &count, engine.address()) != CUDNN_STATUS_SUCCESS) {
    return true;
  }
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  if (api->GetAttribute(engine.get(), CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                        CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &count,
                        notes) != CUDNN_STATUS_SUCCESS) {
    return true;
  }
  for (int64_t i = 0; i < count; ++i) {
    if (notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) return true;
  }
  return false;
}

// The engine configurations heuristics `mode` offers for `graph`, in its
// order (none when it offers none or fails).
std::vector<std::unique_ptr<CudnnDesc>> Configs(const CudnnApi* api, cudnnBackendDescriptor_t graph,
                                           cudnnBackendHeurMode_t mode, std::string* why) {
  std::string error;
  CudnnDesc heuristics(api, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &error);
  cudnnStatus_t s = heuristics.get() == nullptr ? CUDNN_STATUS_ALLOC_FAILED
                                                : CUDNN_STATUS_SUCCESS;
  if (s == CUDNN_STATUS_SUCCESS) {
    s = api->SetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
                          CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
  }
  if (s == CUDNN_STATUS_SUCCESS) {
    s = api->SetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1,
                          &mode);
  }
  if (s == CUDNN_STATUS_SUCCESS) s = api->Finalize(heuristics.get());
  int64_t count = 0;
  if (s == CUDNN_STATUS_SUCCESS) {
    s = api->GetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                          CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr);
  }
  std::vector<std::unique_ptr<CudnnDesc>> configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; s == CUDNN_STATUS_SUCCESS && i < count; ++i) {
    configs.push_back(std::make_unique<CudnnDesc>(api, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &error));
    raw.push_back(configs.back()->get());
  }
  if (s == CUDNN_STATUS_SUCCESS && error.empty() && count > 0) {
    s = api->GetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                          CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &count, raw.data());
    configs.resize(static_cast<size_t>(count));
  }
  if (s != CUDNN_STATUS_SUCCESS || !error.empty()) {
    *why = !error.empty() ? error : api->Why("engine heuristics", s);
    configs.clear();
  }
  return configs;
}

}  // namespace

CudnnApi::~CudnnApi() {
  if (library != nullptr) dlclose(library);
}

std::string CudnnApi::Why(const char* what, cudnnStatus_t s) const {
  std::string why = std::string(what) + ": " + GetErrorString(s);
  if (GetLastErrorString != nullptr) {
    char message[512] = {0};
    GetLastErrorString(message, sizeof(message));
    if (message[0] != '\0') why += std::string(" (") + message + ")";
  }
  return why;
}


// libcudnn.so.9 and its entry points, its version ("9.19.0") and file;
// null and *why when missing or older than 9.0.
std::unique_ptr<CudnnApi> LoadCudnn(std::string* version, std::string* library, std::string* why) {
  auto api = std::make_unique<CudnnApi>();
  const char* name = "libcudnn.so.9";
  api->library = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (api->library == nullptr) {
    const char* error = dlerror();
    *why = std::string("cannot load ") + name + ": " + (error != nullptr ? error : "not found");
    return nullptr;
  }
  if (!Resolve(api.get(), why)) return nullptr;
  const size_t v = api->GetVersion();
  *version = std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
             std::to_string(v % 100);
  if (v < 90000) {
    *why = "cuDNN " + *version + " is older than 9.0";
    return nullptr;
  }
  *library = name;
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(api->GetVersion), &info) != 0 && info.dli_fname != nullptr) {
    *library = info.dli_fname;
  }
  return api;
}

cudnnBackendDescriptor_t CudnnGraph::Tensor(int64_t uid, cudnnDataType_t type,
                                            const CudnnDims& dims, const CudnnDims& strides) {
  return MakeTensor(uid, type, dims, strides, /*is_virtual=*/false, /*by_value=*/false);
}

cudnnBackendDescriptor_t CudnnGraph::Scalar(int64_t uid) {
  return MakeTensor(uid, CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true);
}

cudnnBackendDescriptor_t CudnnGraph::Virtual(const CudnnDims& dims, const CudnnDims& strides,
                                             cudnnDataType_t type) {
  return MakeTensor(next_virtual_++, type, dims, strides, /*is_virtual=*/true, false);
}

void CudnnGraph::Pointwise(cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x,
                           cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t,
                           cudnnBackendDescriptor_t y, cudnnDataType_t math, int64_t axis) {
  CudnnDesc* pw = New(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  Set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
  Set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &math);
  if (mode == CUDNN_POINTWISE_GEN_INDEX) {
    Set(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
  }
  Finalize(pw, "pointwise descriptor");
  CudnnDesc* op = New(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  SetDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw->get());
  SetDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
  if (b != nullptr) SetDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b);
  if (t != nullptr) SetDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t);
  SetDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
  AddOp(op, "pointwise operation");
}

void CudnnGraph::Reduction(cudnnReduceTensorOp_t reduce, cudnnBackendDescriptor_t x,
                           cudnnBackendDescriptor_t y) {
  CudnnDesc* r = New(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
  cudnnDataType_t comp = CUDNN_DATA_FLOAT;
  Set(r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &reduce);
  Set(r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
  Finalize(r, "reduction descriptor");
  CudnnDesc* op = New(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
  SetDesc(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, r->get());
  SetDesc(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x);
  SetDesc(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y);
  AddOp(op, "reduction operation");
}

void CudnnGraph::Matmul(cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
                        cudnnBackendDescriptor_t c) {
  CudnnDesc* mm = New(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
  cudnnDataType_t comp = CUDNN_DATA_FLOAT;
  Set(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
  Finalize(mm, "matmul descriptor");
  CudnnDesc* op = New(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
  SetDesc(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, mm->get());
  SetDesc(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, a);
  SetDesc(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, b);
  SetDesc(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c);
  AddOp(op, "matmul operation");
}

void CudnnGraph::Reshape(cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
  CudnnDesc* op = New(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
  SetDesc(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x);
  SetDesc(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y);
  AddOp(op, "reshape operation");
}

CudnnDesc* CudnnGraph::New(cudnnBackendDescriptorType_t type) {
  keep_.push_back(std::make_unique<CudnnDesc>(api_, type, &error_));
  return keep_.back().get();
}

void CudnnGraph::Set(CudnnDesc* d, cudnnBackendAttributeName_t name,
                     cudnnBackendAttributeType_t type, int64_t count, const void* value) {
  if (!error_.empty() || d->get() == nullptr) return;
  const cudnnStatus_t s = api_->SetAttribute(d->get(), name, type, count, value);
  if (s != CUDNN_STATUS_SUCCESS) {
    error_ = api_->Why(("cudnnBackendSetAttribute " + std::to_string(name)).c_str(), s);
  }
}

void CudnnGraph::SetDesc(CudnnDesc* d, cudnnBackendAttributeName_t name,
                         cudnnBackendDescriptor_t value) {
  Set(d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &value);
}

void CudnnGraph::Finalize(CudnnDesc* d, const char* what) {
  if (!error_.empty() || d->get() == nullptr) return;
  const cudnnStatus_t s = api_->Finalize(d->get());
  if (s != CUDNN_STATUS_SUCCESS) error_ = api_->Why(what, s);
}

void CudnnGraph::AddOp(CudnnDesc* op, const char* what) {
  Finalize(op, what);
  ops_.push_back(op->get());
}

cudnnBackendDescriptor_t CudnnGraph::MakeTensor(int64_t uid, cudnnDataType_t type,
                                                const CudnnDims& dims, const CudnnDims& strides,
                                                bool is_virtual, bool by_value) {
  CudnnDesc* t = New(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const int64_t alignment = 16;
  Set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
  Set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, static_cast<int64_t>(dims.size()),
      dims.data());
  Set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, static_cast<int64_t>(strides.size()),
      strides.data());
  Set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  Set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
  if (is_virtual) Set(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
  if (by_value) Set(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
  Finalize(t, "tensor descriptor");
  return t->get();
}

std::unique_ptr<CudnnPlan> CudnnGraph::Build() {
  CudnnDesc* graph = New(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  Set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
      static_cast<int64_t>(ops_.size()), ops_.data());
  Set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle_);
  Finalize(graph, "operation graph");
  if (!error_.empty()) return nullptr;
  std::string last = "the heuristics offered no engine";
  // Heuristics A's configurations, then the fallback list's; in each,
  // those without a non-determinism note first.
  for (const cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    std::vector<std::unique_ptr<CudnnDesc>> configs = Configs(api_, graph->get(), mode, &last);
    std::vector<std::pair<bool, CudnnDesc*>> order;  // (noted, config)
    for (auto& c : configs) order.push_back({NotedNondeterministic(api_, c->get()), c.get()});
    std::stable_sort(order.begin(), order.end(),
                     [](const auto& x, const auto& y) { return x.first < y.first; });
    for (const auto& [noted, config] : order) {
      auto plan = std::make_unique<CudnnDesc>(api_, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &error_);
      if (!error_.empty()) return nullptr;
      cudnnBackendDescriptor_t raw = config->get();
      cudnnStatus_t s = api_->SetAttribute(plan->get(), CUDNN_ATTR_EXECUTION_PLAN_HANDLE,
                                           CUDNN_TYPE_HANDLE, 1, &handle_);
      if (s == CUDNN_STATUS_SUCCESS) {
        s = api_->SetAttribute(plan->get(), CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                               CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw);
      }
      if (s == CUDNN_STATUS_SUCCESS) s = api_->Finalize(plan->get());
      auto out = std::make_unique<CudnnPlan>();
      int64_t got = 0;
      if (s == CUDNN_STATUS_SUCCESS) {
        s = api_->GetAttribute(plan->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                               CUDNN_TYPE_INT64, 1, &got, &out->workspace);
      }
      if (s != CUDNN_STATUS_SUCCESS) {
        last = api_->Why("execution plan", s);
        continue;
      }
      out->noted_nondeterministic = noted;
      out->plan = std::move(plan);
      out->keep = std::move(keep_);
      for (auto& c : configs) out->keep.push_back(std::move(c));
      return out;
    }
  }
  error_ = last;
  return nullptr;
}

// Runs `plan` with the variant pack of `uids` and `pointers`.
bool CudnnExecute(const CudnnApi* api, cudnnHandle_t handle, const CudnnPlan& plan,
             const std::vector<int64_t>& uids, const std::vector<void*>& pointers,
             void* workspace, std::string* why) {
  std::string error;
  CudnnDesc pack(api, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &error);
  if (pack.get() == nullptr) {
    *why = error;
    return false;
  }
  const int64_t n = static_cast<int64_t>(uids.size());
  const char* step = "the variant pack's ids";
  cudnnStatus_t s =
      api->SetAttribute(pack.get(), CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n,
                        uids.data());
  if (s == CUDNN_STATUS_SUCCESS) {
    step = "the variant pack's pointers";
    s = api->SetAttribute(pack.get(), CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
                          n, pointers.data());
  }
  if (s == CUDNN_STATUS_SUCCESS) {
    step = "the variant pack's workspace";
    s = api->SetAttribute(pack.get(), CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1,
                          &workspace);
  }
  if (s == CUDNN_STATUS_SUCCESS) {
    step = "the variant pack";
    s = api->Finalize(pack.get());
  }
  if (s == CUDNN_STATUS_SUCCESS) {
    step = "cudnnBackendExecute";
    s = api->Execute(handle, plan.plan->get(), pack.get());
  }
  if (s != CUDNN_STATUS_SUCCESS) {
    *why = api->Why(step, s);
    return false;
  }
  return true;
}

}  // namespace kernels
}  // namespace pstrain
