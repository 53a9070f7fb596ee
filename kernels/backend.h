// The op interface a worker's model runs on. kernels/cpu/ implements it with
// OpenBLAS and plain loops, kernels/cuda/ with cuBLAS and CUDA kernels.
// Matrices are row-major fp32; every pointer an op takes is memory of the
// backend's device (from Alloc; host memory for the CPU backend).
//
// Errors are sticky, as in CUDA: the first one is kept in error() and the
// results of later calls are undefined, so callers check error() once per
// step. Nothing here exits the process.
#ifndef PSTRAIN_KERNELS_BACKEND_H_
#define PSTRAIN_KERNELS_BACKEND_H_

#include <unistd.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace pstrain {
namespace kernels {

// What a matrix product's inputs are rounded to (round to nearest even);
// products always accumulate and return fp32.
enum class Precision { kFp32, kBf16, kFp16 };

// Whose attention kernels run in 16-bit precision: a well-kept library's
// where the device has it (the CUDA backend: cuDNN's fused flash attention),
// else the backend's own (kAuto); or the backend's own always (kOwn).
enum class AttentionLibrary { kAuto, kOwn };

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;

  // `bytes` of device memory, or null (and error() says why).
  virtual void* Alloc(int64_t bytes) = 0;
  virtual void Free(void* device) = 0;
  // Returns once `host` may be reused, except from pinned memory (PinHost):
  // that copy is queued beside the computation (a copy engine runs it while
  // earlier work computes), so `host` must not change until a later
  // Download or SoftmaxXent returns or a WaitFor on a fence taken after the
  // Upload does, and work queued before the Upload must not use `device`.
  // Work queued after it sees it.
  virtual void Upload(const void* host, int64_t bytes, void* device) = 0;
  // Waits for the work queued before it.
  virtual void Download(const void* device, int64_t bytes, void* host) = 0;
  // Queues a copy to the host after the work queued so far; it has landed
  // once a fence taken after it is reached (WaitFor). Into memory that is
  // not pinned it may wait like Download.
  virtual void DownloadAsync(const void* device, int64_t bytes, void* host) = 0;
  // A mark after the work queued so far, and the wait for it: WaitFor(f)
  // returns once everything queued before Fence() returned f is done;
  // Reached(f) says whether it is, without waiting.
  virtual int64_t Fence() = 0;
  virtual void WaitFor(int64_t fence) = 0;
  virtual bool Reached(int64_t fence) = 0;
  // Page-locks host memory that is copied to and from the device often (a
  // model's weights and gradients): its copies then run at the bus's speed
  // and without the host waiting. False, and nothing changes, where the
  // device has no use for it or cannot. UnpinHost(host) before it is freed.
  virtual bool PinHost(void* host, int64_t bytes) = 0;
  virtual void UnpinHost(void* host) = 0;
  // The first error met, "" while there is none.
  virtual std::string error() const = 0;
  // The most device memory held at once through Alloc, in bytes.
  virtual int64_t peak_bytes() const = 0;
  // From now on Alloc refuses (null, and error() says so) what would take
  // the memory held through it past `bytes` (ps_worker
  // --device_memory_budget; 0: no limit but the device's).
  virtual void SetMemoryLimit(int64_t bytes) = 0;
  // What matrix products take as inputs from now on: Gemm's, and the
  // products inside Attention and AttentionBackward (q, k, v, the output's
  // gradient, and each tile's weights and score gradients rounded; the
  // softmax and its statistics stay fp32). False, with *why, when the device cannot compute in
  // `precision`.
  virtual bool SetPrecision(Precision precision, std::string* why) = 0;
  // Whether fp32 matrix products (Gemm in kFp32) may run on TF32 tensor
  // cores, their inputs rounded to 10-bit mantissas with fp32
  // accumulation, as PyTorch's torch.backends.cuda.matmul.allow_tf32 (off
  // by default there and here). The attention's products stay fp32. False,
  // with *why, where the device has no TF32.
  virtual bool AllowTf32(bool allow, std::string* why) {
    if (!allow) return true;
    *why = std::string("the ") + name() + " backend has no TF32 tensor cores";
    return false;
  }
  // Whose attention kernels run from now on (see AttentionLibrary).
  virtual void SetAttentionLibrary(AttentionLibrary library) { (void)library; }
  // The kernels the last Attention and AttentionBackward ran, and where a
  // library was asked for and not taken, why ("cudnn 9.19.0 fused flash
  // attention", "own tensor-core kernels (cuDNN: ...)"); "" before any.
  virtual std::string attention_path() const { return ""; }

  // An op's output arrays are distinct from its inputs unless it says one
  // may alias.

