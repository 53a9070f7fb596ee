// Causal self-attention in bf16 or fp16 through cuDNN's fused flash
// attention (the backend graph API of cuDNN 9, what PyTorch's SDPA itself
// dispatches to on Hopper), forward and a deterministic backward, with the
// contract of Backend::Attention (kernels/backend.h): the forward saves each
// query's log-sum-exp of its scaled scores, the backward recomputes the
// weights from it, so neither keeps a [seq, seq] array between the two.
//
// libcudnn.so.9 is loaded at run time (cudnn_backend_api.h: dlopen, found
// as the CUDA libraries are: the bundle's lib/, $LD_LIBRARY_PATH, the
// toolkit's lib64), so a build or a machine without it still runs: Open
// says why not, and the backend keeps its own kernels. Each shape's two graphs are built once and
// their execution plans kept; a shape cuDNN refuses says why, once.
//
// The operands are 16-bit arrays in the backend's layout: qkv [batch*seq,
// 3*heads*head_dim] (each token's query, key and value side by side, head h
// at h*head_dim of each), out and dout [batch*seq, heads*head_dim], lse and
// delta [batch, heads, seq] fp32. Host code; its .cc is built against
// cuDNN's headers, this header needs none.
#ifndef PSTRAIN_KERNELS_CUDA_CUDNN_ATTENTION_H_
#define PSTRAIN_KERNELS_CUDA_CUDNN_ATTENTION_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>

namespace pstrain {
namespace kernels {

struct CudnnApi;

struct CudnnShape {
  int batch = 0, seq = 0, heads = 0, head_dim = 0;
  bool bf16 = true;  // else fp16
  auto key() const { return std::make_tuple(batch, seq, heads, head_dim, bf16); }
  bool operator<(const CudnnShape& o) const { return key() < o.key(); }
};

class CudnnAttention {
 public:
  // cuDNN loaded, version 9 or later, with a handle whose work goes on
  // `stream` (a cudaStream_t); null and *why otherwise.
  static std::unique_ptr<CudnnAttention> Open(void* stream, std::string* why);
  ~CudnnAttention();
  // Describes the shape's two graphs to cuDNN, every tensor and operation
  // (not their plans, which need a device): a check that runs without a
  // GPU. False and *why when cuDNN is missing or refuses a descriptor.
  static bool Describe(const CudnnShape& s, std::string* why);
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // The library's version, "9.19.0", and where it was loaded from.
  const std::string& version() const { return version_; }
  const std::string& library() const { return library_; }

  // Builds the shape's forward and backward plans (once; later calls
  // answer from the cache). False, and *why, when cuDNN refuses the shape:
  // the caller computes it another way.
  bool Prepare(const CudnnShape& s, std::string* why);
  // Device workspace the shape's plans need (Prepare first), in bytes.
  int64_t WorkspaceBytes(const CudnnShape& s) const;

  // Queue the forward, and the backward (`delta`: batch*heads*seq floats of
  // scratch it writes dout . out into), on the stream; `workspace` holds
  // WorkspaceBytes. False and *why when cuDNN failed (the shape must have
  // been prepared).
  bool Forward(const CudnnShape& s, const void* qkv, void* out, float* lse, void* workspace,
               std::string* why);
  bool Backward(const CudnnShape& s, const void* qkv, const void* out, const void* dout,
                const float* lse, float* delta, void* dqkv, void* workspace, std::string* why);

 private:
  struct Plans;  // a shape's forward and backward plans
  // The shape's plans, or null and *why when it was not prepared.
  Plans* Prepared(const CudnnShape& s, std::string* why);
  CudnnAttention(std::unique_ptr<CudnnApi> api, void* handle, std::string version,
                 std::string library);

  std::unique_ptr<CudnnApi> api_;  // cudnn_backend_api.h
  void* handle_;  // cudnnHandle_t
  std::string version_, library_;
  std::map<CudnnShape, std::unique_ptr<Plans>> plans_;
  std::map<CudnnShape, std::string> refused_;
};

}  // namespace kernels
}  // namespace pstrain

#endif  // PSTRAIN_KERNELS_CUDA_CUDNN_ATTENTION_H_
