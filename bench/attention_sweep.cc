// attention_sweep: every attention variant the CUDA backend holds, in one
// run, so that one call on a GPU measures them all and the table picks:
// cuDNN's fused kernels and the own tensor-core kernels in bf16 and fp16,
// and the own fp32 kernels, at the GPT shapes and heads of 32, 64 and 128.
// Each variant is first checked against the definition
// (kernels/cpu/reference_attention.h, on the CPU) on fresh random inputs
// of a small shape, then timed at the full shape (forward, and forward +
// backward; the device synchronised around --reps repetitions) next to a
// cuBLAS GEMM of the same size through the same backend: [batch*seq,
// heads*head_dim] x [heads*head_dim, seq], which has the causal forward's
// flops (the backward has 2.5 times them). ptxas's report of the kernels
// (registers, spills; made at build time with -Xptxas -v) comes with it,
// and a variant whose own kernels spill says so. Then the GPTs' dense
// products in each way a step could take them (bench/gemm_variants.h: fp32,
// TF32, rounded then 16-bit, 16-bit in and out, cuBLAS's own
// down-conversion), timed with CUDA events: what 16-bit activations would
// gain. Prints JSON, and the tables on stderr.
//
//   attention_sweep [--device=cuda] [--shapes=16:256:6:64,8:1024:12:64]
//                   [--variants=cudnn-bf16,own-bf16,...] [--gemm=384:4096]
//                   [--reps=10]
#include <cxxabi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/gemm_variants.h"
#include "common/logging.h"
#include "kernels/backend.h"
#include "kernels/cpu/reference_attention.h"
#include "kernels/cuda/ptxas_report.h"
#include "kernels/device_array.h"
#include "worker/device.h"

ABSL_FLAG(std::string, device, "cuda", "auto, cpu, cuda or cuda:N");
ABSL_FLAG(std::string, shapes, "16:256:6:64,8:1024:12:64,8:1024:24:32,8:1024:6:128",
          "batch:seq:heads:head_dim of each timed shape (the first two: bench/gpu_proof.sh's "
          "small and large GPT)");
ABSL_FLAG(std::string, variants, "cudnn-bf16,own-bf16,cudnn-fp16,own-fp16,own-fp32",
          "LIBRARY-DTYPE: cudnn (the backend's choice, cuDNN where it takes the shape) or own");
ABSL_FLAG(std::string, gemm, "384:4096,768:8192",
          "width:rows of the GPTs whose dense products are timed in each variant "
          "(bench/gemm_variants.h; the defaults: gpu_proof's small and large GPT); '' for none");
ABSL_FLAG(int, reps, 10, "timed repetitions per measurement (after 2 warm-ups)");

namespace pstrain {
namespace {

using kernels::AttentionLibrary;
using kernels::Backend;
using kernels::DeviceArray;
using kernels::Precision;

struct Shape {
  int batch, seq, heads, head_dim;
};
struct Variant {
  std::string name;
  AttentionLibrary library;
  Precision precision;
};

std::vector<float> Random(size_t n, std::mt19937& rng, float scale) {
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

DeviceArray<float> Up(Backend* b, const std::vector<float>& host) {
  DeviceArray<float> d(b, static_cast<int64_t>(host.size()));
  d.Upload(host.data());
  return d;
}

std::vector<float> Down(const DeviceArray<float>& d) {
  std::vector<float> host(d.size());
  d.Download(host.data());
  return host;
}

// The largest |got - want| over the largest |want|.
double RelativeError(const std::vector<float>& got, const std::vector<float>& want) {
  double largest = 0, worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    largest = std::max(largest, std::fabs(static_cast<double>(want[i])));
    const double d = std::fabs(static_cast<double>(got[i]) - want[i]);
    worst = std::isfinite(d) ? std::max(worst, d) : INFINITY;
  }
  return largest > 0 ? worst / largest : worst;
}

// The variant on fresh random inputs of a small shape with `s`'s head size,
// against the definition: the worst relative error of out and dqkv, and
// whether it is within twice the precision's unit roundoff (as
// kernels/cuda_backend_test asks).
struct Check {
  double out_error = 0, dqkv_error = 0;
  bool ok = false;
};
Check CheckAgainstReference(Backend* b, const Variant& v, const Shape& full, uint32_t seed) {
  const Shape s{2, std::min(full.seq, 192), 2, full.head_dim};
  std::mt19937 rng(seed);
  const int c = s.heads * s.head_dim;
  const std::vector<float> qkv = Random(static_cast<size_t>(s.batch) * s.seq * 3 * c, rng, 2.0f);
  const std::vector<float> dout = Random(static_cast<size_t>(s.batch) * s.seq * c, rng, 1.0f);
  std::vector<float> lse(static_cast<size_t>(s.batch) * s.heads * s.seq), out(dout.size()),
      dqkv(qkv.size());
  kernels::ReferenceAttention(v.precision, s.batch, s.seq, s.heads, s.head_dim, qkv.data(),
                              lse.data(), out.data());
  kernels::ReferenceAttentionBackward(v.precision, s.batch, s.seq, s.heads, s.head_dim,
                                      qkv.data(), dout.data(), dqkv.data());
  DeviceArray<float> gqkv = Up(b, qkv), gdout = Up(b, dout), glse(b, lse.size()),
                     gout(b, out.size()), gdqkv(b, dqkv.size());
  b->Attention(s.batch, s.seq, s.heads, s.head_dim, gqkv.data(), glse.data(), gout.data());
  b->AttentionBackward(s.batch, s.seq, s.heads, s.head_dim, gqkv.data(), gout.data(),
                       glse.data(), gdout.data(), gdqkv.data());
  Check check;
  check.out_error = RelativeError(Down(gout), out);
  check.dqkv_error = RelativeError(Down(gdqkv), dqkv);
  const double allowed = v.precision == Precision::kBf16   ? 2.0 / 256
                         : v.precision == Precision::kFp16 ? 2.0 / 2048
                                                           : 1e-5;
  check.ok = b->error().empty() && check.out_error <= allowed && check.dqkv_error <= allowed;
  return check;
}

// The median milliseconds of `op` over --reps runs, the device waited for
// around each.
template <typename Op>
double MedianMs(Backend* b, Op op) {
  for (int i = 0; i < 2; ++i) op();
  b->WaitFor(b->Fence());
  std::vector<double> ms;
  for (int i = 0; i < absl::GetFlag(FLAGS_reps); ++i) {
    const auto start = std::chrono::steady_clock::now();
    op();
    b->WaitFor(b->Fence());
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                           start)
                     .count());
  }
  std::sort(ms.begin(), ms.end());
  return ms.empty() ? 0 : ms[ms.size() / 2];
}

