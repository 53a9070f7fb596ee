// cuDNN's fused attention (see cudnn_attention.h) through the backend
// graph API (cudnn_backend_api.h). The two graphs are the ones cuDNN's own
// front end (github.com/NVIDIA/cudnn-frontend, the composite SDPA nodes)
// hands the backend for a causal, dropout-free attention with statistics,
// which the backend recognises and runs as one fused kernel:
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

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cuda/cudnn_backend_api.h"

namespace pstrain {
namespace kernels {

// A shape's two plans and the scalars their variant packs point at.
struct CudnnAttention::Plans {
  std::unique_ptr<CudnnPlan> forward, backward;
  float scale = 1, neg_inf = -std::numeric_limits<float>::infinity(), one = 1;
};

namespace {

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
};

// Strides of a [batch, heads, rows, cols] view of the backend's row-major
// arrays: rows `row` elements apart, heads `cols` apart, sequences `rows *
// row` apart.
CudnnDims Bhsd(const CudnnShape& s, int64_t row) {
  return {s.seq * row, s.head_dim, row, 1};
}
// The same view transposed in its last two dimensions.
CudnnDims BhdsOf(const CudnnDims& strides) { return {strides[0], strides[1], strides[3], strides[2]}; }

// The causal mask over scores x [b, h, s, s]: x where row >= column, else
// the by-value -inf.
cudnnBackendDescriptor_t CausalMask(CudnnGraph& g, cudnnBackendDescriptor_t x,
                                    cudnnBackendDescriptor_t neg_inf, const CudnnDims& dims,
                                    const CudnnDims& strides) {
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

void BuildForward(CudnnGraph& g, const CudnnShape& s) {
  const int64_t b = s.batch, h = s.heads, t = s.seq, d = s.head_dim, c = h * d;
  const CudnnDims qkv = Bhsd(s, 3 * c), out = Bhsd(s, c);
  const CudnnDims scores{b, h, t, t}, scores_strides{h * t * t, t * t, t, 1};
  const CudnnDims stat{b, h, t, 1}, stat_strides{h * t, t, 1, 1};
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

void BuildBackward(CudnnGraph& g, const CudnnShape& s) {
  const int64_t b = s.batch, h = s.heads, t = s.seq, d = s.head_dim, c = h * d;
  const CudnnDims qkv = Bhsd(s, 3 * c), out = Bhsd(s, c);
  const CudnnDims bhsd{b, h, t, d}, bhds{b, h, d, t};
  const CudnnDims scores{b, h, t, t}, scores_strides{h * t * t, t * t, t, 1};
  const CudnnDims transposed_strides{h * t * t, t * t, 1, t};
  const CudnnDims stat{b, h, t, 1}, stat_strides{h * t, t, 1, 1};
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
  if (version == 91000 || version == 91001) {
    return "the front end refuses SDPA on 9.10.0 and 9.10.1";
  }
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

bool CudnnAttention::Describe(const CudnnShape& s, std::string* why) {
  std::string version, library;
  std::unique_ptr<CudnnApi> api = LoadCudnn(&version, &library, why);
  if (api == nullptr) return false;
  const cudnnDataType_t io = s.bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
  CudnnGraph forward(api.get(), nullptr, io), backward(api.get(), nullptr, io);
  BuildForward(forward, s);
  BuildBackward(backward, s);
  if (!forward.error().empty()) *why = "forward: " + forward.error();
  if (forward.error().empty() && !backward.error().empty()) *why = "backward: " + backward.error();
  return forward.error().empty() && backward.error().empty();
}

std::unique_ptr<CudnnAttention> CudnnAttention::Open(void* stream, std::string* why) {
  std::string version, library;
  std::unique_ptr<CudnnApi> api = LoadCudnn(&version, &library, why);
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

CudnnAttention::CudnnAttention(std::unique_ptr<CudnnApi> api, void* handle, std::string version,
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
    CudnnGraph g(api_.get(), handle, io);
    BuildForward(g, s);
    plans->forward = g.Build();
    if (plans->forward == nullptr) error = "forward: " + g.error();
  }
  if (error.empty()) {
    CudnnGraph g(api_.get(), handle, io);
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

CudnnAttention::Plans* CudnnAttention::Prepared(const CudnnShape& s, std::string* why) {
  auto it = plans_.find(s);
  if (it != plans_.end()) return it->second.get();
  *why = "cuDNN attention: shape not prepared";
  return nullptr;
}

bool CudnnAttention::Forward(const CudnnShape& s, const void* qkv, void* out, float* lse,
                             void* workspace, std::string* why) {
  Plans* p = Prepared(s, why);
  if (p == nullptr) return false;
  const int64_t c = static_cast<int64_t>(s.heads) * s.head_dim;
  return CudnnExecute(api_.get(), static_cast<cudnnHandle_t>(handle_), *p->forward,
                      {kQ, kK, kV, kO, kStats, kScale, kNegInf},
                      {At(qkv, 0), At(qkv, c), At(qkv, 2 * c), out, lse, &p->scale,
                       &p->neg_inf},
                      workspace, why);
}

bool CudnnAttention::Backward(const CudnnShape& s, const void* qkv, const void* out,
                              const void* dout, const float* lse, float* delta, void* dqkv,
                              void* workspace, std::string* why) {
  Plans* p = Prepared(s, why);
  if (p == nullptr) return false;
  const int64_t c = static_cast<int64_t>(s.heads) * s.head_dim;
  return CudnnExecute(api_.get(), static_cast<cudnnHandle_t>(handle_), *p->backward,
                      {kQ, kK, kV, kO, kDO, kStats, kDQ, kDK, kDV, kDelta, kScale, kNegInf, kOne},
                      {At(qkv, 0), At(qkv, c), At(qkv, 2 * c), const_cast<void*>(out),
                       const_cast<void*>(dout), const_cast<float*>(lse), At(dqkv, 0),
                       At(dqkv, c), At(dqkv, 2 * c), delta, &p->scale,
                       &p->neg_inf, &p->one},
                      workspace, why);
}

}  // namespace kernels
}  // namespace pstrain
