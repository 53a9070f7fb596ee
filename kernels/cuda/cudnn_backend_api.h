// A thin C++ layer over cuDNN 9's backend graph API (cudnn_graph.h), with
// the library loaded at run time (dlopen): its entry points (CudnnApi,
// LoadCudnn), a descriptor that destroys itself (CudnnDesc), an operation
// graph built op by op that keeps the first error (CudnnGraph), its
// execution plan (CudnnPlan: the first engine configuration the
// heuristics offer that finalizes) and a plan's execution over a variant
// pack (CudnnExecute). What is built with it: cudnn_attention.h. Needs the
// toolkit's include path (nvcc's).
#ifndef PSTRAIN_KERNELS_CUDA_CUDNN_BACKEND_API_H_
#define PSTRAIN_KERNELS_CUDA_CUDNN_BACKEND_API_H_

#include <cudnn_graph.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace pstrain {
namespace kernels {

// The library's entry points, looked up once.
struct CudnnApi {
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

  ~CudnnApi();

  // What went wrong in `what`: cuDNN's name for the status and its last
  // message.
  std::string Why(const char* what, cudnnStatus_t s) const;
};

// libcudnn.so.9 and its entry points, its version ("9.19.0") and file;
// null and *why when missing or older than 9.0.
std::unique_ptr<CudnnApi> LoadCudnn(std::string* version, std::string* library, std::string* why);

// One backend descriptor, destroyed with its owner.
class CudnnDesc {
 public:
  CudnnDesc(const CudnnApi* api, cudnnBackendDescriptorType_t type, std::string* error)
      : api_(api) {
    const cudnnStatus_t s = api->CreateDescriptor(type, &d_);
    if (s != CUDNN_STATUS_SUCCESS) {
      if (error->empty()) *error = api->Why("cudnnBackendCreateDescriptor", s);
      d_ = nullptr;
    }
  }
  ~CudnnDesc() {
    if (d_ != nullptr) api_->DestroyDescriptor(d_);
  }
  CudnnDesc(const CudnnDesc&) = delete;
  CudnnDesc& operator=(const CudnnDesc&) = delete;
  cudnnBackendDescriptor_t get() const { return d_; }
  cudnnBackendDescriptor_t* address() { return &d_; }

 private:
  const CudnnApi* api_;
  cudnnBackendDescriptor_t d_ = nullptr;
};

using CudnnDims = std::vector<int64_t>;

// An execution plan and the descriptors it was made from.
struct CudnnPlan {
  std::vector<std::unique_ptr<CudnnDesc>> keep;
  std::unique_ptr<CudnnDesc> plan;
  int64_t workspace = 0;
  bool noted_nondeterministic = false;  // its engine carries that note
};

// Builds one operation graph descriptor by descriptor, keeping each one
// alive (the plan refers to them), and the first error: later calls do
// nothing once one failed.
class CudnnGraph {
 public:
  // Ids the caller's tensors may take (virtual ones are numbered past).
  static constexpr int64_t kFirstVirtualUid = 100;

  CudnnGraph(const CudnnApi* api, cudnnHandle_t handle, cudnnDataType_t io)
      : api_(api), handle_(handle), io_(io) {}

  const std::string& error() const { return error_; }
  cudnnDataType_t io() const { return io_; }  // the 16-bit type of the operands

  // A tensor the caller's memory backs (`uid` in the variant pack).
  cudnnBackendDescriptor_t Tensor(int64_t uid, cudnnDataType_t type, const CudnnDims& dims,
                                  const CudnnDims& strides);
  // A scalar passed by value (a host float in the variant pack).
  cudnnBackendDescriptor_t Scalar(int64_t uid);
  // An intermediate that never reaches memory (fp32 unless said).
  cudnnBackendDescriptor_t Virtual(const CudnnDims& dims, const CudnnDims& strides,
                                   cudnnDataType_t type = CUDNN_DATA_FLOAT);

  // y = mode(x[, b[, t]]), computed in `math` (GEN_INDEX: along `axis`).
  void Pointwise(cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                 cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y,
                 cudnnDataType_t math = CUDNN_DATA_FLOAT, int64_t axis = -1);
  // y = reduce(x) over the dimensions where y has extent 1.
  void Reduction(cudnnReduceTensorOp_t reduce, cudnnBackendDescriptor_t x,
                 cudnnBackendDescriptor_t y);
  // c = a b, batched over the leading dimensions, fp32 accumulation.
  void Matmul(cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c);
  // y: x under other strides (a transpose).
  void Reshape(cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y);

  // The graph's execution plan: the first configuration that finalizes,
  // heuristics A's before the fallback list's and, in each, those without
  // a non-determinism note first (a graph may be deterministic by its form
  // on an engine that carries the note; the caller checks the bits). Null
  // and error() when none does.
  std::unique_ptr<CudnnPlan> Build();

 private:
  CudnnDesc* New(cudnnBackendDescriptorType_t type);
  void Set(CudnnDesc* d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
           int64_t count, const void* value);
  void SetDesc(CudnnDesc* d, cudnnBackendAttributeName_t name, cudnnBackendDescriptor_t value);
  void Finalize(CudnnDesc* d, const char* what);
  void AddOp(CudnnDesc* op, const char* what);
  cudnnBackendDescriptor_t MakeTensor(int64_t uid, cudnnDataType_t type, const CudnnDims& dims,
                                      const CudnnDims& strides, bool is_virtual, bool by_value);

  const CudnnApi* api_;
  cudnnHandle_t handle_;
  cudnnDataType_t io_;
  std::string error_;
  std::vector<std::unique_ptr<CudnnDesc>> keep_;
  std::vector<cudnnBackendDescriptor_t> ops_;
  int64_t next_virtual_ = kFirstVirtualUid;
};

// Runs `plan` with the variant pack of `uids` and `pointers`.
bool CudnnExecute(const CudnnApi* api, cudnnHandle_t handle, const CudnnPlan& plan,
             const std::vector<int64_t>& uids, const std::vector<void*>& pointers,
             void* workspace, std::string* why);

}  // namespace kernels
}  // namespace pstrain

#endif  // PSTRAIN_KERNELS_CUDA_CUDNN_BACKEND_API_H_