  // c[m,n] = alpha * op(a) * op(b) + beta * c, where op(a) is [m,k] (a is
  // stored [k,m] when trans_a) and op(b) is [k,n] (b stored [n,k] when trans_b).
  virtual void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                    const float* b, float beta, float* c) = 0;
  // y[r, j] += bias[j] for r < rows, j < cols.
  virtual void AddBias(int rows, int cols, const float* bias, float* y) = 0;
  // db[j] = sum over r of dy[r, j].
  virtual void BiasGrad(int rows, int cols, const float* dy, float* db) = 0;
  // y = max(x, 0), elementwise; y may alias x.
  virtual void ReluForward(int64_t n, const float* x, float* y) = 0;
  // dx = dy where y > 0, else 0; dx may alias dy.
  virtual void ReluBackward(int64_t n, const float* y, const float* dy, float* dx) = 0;
  // Softmax cross-entropy of `rows` rows of `classes` logits against integer
  // labels in [0, classes) (device memory, like the logits). Returns the mean
  // loss (waits for it); *correct counts rows whose arg-max is the label. If dlogits is not null it
  // receives the gradient of the mean loss: (softmax - onehot) / rows.
  virtual float SoftmaxXent(int rows, int classes, const float* logits, const int32_t* labels,
                            float* dlogits, int* correct) = 0;

  // ---- Transformer ops -------------------------------------------------

  // x *= alpha (n elements).
  virtual void Scale(int64_t n, float alpha, float* x) = 0;
  // y += alpha * x (n elements).
  virtual void Axpy(int64_t n, float alpha, const float* x, float* y) = 0;
  // out[r, :] (=, or += when accumulate) table[ids[r], :] for r < rows; ids
  // (device memory) index rows of table [*, dim] and must be in range.
  virtual void Embedding(int rows, int dim, const int32_t* ids, const float* table, float* out,
                         bool accumulate) = 0;
  // dtable[ids[r], :] += dout[r, :] (rows sharing an id add up).
  virtual void EmbeddingBackward(int rows, int dim, const int32_t* ids, const float* dout,
                                 float* dtable) = 0;
  // y = (x - mean) / sqrt(var + 1e-5) * gamma + beta per row of x [rows, dim];
  // saves each row's mean and 1/sqrt(var + 1e-5) for the backward.
  virtual void LayerNorm(int rows, int dim, const float* x, const float* gamma, const float* beta,
                         float* y, float* mean, float* rstd) = 0;
  // dx (written), dgamma and dbeta (written, summed over rows) from dy.
  virtual void LayerNormBackward(int rows, int dim, const float* x, const float* gamma,
                                 const float* mean, const float* rstd, const float* dy, float* dx,
                                 float* dgamma, float* dbeta) = 0;
  // GELU, tanh form: y = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
  virtual void Gelu(int64_t n, const float* x, float* y) = 0;
  // dx = dy * GELU'(x); dx may alias dy.
  virtual void GeluBackward(int64_t n, const float* x, const float* dy, float* dx) = 0;
  // Causal self-attention of `batch` sequences of `seq` tokens. qkv
  // [batch*seq, 3*heads*head_dim] holds each token's query, key and value
  // side by side (head h in columns h*head_dim.. of each); out
  // [batch*seq, heads*head_dim] receives softmax(q k^T / sqrt(head_dim)) v
  // with token t seeing tokens <= t, and lse [batch, heads, seq] each
  // query's log-sum-exp of its scaled scores, all the backward needs to
  // recompute the weights. No [seq, seq] array is written anywhere: the
  // scores are made a tile at a time and softmaxed online (flash attention),
  // so the memory an op takes grows with seq, not seq^2.
  virtual void Attention(int batch, int seq, int heads, int head_dim, const float* qkv, float* lse,
                         float* out) = 0;
  // dqkv (written) from dout, given the forward's qkv, out and lse; the
  // weights are recomputed tile by tile from q, k and lse.
  virtual void AttentionBackward(int batch, int seq, int heads, int head_dim, const float* qkv,
                                 const float* out, const float* lse, const float* dout,
                                 float* dqkv) = 0;
};

// n zeros in a host vector whose memory pages no other PinnableVector's data
// shares (its capacity runs two pages past its end), so that each is pinned
// and unpinned on its own: a device pins whole pages, and unpinning one
// vector must not unpin a page of another. It must not grow (that would
// move it).
inline std::vector<float> PinnableVector(int64_t n) {
  const int64_t kPadding = 2 * sysconf(_SC_PAGESIZE) / static_cast<int64_t>(sizeof(float));
  std::vector<float> v;
  v.reserve(static_cast<size_t>(n + kPadding));
  v.resize(static_cast<size_t>(n), 0.0f);
  return v;
}

}  // namespace kernels
}  // namespace pstrain

#endif  // PSTRAIN_KERNELS_BACKEND_H_