// ptxas's kernels whose names hold `file` and the template argument kD =
// `tile` that spill: "name: N bytes" each.
std::vector<std::string> Spills(const std::string& file, int tile) {
  std::vector<std::string> out;
  std::istringstream report(kPtxasReport);
  std::string line, kernel;
  const std::string tag = absl::StrCat("ILi", tile, "E");
  for (std::getline(report, line); report; std::getline(report, line)) {
    if (const size_t at = line.find("Compiling entry function '"); at != std::string::npos) {
      const size_t begin = at + 26, end = line.find('\'', begin);
      kernel = line.substr(begin, end - begin);
      continue;
    }
    const size_t spill = line.find(" bytes spill stores");
    if (spill == std::string::npos || kernel.find(file) == std::string::npos ||
        kernel.find(tag) == std::string::npos) {
      continue;
    }
    const size_t comma = line.rfind(',', spill);
    int64_t bytes = 0;
    (void)absl::SimpleAtoi(line.substr(comma + 1, spill - comma - 1), &bytes);
    if (bytes <= 0) continue;
    int status = 0;
    char* readable = abi::__cxa_demangle(kernel.c_str(), nullptr, nullptr, &status);
    std::string name = status == 0 && readable != nullptr ? readable : kernel;
    std::free(readable);
    for (const std::string cut : {"(anonymous namespace)::", "pstrain::kernels::", "void "}) {
      if (const size_t at = name.find(cut); at != std::string::npos) name.erase(at, cut.size());
    }
    if (const size_t paren = name.find('('); paren != std::string::npos) name.resize(paren);
    out.push_back(absl::StrCat(name, ": ", bytes, " bytes"));
  }
  return out;
}

