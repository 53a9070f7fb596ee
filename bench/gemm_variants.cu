// See gemm_variants.h.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "bench/gemm_variants.h"

namespace pstrain {
namespace {

__global__ void FillKernel(int64_t n, float* x) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    x[i] = static_cast<float>((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
  }
}

template <typename T>
__global__ void RoundKernel(int64_t n, const float* x, T* y) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      y[i] = __float2bfloat16_rn(x[i]);
    } else {
      y[i] = __float2half_rn(x[i]);
    }
  }
}

int Blocks(int64_t n) { return static_cast<int>(std::min<int64_t>((n + 255) / 256, 65536)); }

// Device buffers of one shape, freed with it.
struct Buffers {
  float *a = nullptr, *b = nullptr, *c = nullptr;
  void *a16 = nullptr, *b16 = nullptr, *c16 = nullptr;
  bool ok = true;
  Buffers(int64_t na, int64_t nb, int64_t nc) {
    ok = cudaMalloc(&a, na * 4) == cudaSuccess && cudaMalloc(&b, nb * 4) == cudaSuccess &&
         cudaMalloc(&c, nc * 4) == cudaSuccess && cudaMalloc(&a16, na * 2) == cudaSuccess &&
         cudaMalloc(&b16, nb * 2) == cudaSuccess && cudaMalloc(&c16, nc * 2) == cudaSuccess;
  }
  ~Buffers() {
    for (void* p : {static_cast<void*>(a), static_cast<void*>(b), static_cast<void*>(c), a16,
                    b16, c16}) {
      if (p != nullptr) cudaFree(p);
    }
  }
};

// `op` timed with CUDA events, `reps` runs after 2 warm-ups, into *row.
void Time(const std::function<cublasStatus_t()>& op, int reps, cudaStream_t stream, int m, int n,
          int k, GemmVariantTime* row) {
  cudaEvent_t start = nullptr, stop = nullptr;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cublasStatus_t s = CUBLAS_STATUS_SUCCESS;
  for (int i = 0; i < 2 && s == CUBLAS_STATUS_SUCCESS; ++i) s = op();
  std::vector<float> ms;
  for (int i = 0; i < reps && s == CUBLAS_STATUS_SUCCESS; ++i) {
    cudaEventRecord(start, stream);
    s = op();
    cudaEventRecord(stop, stream);
    cudaEventSynchronize(stop);
    float elapsed = 0;
    cudaEventElapsedTime(&elapsed, start, stop);
    ms.push_back(elapsed);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) {
    row->error = cudaGetErrorString(e);
  } else if (s != CUBLAS_STATUS_SUCCESS || ms.empty()) {
    row->error = "cuBLAS refused it (status " + std::to_string(static_cast<int>(s)) + ")";
  } else {
    std::sort(ms.begin(), ms.end());
    row->ms = ms[ms.size() / 2];
    row->tflops = 2.0 * m * n * k / row->ms / 1e9;
  }
}

}  // namespace

std::vector<GemmVariantTime> TimeGemmVariants(int device, int m, int n, int k, bool bf16,
                                              int reps) {
  const char* names[] = {"fp32", "tf32", "round+16", "16-in-16-out", "fast-16"};
  std::vector<GemmVariantTime> rows;
  for (const char* name : names) rows.push_back({name});
  auto fail = [&rows](const std::string& why) {
    for (GemmVariantTime& r : rows) r.error = why;
    return rows;
  };
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess) return fail(cudaGetErrorString(e));
  cublasHandle_t blas = nullptr;
  if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS) return fail("cublasCreate failed");
  cudaStream_t stream = nullptr;
  cudaStreamCreate(&stream);
  cublasSetStream(blas, stream);
  const int64_t na = int64_t{m} * k, nb = int64_t{k} * n, nc = int64_t{m} * n;
  {
    Buffers buf(na, nb, nc);
    if (!buf.ok) {
      rows = fail("cudaMalloc failed");
    } else {
      FillKernel<<<Blocks(na), 256, 0, stream>>>(na, buf.a);
      FillKernel<<<Blocks(nb), 256, 0, stream>>>(nb, buf.b);
      const cudaDataType t16 = bf16 ? CUDA_R_16BF : CUDA_R_16F;
      const float one = 1, zero = 0;
      auto round = [&](const float* x, int64_t count, void* y) {
        if (bf16) {
          RoundKernel<<<Blocks(count), 256, 0, stream>>>(count, x,
                                                         static_cast<__nv_bfloat16*>(y));
        } else {
          RoundKernel<<<Blocks(count), 256, 0, stream>>>(count, x, static_cast<__half*>(y));
        }
      };
      // Row-major C = A B is column-major C^T = B^T A^T.
      auto ex = [&](const void* b, cudaDataType tb, const void* a, cudaDataType ta, void* c,
                    cudaDataType tc, cublasComputeType_t compute) {
        return cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, b, tb, n, a, ta, k,
                            &zero, c, tc, n, compute, CUBLAS_GEMM_DEFAULT);
      };
      const std::function<cublasStatus_t()> ops[] = {
          [&] {
            cublasSetMathMode(blas, CUBLAS_DEFAULT_MATH);
            return cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, buf.b, n, buf.a, k,
                               &zero, buf.c, n);
          },
          [&] {
            cublasSetMathMode(blas, CUBLAS_TF32_TENSOR_OP_MATH);
            const cublasStatus_t s = cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one,
                                                 buf.b, n, buf.a, k, &zero, buf.c, n);
            cublasSetMathMode(blas, CUBLAS_DEFAULT_MATH);
            return s;
          },
          [&] {
            round(buf.a, na, buf.a16);
            round(buf.b, nb, buf.b16);
            return ex(buf.b16, t16, buf.a16, t16, buf.c, CUDA_R_32F, CUBLAS_COMPUTE_32F);
          },
          [&] { return ex(buf.b16, t16, buf.a16, t16, buf.c16, t16, CUBLAS_COMPUTE_32F); },
          [&] {
            return ex(buf.b, CUDA_R_32F, buf.a, CUDA_R_32F, buf.c, CUDA_R_32F,
                      bf16 ? CUBLAS_COMPUTE_32F_FAST_16BF : CUBLAS_COMPUTE_32F_FAST_16F);
          },
      };
      // 16-in-16-out reads operands already 16-bit.
      round(buf.a, na, buf.a16);
      round(buf.b, nb, buf.b16);
      for (size_t v = 0; v < rows.size(); ++v) Time(ops[v], reps, stream, m, n, k, &rows[v]);
    }
  }
  cudaStreamDestroy(stream);
  cublasDestroy(blas);
  return rows;
}

}  // namespace pstrain
