// The CUDA backend's 16-bit attention through cuDNN (cudnn_attention.h):
// where the library loads and takes the shape, Attention and
// AttentionBackward round their fp32 operands to 16 bits once, run cuDNN's
// fused kernels and widen the results back; the first forward and
// backward of each shape also run the backend's own kernels and compare
// (a library whose graphs compute something else is caught before it
// trains anything). Where cuDNN is missing, refuses the shape or differs,
// the calls answer false and the backend runs its own kernels; path() says
// which ran and why. The first backward of a shape also runs twice: bits
// that differ put the shape on the own kernels too (the job's bits must
// not depend on the run). nvcc only.
#ifndef PSTRAIN_KERNELS_CUDA_LIBRARY_ATTENTION_CUH_
#define PSTRAIN_KERNELS_CUDA_LIBRARY_ATTENTION_CUH_

#include <map>
#include <memory>
#include <set>
#include <string>

#include "kernels/backend.h"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/cudnn_attention.h"
#include "kernels/cuda/device.cuh"

namespace pstrain {
namespace kernels {

class LibraryAttention {
 public:
  explicit LibraryAttention(CudaDevice* device) : device_(device) {}

  void set_library(AttentionLibrary library) { library_ = library; }
  // The kernels the last call ran (Backend::attention_path).
  const std::string& path() const { return path_; }

  // Whether cuDNN computed the op (a.round is 1 or 2); false: the caller
  // runs its own kernels (path() says why), or the device failed (its
  // error is kept).
  bool Forward(const AttentionArgs& a, const float* qkv, float* lse, float* out);
  bool Backward(const AttentionArgs& a, const float* qkv, const float* out, const float* lse,
                const float* dout, float* dqkv);

 private:
  using Scratch = CudaDevice::Scratch;

  // cuDNN opened (once) and the shape prepared and not found wrong; else
  // path_ says why not.
  bool Ready(const CudnnShape& s);
  // x [n] fp32 rounded to the shape's 16 bits into scratch (null on error).
  void* To16(const CudnnShape& s, const float* x, int64_t n, Scratch& into);
  bool From16(const CudnnShape& s, const void* x, int64_t n, float* y);
  // Compares cuDNN's `got` with the own kernels' `want` (n floats on the
  // device): false, the shape marked wrong and path_ saying by how much,
  // when they differ past 16-bit rounding.
  bool Agrees(const CudnnShape& s, const char* what, const float* got, const float* want,
              int64_t n);
  // The shape's backward run again into scratch: true when its bits are
  // dqkv16's; else the shape is marked wrong.
  bool Reproducible(const CudnnShape& s, const void* qkv16, const void* out16,
                    const void* dout16, const float* lse, float* delta, const void* dqkv16,
                    void* workspace);
  std::string UnsuitedDevice();
  // The check's scratch given back: it is used once per shape.
  void Release(Scratch& scratch);
  // path_ says cuDNN ran the call (true), or the own kernels and why.
  bool Taken();
  void Own(const std::string& why);

  CudaDevice* const device_;
  AttentionLibrary library_ = AttentionLibrary::kAuto;
  std::unique_ptr<CudnnAttention> cudnn_;
  std::string unavailable_;  // why cuDNN did not open ("" until tried or when open)
  bool tried_ = false;
  std::set<CudnnShape> forward_checked_, backward_checked_;
  std::map<CudnnShape, std::string> wrong_;
  std::string path_;
  Scratch qkv16_, out16_, dout16_, dqkv16_, workspace_, delta_, check_, again_;
};

}  // namespace kernels
}  // namespace pstrain

#endif  // PSTRAIN_KERNELS_CUDA_LIBRARY_ATTENTION_CUH_
