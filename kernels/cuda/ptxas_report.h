// ptxas's report of the attention kernels (-Xptxas -v for sm_90, made at
// build time by kernels/BUILD.bazel's cuda_ptxas_report): per kernel its
// "Compiling entry function '<mangled name>'" line, then the stack and
// spill line when it has one, then "Used N registers, ... smem". Empty in
// a build without CUDA.
#ifndef PSTRAIN_KERNELS_CUDA_PTXAS_REPORT_H_
#define PSTRAIN_KERNELS_CUDA_PTXAS_REPORT_H_

extern const char kPtxasReport[];

#endif  // PSTRAIN_KERNELS_CUDA_PTXAS_REPORT_H_