// One row: the variant at shape `s` (a fresh backend, so that nothing is
// shared between variants).
std::string Row(const Variant& v, const Shape& s, uint32_t seed, std::string* table) {
  std::string note;
  auto opened = OpenDevice(absl::GetFlag(FLAGS_device), 1, &note);
  if (!opened.ok()) return absl::StrFormat("{\"error\": \"%s\"}", opened.status().message());
  Backend* b = opened->get();
  std::string why;
  auto head = absl::StrFormat(
      "{\"variant\": \"%s\", \"batch\": %d, \"seq\": %d, \"heads\": %d, \"head_dim\": %d",
      v.name, s.batch, s.seq, s.heads, s.head_dim);
  if (!b->SetPrecision(v.precision, &why)) {
    return absl::StrCat(head, ", \"skipped\": \"", absl::CEscape(why), "\"}");
  }
  b->SetAttentionLibrary(v.library);
  const Check check = CheckAgainstReference(b, v, s, seed);
  const std::string checked_path = b->attention_path();
  std::mt19937 rng(seed + 1);
  const int64_t c = static_cast<int64_t>(s.heads) * s.head_dim, rows = int64_t{s.batch} * s.seq;
  DeviceArray<float> qkv = Up(b, Random(rows * 3 * c, rng, 2.0f));
  DeviceArray<float> dout = Up(b, Random(rows * c, rng, 1.0f));
  DeviceArray<float> lse(b, rows * s.heads), out(b, rows * c), dqkv(b, rows * 3 * c);
  auto forward = [&] {
    b->Attention(s.batch, s.seq, s.heads, s.head_dim, qkv.data(), lse.data(), out.data());
  };
  const double forward_ms = MedianMs(b, forward);
  const double step_ms = MedianMs(b, [&] {
    forward();
    b->AttentionBackward(s.batch, s.seq, s.heads, s.head_dim, qkv.data(), out.data(), lse.data(),
                         dout.data(), dqkv.data());
  });
  const std::string path = b->attention_path();
  // The GEMM of the forward's causal flops: [rows, c] x [c, seq].
  DeviceArray<float> a = Up(b, std::vector<float>(rows * c, 0.5f));
  DeviceArray<float> bt = Up(b, std::vector<float>(int64_t{s.seq} * c, 0.5f));
  DeviceArray<float> product(b, rows * s.seq);
  const double gemm_ms = MedianMs(b, [&] {
    b->Gemm(false, true, static_cast<int>(rows), s.seq, static_cast<int>(c), 1.0f, a.data(),
            bt.data(), 0.0f, product.data());
  });
  const double forward_flops = 2.0 * rows * s.seq * c;  // 2 products over half the scores
  const bool own = path.rfind("own", 0) == 0 && std::string(b->name()) == "cuda";
  const int tile = s.head_dim <= 32 ? 32 : s.head_dim <= 64 ? 64 : 128;
  const std::vector<std::string> spills =
      own ? Spills(v.precision == Precision::kFp32 ? "attention_cu" : "attention_mma_cu", tile)
          : std::vector<std::string>{};
  *table += absl::StrFormat(
      "%-11s %2d x %4d, %2d x %3d  %-5s fwd %8.3f ms  fwd+bwd %8.3f ms  %6.1f TFLOP/s  "
      "gemm %7.3f ms (%5.1f)  err %.1e/%.1e%s  %s\n",
      v.name, s.batch, s.seq, s.heads, s.head_dim, check.ok ? "ok" : "WRONG", forward_ms, step_ms,
      3.5 * forward_flops / step_ms / 1e9, gemm_ms, forward_flops / gemm_ms / 1e9,
      check.out_error, check.dqkv_error, spills.empty() ? "" : "  SPILLS", path.substr(0, 60));
  return absl::StrFormat(
      "%s, \"checked\": %s, \"out_error\": %.3g, \"dqkv_error\": %.3g, \"forward_ms\": %.3f, "
      "\"forward_backward_ms\": %.3f, \"tflops\": %.2f, \"gemm_ms\": %.3f, \"gemm_tflops\": %.2f, "
      "\"forward_over_gemm\": %.3f, \"spills\": [%s], \"attention_path\": \"%s\", "
      "\"checked_on\": \"%s\", \"error\": \"%s\"}",
      head, check.ok ? "true" : "false", check.out_error, check.dqkv_error, forward_ms, step_ms,
      3.5 * forward_flops / step_ms / 1e9, gemm_ms, forward_flops / gemm_ms / 1e9,
      gemm_ms > 0 ? forward_ms / gemm_ms : 0,
      spills.empty() ? "" : absl::StrCat("\"", absl::StrJoin(spills, "\", \""), "\""),
      absl::CEscape(path), absl::CEscape(checked_path), absl::CEscape(b->error()));
}

// The dense products of a GPT of width c over `rows` tokens (the forward's
// qkv, proj, fc, mlp_proj and head) in every variant, bf16 and fp16, on
// CUDA device `device`: JSON rows, and the table on stderr.
std::vector<std::string> GemmRows(int device, int c, int rows) {
  struct Product {
    const char* name;
    int n, k;
  };
  const Product products[] = {
      {"qkv", 3 * c, c}, {"proj", c, c}, {"fc", 4 * c, c}, {"mlp_proj", c, 4 * c}, {"head", 256, c}};
  std::vector<std::string> out;
  for (const bool bf16 : {true, false}) {
    for (const Product& p : products) {
      std::string line = absl::StrFormat("gemm %-8s %5d x %5d x %5d %s:", p.name, rows, p.n, p.k,
                                         bf16 ? "bf16" : "fp16");
      for (const GemmVariantTime& t :
           TimeGemmVariants(device, rows, p.n, p.k, bf16, absl::GetFlag(FLAGS_reps))) {
        line += t.error.empty() ? absl::StrFormat("  %s %.3f ms", t.variant, t.ms)
                                : absl::StrFormat("  %s -", t.variant);
        out.push_back(absl::StrFormat(
            "{\"product\": \"%s\", \"m\": %d, \"n\": %d, \"k\": %d, \"dtype\": \"%s\", "
            "\"variant\": \"%s\", \"ms\": %.4f, \"tflops\": %.2f, \"error\": \"%s\"}",
            p.name, rows, p.n, p.k, bf16 ? "bf16" : "fp16", t.variant, t.ms, t.tflops,
            absl::CEscape(t.error)));
      }
      std::fprintf(stderr, "%s\n", line.c_str());
    }
  }
  return out;
}

