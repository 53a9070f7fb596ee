// cuDNN's fused attention (see cudnn_attention.h) through the backend
// graph API. The two graphs are the ones cuDNN's own front end
// (github.com/NVIDIA/cudnn-frontend, the composite SDPA nodes) hands the
// backend for a causal, dropout-free attention with statistics, which the
// backend recognises and runs as one fused kernel:
//
//   forward   S = Q K^T * scale; causal mask (row >= column, else -inf);
//             M = rowmax S; E = exp(S - M); Z = rowsum E;
//             lse = M + log Z; O = (E / Z) V
//   backward  delta = rowsum(dO * O); P = exp(mask(Q K^T * scale - lse));
//             dV = P^T dO; dS = P * (dO V^T - delta) * scale;
//             dK = dS^T Q; dQ = dS K
//
// The backward writes dQ straight from its product (the front end's
// deterministic form on Hopper), engines without a non-determinism note
// are preferred, and the backend compares two runs' bits before it trains
// on them (library_attention.cu).
#include "kernels/cuda/cudnn_attention.h"

#include <cudnn_graph.h>
#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

namespace pstrain {
namespace kernels {

// The library's entry points, looked up once.
struct CudnnAttention::Api {
  void* library = nullptr;
  size_t (*GetVersion)() = nullptr;
  const char* (*GetErrorString)(cudnnStatus_t) = nullptr;
  void (*GetLastErrorString)(char*, size_t) = nullptr;
  cudnnStatus_t (*Create)(cudnnHandle_t*) = nullptr;
  cudnnStatus_t (*Destroy)(cudnnHandle_t) = nullptr;
  cudnnStatus_t (*SetStream)(cudnnHandle_t, cudaStream_t) = nullptr;
  cudnnStatus_t (*CreateDescriptor)(cudnnBackendDescriptorType_t,
                                    cudnnBackendDescriptor_t*) = nullptr;
  cudnnStatus_t (*DestroyDescriptor)(cudnnBackendDescriptor_t) = nullptr;
  cudnnStatus_t (*Finalize)(cudnnBackendDescriptor_t) = nullptr;
  cudnnStatus_t (*SetAttribute)(cudnnBackendDescriptor_t, cudnnBackendAttributeName_t,
                                cudnnBackendAttributeType_t, int64_t, const void*) = nullptr;
  cudnnStatus_t (*GetAttribute)(cudnnBackendDescriptor_t const, cudnnBackendAttributeName_t,
                                cudnnBackendAttributeType_t, int64_t, int64_t*, void*) = nullptr;
  cudnnStatus_t (*Execute)(cudnnHandle_t, cudnnBackendDescriptor_t,
                           cudnnBackendDescriptor_t) = nullptr;

  ~Api() {
    if (library != nullptr) dlclose(library);
  }

