// See library_attention.cuh.
#include "kernels/cuda/library_attention.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cuda/elementwise.cuh"

namespace pstrain {
namespace kernels {
namespace {

// How far cuDNN's results may lie from the own kernels': both round the
// same operands to 16 bits but the weights and score gradients at other
// points, so they differ by a few 16-bit steps of the largest value; a
// graph that computes something else (no mask, another scale, a transpose)
// differs by the values themselves.
constexpr double kRelativeTolerance = 0.05;
constexpr double kAbsoluteTolerance = 1e-3;

int64_t Rows(const AttentionArgs& a) { return static_cast<int64_t>(a.batch) * a.seq; }
int64_t Width(const AttentionArgs& a) { return static_cast<int64_t>(a.heads) * a.head_dim; }
int64_t Queries(const AttentionArgs& a) { return Rows(a) * a.heads; }

}  // namespace

bool LibraryAttention::Forward(const AttentionArgs& a, const float* qkv, float* lse, float* out) {
  const CudnnShape s{a.batch, a.seq, a.heads, a.head_dim, a.round == 1};
  if (a.round == 0 || !Ready(s)) return false;
  const int64_t rows = Rows(a), c = Width(a);
  void* qkv16 = To16(s, qkv, rows * 3 * c, qkv16_);
  void* out16 = device_->Grow(out16_, rows * c * 2);
  void* workspace = device_->Grow(workspace_, std::max<int64_t>(cudnn_->WorkspaceBytes(s), 16));
  if (qkv16 == nullptr || out16 == nullptr || workspace == nullptr) return false;
  if (std::string why; !cudnn_->Forward(s, qkv16, out16, lse, workspace, &why)) {
    wrong_[s] = why;
    Own(why);
    return false;
  }
  if (!From16(s, out16, rows * c, out)) return false;
  if (forward_checked_.insert(s).second) {
    float* want = static_cast<float*>(device_->Grow(check_, (rows * c + Queries(a)) * 4));
    if (want == nullptr) return false;
    float* want_lse = want + rows * c;
    if (!device_->Check(LaunchAttention(a, qkv, want_lse, want, device_->stream()),
                        "Attention (own kernels, checking cuDNN)") ||
        !Agrees(s, "forward output", out, want, rows * c) ||
        !Agrees(s, "log-sum-exp", lse, want_lse, Queries(a))) {
      return false;
    }
    Release(check_);
  }
  return Taken();
}

bool LibraryAttention::Backward(const AttentionArgs& a, const float* qkv, const float* out,
                                const float* lse, const float* dout, float* dqkv) {
  const CudnnShape s{a.batch, a.seq, a.heads, a.head_dim, a.round == 1};
  if (a.round == 0 || !Ready(s)) return false;
  const int64_t rows = Rows(a), c = Width(a);
  void* qkv16 = To16(s, qkv, rows * 3 * c, qkv16_);
  void* out16 = To16(s, out, rows * c, out16_);
  void* dout16 = To16(s, dout, rows * c, dout16_);
  void* dqkv16 = device_->Grow(dqkv16_, rows * 3 * c * 2);
  float* delta = static_cast<float*>(device_->Grow(delta_, Queries(a) * 4));
  void* workspace = device_->Grow(workspace_, std::max<int64_t>(cudnn_->WorkspaceBytes(s), 16));
  if (qkv16 == nullptr || out16 == nullptr || dout16 == nullptr || dqkv16 == nullptr ||
      delta == nullptr || workspace == nullptr) {
    return false;
  }
  if (std::string why;
      !cudnn_->Backward(s, qkv16, out16, dout16, lse, delta, dqkv16, workspace, &why)) {
    wrong_[s] = why;
    Own(why);
    return false;
  }
  const bool first = backward_checked_.insert(s).second;
  if (first && !Reproducible(s, qkv16, out16, dout16, lse, delta, dqkv16, workspace)) {
    return false;
  }
  if (!From16(s, dqkv16, rows * 3 * c, dqkv)) return false;
  if (first) {
    float* want = static_cast<float*>(device_->Grow(check_, (rows * 3 * c + Queries(a)) * 4));
    if (want == nullptr) return false;
    if (!device_->Check(LaunchAttentionBackward(a, qkv, out, lse, dout, want + rows * 3 * c,
                                                want, device_->stream()),
                        "AttentionBackward (own kernels, checking cuDNN)") ||
        !Agrees(s, "backward dqkv", dqkv, want, rows * 3 * c)) {
      return false;
    }
    Release(check_);
  }
  return Taken();
}

bool LibraryAttention::Reproducible(const CudnnShape& s, const void* qkv16, const void* out16,
                                    const void* dout16, const float* lse, float* delta,
                                    const void* dqkv16, void* workspace) {
  const int64_t bytes = int64_t{s.batch} * s.seq * 3 * s.heads * s.head_dim * 2;
  void* again = device_->Grow(again_, bytes);
  if (again == nullptr) return false;
  std::string why;
  if (!cudnn_->Backward(s, qkv16, out16, dout16, lse, delta, again, workspace, &why)) {
    wrong_[s] = why;
    Own(why);
    return false;
  }
  std::vector<char> first(static_cast<size_t>(bytes)), second(static_cast<size_t>(bytes));
  device_->Download(dqkv16, bytes, first.data());
  device_->Download(again, bytes, second.data());
  if (!device_->ok()) return false;
  Release(again_);
  if (first == second) return true;
  wrong_[s] = "cuDNN " + cudnn_->version() + "'s backward gave other bits on a second run";
  Own(wrong_[s]);
  return false;
}

// Why cuDNN's graphs here do not suit the device ("" when they do): they
// are the front end's for Ampere and Hopper; on Blackwell its
// deterministic backward takes a fixed engine and knobs not built here.
std::string LibraryAttention::UnsuitedDevice() {
  int major = 0, minor = 0;
  if (!device_->ComputeCapability(&major, &minor)) return device_->error();
  if (major == 8 || major == 9) return "";
  return "compute capability " + std::to_string(major) + "." + std::to_string(minor) +
         ": its graphs here are for 8.x and 9.x";
}

bool LibraryAttention::Ready(const CudnnShape& s) {
  if (library_ == AttentionLibrary::kOwn) {
    Own("--attention=own");
    return false;
  }
  if (!tried_) {
    tried_ = true;
    unavailable_ = UnsuitedDevice();
    // cuDNN's handle belongs to the thread's current device.
    if (unavailable_.empty() &&
        device_->Check(cudaSetDevice(device_->device()), "cudaSetDevice")) {
      cudnn_ = CudnnAttention::Open(static_cast<void*>(device_->stream()), &unavailable_);
    }
    if (!device_->ok()) return false;
  }
  if (cudnn_ == nullptr) {
    Own("cuDNN: " + unavailable_);
    return false;
  }
  if (auto wrong = wrong_.find(s); wrong != wrong_.end()) {
    Own(wrong->second);
    return false;
  }
  if (std::string why; !cudnn_->Prepare(s, &why)) {
    Own(why);
    return false;
  }
  return true;
}

void* LibraryAttention::To16(const CudnnShape& s, const float* x, int64_t n, Scratch& into) {
  void* y = device_->Grow(into, n * 2);
  if (y == nullptr) return nullptr;
  const bool ok = s.bf16 ? device_->Launch("rounding to bf16", ToBf16Kernel, Blocks(n), kThreads,
                                           n, x, static_cast<__nv_bfloat16*>(y))
                         : device_->Launch("rounding to fp16", ToHalfKernel, Blocks(n), kThreads,
                                           n, x, static_cast<__half*>(y));
  return ok ? y : nullptr;
}

bool LibraryAttention::From16(const CudnnShape& s, const void* x, int64_t n, float* y) {
  return s.bf16 ? device_->Launch("widening bf16", FromBf16Kernel, Blocks(n), kThreads, n,
                                  static_cast<const __nv_bfloat16*>(x), y)
                : device_->Launch("widening fp16", FromHalfKernel, Blocks(n), kThreads, n,
                                  static_cast<const __half*>(x), y);
}

bool LibraryAttention::Agrees(const CudnnShape& s, const char* what, const float* got,
                              const float* want, int64_t n) {
  std::vector<float> g(static_cast<size_t>(n)), w(static_cast<size_t>(n));
  device_->Download(got, n * 4, g.data());
  device_->Download(want, n * 4, w.data());
  if (!device_->ok()) return false;
  double largest = 0, worst = 0;
  bool finite = true;
  for (int64_t i = 0; i < n; ++i) {
    finite = finite && std::isfinite(g[i]);
    largest = std::max(largest, std::fabs(static_cast<double>(w[i])));
    worst = std::max(worst, std::fabs(static_cast<double>(g[i]) - w[i]));
  }
  if (finite && worst <= kRelativeTolerance * largest + kAbsoluteTolerance) return true;
  wrong_[s] = "cuDNN " + cudnn_->version() + "'s " + what + " differs from the own kernels' by " +
              std::to_string(worst) + " (largest value " + std::to_string(largest) +
              (finite ? "" : ", not all finite") + ")";
  Own(wrong_[s]);
  return false;
}

void LibraryAttention::Release(Scratch& scratch) {
  if (scratch.p != nullptr) device_->Free(scratch.p);
  scratch = Scratch{};
}

bool LibraryAttention::Taken() {
  path_ = "cudnn " + cudnn_->version() + " fused flash attention (" + cudnn_->library() + ")";
  return true;
}

void LibraryAttention::Own(const std::string& why) {
  path_ = "own tensor-core kernels (" + why + ")";
}

}  // namespace kernels
}  // namespace pstrain