int Run() {
  std::vector<Shape> shapes;
  const std::vector<std::string> shape_texts = absl::StrSplit(absl::GetFlag(FLAGS_shapes), ',');
  for (const std::string& text : shape_texts) {
    std::vector<std::string> f = absl::StrSplit(text, ':');
    Shape s{};
    if (f.size() != 4 || !absl::SimpleAtoi(f[0], &s.batch) || !absl::SimpleAtoi(f[1], &s.seq) ||
        !absl::SimpleAtoi(f[2], &s.heads) || !absl::SimpleAtoi(f[3], &s.head_dim) ||
        s.batch <= 0 || s.seq <= 0 || s.heads <= 0 || s.head_dim <= 0) {
      std::fprintf(stderr, "attention_sweep: --shapes: '%s' is not batch:seq:heads:head_dim\n",
                   text.c_str());
      return 2;
    }
    shapes.push_back(s);
  }
  std::vector<Variant> variants;
  const std::vector<std::string> names = absl::StrSplit(absl::GetFlag(FLAGS_variants), ',');
  for (const std::string& name : names) {
    const std::vector<std::string> f = absl::StrSplit(name, '-');
    const bool known = f.size() == 2 && (f[0] == "cudnn" || f[0] == "own") &&
                       (f[1] == "bf16" || f[1] == "fp16" || f[1] == "fp32");
    if (!known) {
      std::fprintf(stderr, "attention_sweep: --variants: '%s' is not cudnn|own-bf16|fp16|fp32\n",
                   name.c_str());
      return 2;
    }
    variants.push_back({name, f[0] == "own" ? AttentionLibrary::kOwn : AttentionLibrary::kAuto,
                        f[1] == "bf16"   ? Precision::kBf16
                        : f[1] == "fp16" ? Precision::kFp16
                                         : Precision::kFp32});
  }
  std::vector<std::pair<int, int>> gpts;  // (width, rows) of --gemm
  const std::vector<std::string> gemm_texts =
      absl::StrSplit(absl::GetFlag(FLAGS_gemm), ',', absl::SkipEmpty());
  for (const std::string& gpt : gemm_texts) {
    int c = 0, tokens = 0;
    const std::vector<std::string> f = absl::StrSplit(gpt, ':');
    if (f.size() != 2 || !absl::SimpleAtoi(f[0], &c) || !absl::SimpleAtoi(f[1], &tokens) ||
        c <= 0 || tokens <= 0) {
      std::fprintf(stderr, "attention_sweep: --gemm: '%s' is not width:rows\n", gpt.c_str());
      return 2;
    }
    gpts.push_back({c, tokens});
  }
  std::string note;
  {
    auto opened = OpenDevice(absl::GetFlag(FLAGS_device), 1, &note);
    if (!opened.ok()) {
      std::fprintf(stderr, "attention_sweep: %s\n", std::string(opened.status().message()).c_str());
      return 2;
    }
  }
  std::string table;
  std::vector<std::string> rows;
  uint32_t seed = 1;
  for (const Shape& s : shapes) {
    for (const Variant& v : variants) {
      rows.push_back(Row(v, s, seed++, &table));
      std::fprintf(stderr, "%s", table.c_str());
      table.clear();
    }
  }
  std::vector<std::string> gemm_rows;
  if (note.rfind("cpu", 0) != 0) {
    int index = 0;
    const std::string device = absl::GetFlag(FLAGS_device);
    if (device.rfind("cuda:", 0) == 0) (void)absl::SimpleAtoi(device.substr(5), &index);
    for (const auto& [c, tokens] : gpts) {
      for (std::string& r : GemmRows(index, c, tokens)) gemm_rows.push_back(std::move(r));
    }
  }
  std::printf(
      "{\"bench\": \"attention_sweep\", \"device\": \"%s\", \"reps\": %d,\n \"rows\": [\n  %s\n ],\n"
      " \"gemm_rows\": [\n  %s\n ]}\n",
      absl::CEscape(note).c_str(), absl::GetFlag(FLAGS_reps), absl::StrJoin(rows, ",\n  ").c_str(),
      absl::StrJoin(gemm_rows, ",\n  ").c_str());
  return 0;
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  pstrain::LogToStderr();
  absl::ParseCommandLine(argc, argv);
  return pstrain::Run();
}