  // What went wrong in `what`: cuDNN's name for the status and its last
  // message.
  std::string Why(const char* what, cudnnStatus_t s) const {
    std::string why = std::string(what) + ": " + GetErrorString(s);
    if (GetLastErrorString != nullptr) {
      char message[512] = {0};
      GetLastErrorString(message, sizeof(message));
      if (message[0] != '\0') why += std::string(" (") + message + ")";
    }
    return why;
  }
};

namespace {

using Api = CudnnAttention::Api;

// dlsym of each entry point; false and *why when one is missing.
bool Resolve(Api* api, std::string* why) {
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

// One backend descriptor, destroyed with its owner.
class Desc {
 public:
  Desc(const Api* api, cudnnBackendDescriptorType_t type, std::string* error) : api_(api) {
    const cudnnStatus_t s = api->CreateDescriptor(type, &d_);
    if (s != CUDNN_STATUS_SUCCESS) {
      if (error->empty()) *error = api->Why("cudnnBackendCreateDescriptor", s);
      d_ = nullptr;
    }
  }
  ~Desc() {
    if (d_ != nullptr) api_->DestroyDescriptor(d_);
  }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  cudnnBackendDescriptor_t get() const { return d_; }
  cudnnBackendDescriptor_t* address() { return &d_; }

 private:
  const Api* api_;
  cudnnBackendDescriptor_t d_ = nullptr;
};

using Dims = std::vector<int64_t>;

// The tensors' ids in a variant pack.
enum Uid : int64_t {
  kQ = 1,
  kK,
  kV,
  kO,
  kStats,
  kScale,
  kNegInf,
  kDO,
  kDQ,
  kDK,
  kDV,
  kDelta,
  kOne,
  kFirstVirtual = 100,
};

// Builds one operation graph descriptor by descriptor, keeping each one
// alive (the plan refers to them), and the first error: later calls do
// nothing once one failed.
class GraphBuilder {
 public:
  GraphBuilder(const Api* api, cudnnHandle_t handle, cudnnDataType_t io)
      : api_(api), handle_(handle), io_(io) {}

  const std::string& error() const { return error_; }

  // A tensor the caller's memory backs (`uid` in the variant pack).
  cudnnBackendDescriptor_t Tensor(int64_t uid, cudnnDataType_t type, const Dims& dims,
                                  const Dims& strides) {
    return MakeTensor(uid, type, dims, strides, /*is_virtual=*/false, /*by_value=*/false);
  }
  // A scalar passed by value (a host float in the variant pack).
  cudnnBackendDescriptor_t Scalar(int64_t uid) {
    return MakeTensor(uid, CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true);
  }
  // An intermediate that never reaches memory (fp32 unless said).
  cudnnBackendDescriptor_t Virtual(const Dims& dims, const Dims& strides,
                                   cudnnDataType_t type = CUDNN_DATA_FLOAT) {
    return MakeTensor(next_virtual_++, type, dims, strides, /*is_virtual=*/true, false);
  }
  cudnnDataType_t io() const { return io_; }

  // y = mode(x[, b[, t]]), computed in `math`.
  void Pointwise(cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                 cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y,
                 cudnnDataType_t math = CUDNN_DATA_FLOAT, int64_t axis = -1) {
    Desc* pw = New(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    Set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    Set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &math);
    if (mode == CUDNN_POINTWISE_GEN_INDEX) {
      Set(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    }
    Finalize(pw, "pointwise descriptor");
    Desc* op = New(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    SetDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw->get());
    SetDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
    if (b != nullptr) SetDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b);
    if (t != nullptr) SetDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t);
    SetDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
    AddOp(op, "pointwise operation");
  }

  // y = reduce(x) over the dimensions where y has extent 1.
  void Reduction(cudnnReduceTensorOp_t reduce, cudnnBackendDescriptor_t x,
                 cudnnBackendDescriptor_t y) {
    Desc* r = New(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    Set(r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &reduce);
    Set(r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    Finalize(r, "reduction descriptor");
    Desc* op = New(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    SetDesc(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, r->get());
    SetDesc(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x);
    SetDesc(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y);
    AddOp(op, "reduction operation");
  }

  // c = a b, batched over the leading dimensions, fp32 accumulation.
  void Matmul(cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c) {
    Desc* mm = New(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    Set(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    Finalize(mm, "matmul descriptor");
    Desc* op = New(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    SetDesc(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, mm->get());
    SetDesc(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, a);
    SetDesc(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, b);
    SetDesc(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c);
    AddOp(op, "matmul operation");
  }

  // y: x under other strides (a transpose).
  void Reshape(cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    Desc* op = New(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    SetDesc(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x);
    SetDesc(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y);
    AddOp(op, "reshape operation");
  }

  // The graph's execution plan: the first configuration that finalizes,
  // heuristics A's before the fallback list's and, in each, those without
  // a non-determinism note first (the backward is made deterministic by
  // its form: dQ straight from its product, as cuDNN's front end does on
  // Hopper, so a noted engine may still be; the backend checks the bits).
  // Null and error() when none does.
  std::unique_ptr<CudnnAttention::Plan> Build();

 private:
  Desc* New(cudnnBackendDescriptorType_t type) {
    keep_.push_back(std::make_unique<Desc>(api_, type, &error_));
    return keep_.back().get();
  }
  void Set(Desc* d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
           int64_t count, const void* value) {
    if (!error_.empty() || d->get() == nullptr) return;
    const cudnnStatus_t s = api_->SetAttribute(d->get(), name, type, count, value);
    if (s != CUDNN_STATUS_SUCCESS) {
      error_ = api_->Why(("cudnnBackendSetAttribute " + std::to_string(name)).c_str(), s);
    }
  }
  void SetDesc(Desc* d, cudnnBackendAttributeName_t name, cudnnBackendDescriptor_t value) {
    Set(d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &value);
  }
  void Finalize(Desc* d, const char* what) {
    if (!error_.empty() || d->get() == nullptr) return;
    const cudnnStatus_t s = api_->Finalize(d->get());
    if (s != CUDNN_STATUS_SUCCESS) error_ = api_->Why(what, s);
  }
  void AddOp(Desc* op, const char* what) {
    Finalize(op, what);
    ops_.push_back(op->get());
  }
  cudnnBackendDescriptor_t MakeTensor(int64_t uid, cudnnDataType_t type, const Dims& dims,
                                      const Dims& strides, bool is_virtual, bool by_value) {
    Desc* t = New(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
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

  const Api* api_;
  cudnnHandle_t handle_;
  cudnnDataType_t io_;
  std::string error_;
  std::vector<std::unique_ptr<Desc>> keep_;
  std::vector<cudnnBackendDescriptor_t> ops_;
  int64_t next_virtual_ = kFirstVirtual;
};

}  // namespace

// An execution plan and the descriptors it was made from.
struct CudnnAttention::Plan {
  std::vector<std::unique_ptr<Desc>> keep;
  std::unique_ptr<Desc> plan;
  int64_t workspace = 0;
  bool noted_nondeterministic = false;  // its engine carries that note
};

// A shape's two plans and the scalars their variant packs point at.
struct CudnnAttention::Plans {
  std::unique_ptr<Plan> forward, backward;
  float scale = 1, neg_inf = -std::numeric_limits<float>::infinity(), one = 1;
};

namespace {

// Whether engine configuration `config` carries a non-determinism note
// (one that cannot be read counts as noted).
bool NotedNondeterministic(const Api* api, cudnnBackendDescriptor_t config) {
  std::string error;
  Desc engine(api, CUDNN_BACKEND_ENGINE_DESCRIPTOR, &error);
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
std::vector<std::unique_ptr<Desc>> Configs(const Api* api, cudnnBackendDescriptor_t graph,
                                           cudnnBackendHeurMode_t mode, std::string* why) {
  std::string error;
  Desc heuristics(api, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &error);
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
  std::vector<std::unique_ptr<Desc>> configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; s == CUDNN_STATUS_SUCCESS && i < count; ++i) {
    configs.push_back(std::make_unique<Desc>(api, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &error));
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

std::unique_ptr<CudnnAttention::Plan> GraphBuilder::Build() {
  Desc* graph = New(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  Set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
      static_cast<int64_t>(ops_.size()), ops_.data());
  Set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle_);
  Finalize(graph, "operation graph");
  if (!error_.empty()) return nullptr;
  std::string last = "the heuristics offered no engine";
  // Heuristics A's configurations, then the fallback list's; in each,
  // those without a non-determinism note first.
  for (const cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    std::vector<std::unique_ptr<Desc>> configs = Configs(api_, graph->get(), mode, &last);
    std::vector<std::pair<bool, Desc*>> order;  // (noted, config)
    for (auto& c : configs) order.push_back({NotedNondeterministic(api_, c->get()), c.get()});
    std::stable_sort(order.begin(), order.end(),
                     [](const auto& x, const auto& y) { return x.first < y.first; });
    for (const auto& [noted, config] : order) {
      auto plan = std::make_unique<Desc>(api_, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &error_);
      if (!error_.empty()) return nullptr;
      cudnnBackendDescriptor_t raw = config->get();
      cudnnStatus_t s = api_->SetAttribute(plan->get(), CUDNN_ATTR_EXECUTION_PLAN_HANDLE,
                                           CUDNN_TYPE_HANDLE, 1, &handle_);
      if (s == CUDNN_STATUS_SUCCESS) {
        s = api_->SetAttribute(plan->get(), CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                               CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw);
      }
      if (s == CUDNN_STATUS_SUCCESS) s = api_->Finalize(plan->get());
      auto out = std::make_unique<CudnnAttention::Plan>();
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

// Strides of a [batch, heads, rows, cols] view of the backend's row-major
// arrays: rows `row` elements apart, heads `cols` apart, sequences `rows *
// row` apart.
Dims Bhsd(const CudnnShape& s, int64_t row) {
  return {s.seq * row, s.head_dim, row, 1};
}
// The same view transposed in its last two dimensions.
Dims BhdsOf(const Dims& strides) { return {strides[0], strides[1], strides[3], strides[2]}; }

// The causal mask over scores x [b, h, s, s]: x where row >= column, else
// the by-value -inf.
cudnnBackendDescriptor_t CausalMask(GraphBuilder& g, cudnnBackendDescriptor_t x,
                                    cudnnBackendDescriptor_t neg_inf, const Dims& dims,
                                    const Dims& strides) {
  cudnnBackendDescriptor_t row = g.Virtual(dims, strides, CUDNN_DATA_INT32);
  cudnnBackendDescriptor_t col = g.Virtual(dims, strides, CUDNN_DATA_INT32);
  g.Pointwise(CUDNN_POINTWISE_GEN_INDEX, x, nullptr, nullptr, row, CUDNN_DATA_FLOAT, 2);
  g.Pointwise(CUDNN_POINTWISE_GEN_INDEX, x, nullptr, nullptr, col, CUDNN_DATA_FLOAT, 3);
  cudnnBackendDescriptor_t keep = g.Virtual(dims, strides, CUDNN_DATA_BOOLEAN);
  g.Pointwise(CUDNN_POINTWISE_CMP_GE, row, col, nullptr, keep, CUDNN_DATA_BOOLEAN);
  cudnnBackendDescriptor_t masked = g.Virtual(dims, strides);
  g.Pointwise(CUDNN_POINTWISE_BINARY_SELECT, x, neg_inf, keep, masked);
  return masked;
}

void BuildForward(GraphBuilder& g, const CudnnShape& s) {
  const int64_t b = s.batch, h = s.heads, t = s.seq, d = s.head_dim, c = h * d;
  const Dims qkv = Bhsd(s, 3 * c), out = Bhsd(s, c);
  const Dims scores{b, h, t, t}, scores_strides{h * t * t, t * t, t, 1};
  const Dims stat{b, h, t, 1}, stat_strides{h * t, t, 1, 1};
  auto q = g.Tensor(kQ, g.io(), {b, h, t, d}, qkv);
  auto kt = g.Tensor(kK, g.io(), {b, h, d, t}, BhdsOf(qkv));
  auto v = g.Tensor(kV, g.io(), {b, h, t, d}, qkv);
  auto o = g.Tensor(kO, g.io(), {b, h, t, d}, out);
  auto stats = g.Tensor(kStats, CUDNN_DATA_FLOAT, stat, stat_strides);
  auto scale = g.Scalar(kScale), neg_inf = g.Scalar(kNegInf);

  auto raw = g.Virtual(scores, scores_strides);
  g.Matmul(q, kt, raw);
  auto scaled = g.Virtual(scores, scores_strides);
  g.Pointwise(CUDNN_POINTWISE_MUL, raw, scale, nullptr, scaled);
  auto masked = CausalMask(g, scaled, neg_inf, scores, scores_strides);
  auto max = g.Virtual(stat, stat_strides);
  g.Reduction(CUDNN_REDUCE_TENSOR_MAX, masked, max);
  auto centred = g.Virtual(scores, scores_strides);
  g.Pointwise(CUDNN_POINTWISE_SUB, masked, max, nullptr, centred);
  auto e = g.Virtual(scores, scores_strides);
  g.Pointwise(CUDNN_POINTWISE_EXP, centred, nullptr, nullptr, e);
  auto sum = g.Virtual(stat, stat_strides);
  g.Reduction(CUDNN_REDUCE_TENSOR_ADD, e, sum);
  auto log_sum = g.Virtual(stat, stat_strides);
  g.Pointwise(CUDNN_POINTWISE_LOG, sum, nullptr, nullptr, log_sum);
  g.Pointwise(CUDNN_POINTWISE_ADD, max, log_sum, nullptr, stats);
  auto p = g.Virtual(scores, scores_strides, g.io());
  g.Pointwise(CUDNN_POINTWISE_DIV, e, sum, nullptr, p);
  g.Matmul(p, v, o);
}

void BuildBackward(GraphBuilder& g, const CudnnShape& s) {
  const int64_t b = s.batch, h = s.heads, t = s.seq, d = s.head_dim, c = h * d;
  const Dims qkv = Bhsd(s, 3 * c), out = Bhsd(s, c);
  const Dims bhsd{b, h, t, d}, bhds{b, h, d, t};
  const Dims scores{b, h, t, t}, scores_strides{h * t * t, t * t, t, 1};
  const Dims transposed_strides{h * t * t, t * t, 1, t};
  const Dims stat{b, h, t, 1}, stat_strides{h * t, t, 1, 1};
  auto q = g.Tensor(kQ, g.io(), bhsd, qkv);
  auto kt = g.Tensor(kK, g.io(), bhds, BhdsOf(qkv));
  auto vt = g.Tensor(kV, g.io(), bhds, BhdsOf(qkv));
  auto o = g.Tensor(kO, g.io(), bhsd, out);
  auto d_o = g.Tensor(kDO, g.io(), bhsd, out);
  auto stats = g.Tensor(kStats, CUDNN_DATA_FLOAT, stat, stat_strides);
  auto dq = g.Tensor(kDQ, g.io(), bhsd, qkv);
  auto dk = g.Tensor(kDK, g.io(), bhsd, qkv);
  auto dv = g.Tensor(kDV, g.io(), bhsd, qkv);
  auto delta = g.Tensor(kDelta, CUDNN_DATA_FLOAT, stat, stat_strides);
  auto scale = g.Scalar(kScale), neg_inf = g.Scalar(kNegInf), one = g.Scalar(kOne);

  // delta = rowsum(dO * O)
  auto product = g.Virtual(bhsd, {h * t * d, t * d, d, 1});
  g.Pointwise(CUDNN_POINTWISE_MUL, d_o, o, nullptr, product);
  auto row_sum = g.Virtual(stat, stat_strides);
  g.Reduction(CUDNN_REDUCE_TENSOR_ADD, product, row_sum);
  g.Pointwise(CUDNN_POINTWISE_MUL, row_sum, one, nullptr, delta);
  // P = exp(mask(Q K^T * scale - lse)); dV = P^T dO
  auto raw = g.Virtual(scores, scores_strides);
  g.Matmul(q, kt, raw);
  auto scaled = g.Virtual(scores, scores_strides);
  g.Pointwise(CUDNN_POINTWISE_MUL, raw, scale, nullptr, scaled);
  auto centred = g.Virtual(scores, scores_strides);
  g.Pointwise(CUDNN_POINTWISE_SUB, scaled, stats, nullptr, centred);
  auto masked = CausalMask(g, centred, neg_inf, scores, scores_strides);
  auto p = g.Virtual(scores, scores_strides);
  g.Pointwise(CUDNN_POINTWISE_EXP, masked, nullptr, nullptr, p);
  auto pt = g.Virtual(scores, transposed_strides, g.io());
  g.Reshape(p, pt);
  g.Matmul(pt, d_o, dv);
  // dS = P * (dO V^T - delta) * scale; dK = dS^T Q; dQ = dS K
  auto dp = g.Virtual(scores, scores_strides);
  g.Matmul(d_o, vt, dp);
  auto dp_centred = g.Virtual(scores, scores_strides);
  g.Pointwise(CUDNN_POINTWISE_SUB, dp, delta, nullptr, dp_centred);
  auto ds_unscaled = g.Virtual(scores, scores_strides);
  g.Pointwise(CUDNN_POINTWISE_MUL, dp_centred, p, nullptr, ds_unscaled);
  auto ds = g.Virtual(scores, scores_strides);
  g.Pointwise(CUDNN_POINTWISE_MUL, ds_unscaled, scale, nullptr, ds);
  auto dst = g.Virtual(scores, transposed_strides, g.io());
  g.Reshape(ds, dst);
  g.Matmul(dst, q, dk);
  auto k = g.Virtual(bhsd, qkv);
  g.Reshape(kt, k);
  g.Matmul(ds, k, dq);
}

// Runs `plan` with the variant pack of `uids` and `pointers`.
bool Execute(const Api* api, cudnnHandle_t handle, const CudnnAttention::Plan& plan,
             const std::vector<int64_t>& uids, const std::vector<void*>& pointers,
             void* workspace, std::string* why) {
  std::string error;
  Desc pack(api, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &error);
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

// The deterministic backward keeps its dP in the workspace, 2 bytes per
// score: quadratic in seq. Past this, the own kernels (linear in seq) run.
constexpr int64_t kMaxWorkspaceBytes = int64_t{256} << 20;

// Why cuDNN `version` cannot take shape `s`, as cuDNN's front end knows
// it; "" when it can.
std::string Unsupported(const CudnnShape& s, size_t version) {
  // Every operand 16-byte aligned; the fused kernels' head sizes.
  if (s.head_dim % 8 != 0 || s.head_dim > 128) {
    return "head_dim " + std::to_string(s.head_dim) + " is not a multiple of 8 up to 128";
  }
  if (s.seq < 2) return "a sequence of one token";
  if (version == 91000 || version == 91001) return "the front end refuses SDPA on 9.10.0 and 9.10.1";
  // Up to 9.15.0 the backward is wrong unless a padding mask is added
  // (the front end adds one); that graph is not built here.
  if (version <= 91500 && s.seq % 128 != 0) {
    return "up to 9.15.0 the backward needs seq a multiple of 128";
  }
  return "";
}

// The element at `offset` 16-bit values past `p`.
void* At(const void* p, int64_t offset) {
  return const_cast<char*>(static_cast<const char*>(p)) + 2 * offset;
}

}  // namespace

namespace {

// libcudnn.so.9 and its entry points, its version ("9.19.0") and file;
// null and *why when missing or older than 9.0.
std::unique_ptr<Api> Load(std::string* version, std::string* library, std::string* why) {
  auto api = std::make_unique<Api>();
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

}  // namespace

bool CudnnAttention::Describe(const CudnnShape& s, std::string* why) {
  std::string version, library;
  std::unique_ptr<Api> api = Load(&version, &library, why);
  if (api == nullptr) return false;
  const cudnnDataType_t io = s.bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
  GraphBuilder forward(api.get(), nullptr, io), backward(api.get(), nullptr, io);
  BuildForward(forward, s);
  BuildBackward(backward, s);
  if (!forward.error().empty()) *why = "forward: " + forward.error();
  if (forward.error().empty() && !backward.error().empty()) *why = "backward: " + backward.error();
  return forward.error().empty() && backward.error().empty();
}

std::unique_ptr<CudnnAttention> CudnnAttention::Open(void* stream, std::string* why) {
  std::string version, library;
  std::unique_ptr<Api> api = Load(&version, &library, why);
  if (api == nullptr) return nullptr;
  cudnnHandle_t handle = nullptr;
  cudnnStatus_t s = api->Create(&handle);
  if (s != CUDNN_STATUS_SUCCESS) {
    *why = "cuDNN " + version + ": " + api->Why("cudnnCreate", s);
    return nullptr;
  }
  s = api->SetStream(handle, static_cast<cudaStream_t>(stream));
  if (s != CUDNN_STATUS_SUCCESS) {
    *why = api->Why("cudnnSetStream", s);
    api->Destroy(handle);
    return nullptr;
  }
  return std::unique_ptr<CudnnAttention>(
      new CudnnAttention(std::move(api), handle, version, library));
}

CudnnAttention::CudnnAttention(std::unique_ptr<Api> api, void* handle, std::string version,
                               std::string library)
    : api_(std::move(api)), handle_(handle), version_(std::move(version)),
      library_(std::move(library)) {}

CudnnAttention::~CudnnAttention() {
  plans_.clear();  // the descriptors before the handle and the library
  if (handle_ != nullptr) api_->Destroy(static_cast<cudnnHandle_t>(handle_));
}

bool CudnnAttention::Prepare(const CudnnShape& s, std::string* why) {
  if (plans_.count(s) != 0) return true;
  if (auto refused = refused_.find(s); refused != refused_.end()) {
    *why = refused->second;
    return false;
  }
  std::string error = Unsupported(s, api_->GetVersion());
  auto plans = std::make_unique<Plans>();
  plans->scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  // Before 9.10 the backend's mask wants the lowest float, not -inf.
  if (api_->GetVersion() < 91000) plans->neg_inf = std::numeric_limits<float>::lowest();
  const cudnnHandle_t handle = static_cast<cudnnHandle_t>(handle_);
  const cudnnDataType_t io = s.bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
  if (error.empty()) {
    GraphBuilder g(api_.get(), handle, io);
    BuildForward(g, s);
    plans->forward = g.Build();
    if (plans->forward == nullptr) error = "forward: " + g.error();
  }
  if (error.empty()) {
    GraphBuilder g(api_.get(), handle, io);
    BuildBackward(g, s);
    plans->backward = g.Build();
    if (plans->backward == nullptr) error = "backward: " + g.error();
  }
  if (error.empty() && plans->backward->workspace > kMaxWorkspaceBytes) {
    error = "its backward's workspace, " + std::to_string(plans->backward->workspace >> 20) +
            " MiB, is over the " + std::to_string(kMaxWorkspaceBytes >> 20) + " MiB cap";
  }
  if (!error.empty()) {
    *why = "cuDNN " + version_ + " refuses batch " + std::to_string(s.batch) + ", seq " +
           std::to_string(s.seq) + ", " + std::to_string(s.heads) + " heads of " +
           std::to_string(s.head_dim) + ": " + error;
    refused_[s] = *why;
    return false;
  }
  plans_[s] = std::move(plans);
  return true;
}

int64_t CudnnAttention::WorkspaceBytes(const CudnnShape& s) const {
  auto it = plans_.find(s);
  if (it == plans_.end()) return 0;
  return std::max(it->second->forward->workspace, it->second->backward->workspace);
}

bool CudnnAttention::Forward(const CudnnShape& s, const void* qkv, void* out, float* lse,
                             void* workspace, std::string* why) {
  auto it = plans_.find(s);
  if (it == plans_.end()) {
    *why = "cuDNN attention: shape not prepared";
    return false;
  }
  Plans& p = *it->second;
  const int64_t c = static_cast<int64_t>(s.heads) * s.head_dim;
  return Execute(api_.get(), static_cast<cudnnHandle_t>(handle_), *p.forward,
                 {kQ, kK, kV, kO, kStats, kScale, kNegInf},
                 {At(qkv, 0), At(qkv, c), At(qkv, 2 * c), out, lse, &p.scale, &p.neg_inf},
                 workspace, why);
}

bool CudnnAttention::Backward(const CudnnShape& s, const void* qkv, const void* out,
                              const void* dout, const float* lse, float* delta, void* dqkv,
                              void* workspace, std::string* why) {
  auto it = plans_.find(s);
  if (it == plans_.end()) {
    *why = "cuDNN attention: shape not prepared";
    return false;
  }
  Plans& p = *it->second;
  const int64_t c = static_cast<int64_t>(s.heads) * s.head_dim;
  return Execute(api_.get(), static_cast<cudnnHandle_t>(handle_), *p.backward,
                 {kQ, kK, kV, kO, kDO, kStats, kDQ, kDK, kDV, kDelta, kScale, kNegInf, kOne},
                 {At(qkv, 0), At(qkv, c), At(qkv, 2 * c), const_cast<void*>(out),
                  const_cast<void*>(dout), const_cast<float*>(lse), At(dqkv, 0), At(dqkv, c),
                  At(dqkv, 2 * c), delta, &p.scale, &p.neg_inf, &p.one},
                 workspace, why);
}

}  // namespace kernels
}  // namespace pstrain
