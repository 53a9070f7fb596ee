// Each op of the CUDA backend against the CPU backend (its reference mode,
// which also rounds to fp16) on the same random inputs, within
// tol + |ref|·eps, in each precision: fp32, bf16 and fp16. Where there is
// no CUDA device (or the build has no CUDA backend) the same tests run with
// a second CPU backend in the device's place and say so: that keeps the
// tests themselves (sizes, host buffers) checked on every machine, CI
// included.
#include "kernels/cuda/cuda_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/half.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/reference_attention.h"
#include "kernels/device_array.h"

namespace pstrain {
namespace kernels {
namespace {

constexpr double kTol = 1e-5;
constexpr double kEps = 1e-4;  // fp32, different summation orders

std::vector<float> Random(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// A device copy of `host`, and a host copy of `d`.
DeviceArray<float> Uploaded(Backend* backend, const std::vector<float>& host) {
  DeviceArray<float> d(backend, static_cast<int64_t>(host.size()));
  d.Upload(host.data());
  return d;
}
std::vector<float> Downloaded(const DeviceArray<float>& d) {
  std::vector<float> host(d.size());
  d.Download(host.data());
  return host;
}

const char* PrecisionName(Precision p) {
  return p == Precision::kFp32 ? "fp32" : p == Precision::kBf16 ? "bf16" : "fp16";
}

class CudaBackendTest : public ::testing::TestWithParam<Precision> {
 protected:
  void SetUp() override {
    std::string why;
    gpu_ = MakeCudaBackend(0, &why);
    if (gpu_ == nullptr) {
      static bool said = false;
      if (!said) std::printf("no CUDA device (%s): a CPU backend stands in for it\n", why.c_str());
      said = true;
      gpu_ = MakeCpuReferenceBackend();
    }
    cpu_ = MakeCpuReferenceBackend();
    ASSERT_TRUE(gpu_->SetPrecision(GetParam(), &why)) << why;
    ASSERT_TRUE(cpu_->SetPrecision(GetParam(), &why)) << why;
  }
  void TearDown() override {
    if (gpu_ != nullptr) {
      EXPECT_EQ(gpu_->error(), "");
    }
  }
  bool sixteen_bit() const { return GetParam() != Precision::kFp32; }

  // A device copy of `host`.
  DeviceArray<float> Up(const std::vector<float>& host) { return Uploaded(gpu_.get(), host); }
  std::vector<float> Down(const DeviceArray<float>& d) { return Downloaded(d); }
  static void ExpectClose(const std::vector<float>& got, const std::vector<float>& want,
                          double tol = kTol, double eps = kEps) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], tol + std::abs(want[i]) * eps) << "at " << i;
    }
  }

  void BiasAndReluCase(int rows, int cols, std::mt19937& rng);

  std::unique_ptr<Backend> gpu_, cpu_;
};

INSTANTIATE_TEST_SUITE_P(Precisions, CudaBackendTest,
                         ::testing::Values(Precision::kFp32, Precision::kBf16, Precision::kFp16),
                         [](const ::testing::TestParamInfo<Precision>& info) {
                           return std::string(PrecisionName(info.param));
                         });

TEST_P(CudaBackendTest, GemmAllTranspositionsAndBeta) {
  std::mt19937 rng(1);
  const int m = 37, n = 53, k = 129;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const std::vector<float> a = Random(m * k, rng), b = Random(k * n, rng);
      std::vector<float> c = Random(m * n, rng);
      DeviceArray<float> da = Up(a), db = Up(b), dc = Up(c);
      gpu_->Gemm(ta, tb, m, n, k, 0.5f, da.data(), db.data(), 2.0f, dc.data());
      cpu_->Gemm(ta, tb, m, n, k, 0.5f, a.data(), b.data(), 2.0f, c.data());
      ExpectClose(Down(dc), c);
    }
  }
}

TEST_P(CudaBackendTest, BiasAndRelu) {
  std::mt19937 rng(2);
  // Column sums run in chunks of rows: one, several and a ragged last one.
  for (const int rows : {33, 256, 1000}) {
    BiasAndReluCase(rows, 300, rng);
  }
}

void CudaBackendTest::BiasAndReluCase(int rows, int cols, std::mt19937& rng) {
  std::vector<float> y = Random(rows * cols, rng);
  const std::vector<float> bias = Random(cols, rng);
  DeviceArray<float> dy = Up(y), dbias = Up(bias);
  gpu_->AddBias(rows, cols, dbias.data(), dy.data());
  cpu_->AddBias(rows, cols, bias.data(), y.data());
  ExpectClose(Down(dy), y);

  std::vector<float> grad(cols);
  DeviceArray<float> dgrad(gpu_.get(), cols);
  gpu_->BiasGrad(rows, cols, dy.data(), dgrad.data());
  cpu_->BiasGrad(rows, cols, y.data(), grad.data());
  // Sums of `rows` terms in other orders.
  ExpectClose(Down(dgrad), grad, kTol * std::sqrt(rows));

  std::vector<float> out(y.size()), back(y.size());
  const std::vector<float> upstream = Random(y.size(), rng);
  DeviceArray<float> dout(gpu_.get(), y.size()), dup = Up(upstream), dback(gpu_.get(), y.size());
  gpu_->ReluForward(y.size(), dy.data(), dout.data());
  cpu_->ReluForward(y.size(), y.data(), out.data());
  ExpectClose(Down(dout), out);
  gpu_->ReluBackward(y.size(), dout.data(), dup.data(), dback.data());
  cpu_->ReluBackward(y.size(), out.data(), upstream.data(), back.data());
  ExpectClose(Down(dback), back);
}

TEST_P(CudaBackendTest, SoftmaxXent) {
  std::mt19937 rng(3);
  for (int classes : {3, 10, 1000}) {
    const int rows = 17;
    std::vector<float> logits = Random(rows * classes, rng);
    for (float& z : logits) z *= 8.0f;
    std::vector<int32_t> labels(rows);
    for (int r = 0; r < rows; ++r) labels[r] = (r * 7) % classes;
    DeviceArray<float> dz = Up(logits), dd(gpu_.get(), rows * classes);
    DeviceArray<int32_t> dl(gpu_.get(), rows);
    dl.Upload(labels.data());
    std::vector<float> grad(rows * classes);
    int right_cpu = 0, right_gpu = 0;
    const float loss_cpu =
        cpu_->SoftmaxXent(rows, classes, logits.data(), labels.data(), grad.data(), &right_cpu);
    const float loss_gpu =
        gpu_->SoftmaxXent(rows, classes, dz.data(), dl.data(), dd.data(), &right_gpu);
    EXPECT_NEAR(loss_gpu, loss_cpu, kTol + std::abs(loss_cpu) * kEps) << classes;
    EXPECT_EQ(right_gpu, right_cpu) << classes;
    ExpectClose(Down(dd), grad);
  }
}

TEST_P(CudaBackendTest, EmbeddingAndAxpy) {
  std::mt19937 rng(5);
  const int vocab = 256, dim = 48, rows = 300;
  const std::vector<float> table = Random(vocab * dim, rng);
  std::vector<int32_t> ids(rows);
  for (int r = 0; r < rows; ++r) ids[r] = (r * 37) % 11;  // many repeats
  DeviceArray<int32_t> dids(gpu_.get(), rows);
  dids.Upload(ids.data());
  std::vector<float> out = Random(rows * dim, rng);
  DeviceArray<float> dtable = Up(table), dout = Up(out);
  gpu_->Embedding(rows, dim, dids.data(), dtable.data(), dout.data(), true);
  cpu_->Embedding(rows, dim, ids.data(), table.data(), out.data(), true);
  ExpectClose(Down(dout), out);
  std::vector<float> grad = Random(vocab * dim, rng);
  DeviceArray<float> dgrad = Up(grad);
  gpu_->EmbeddingBackward(rows, dim, dids.data(), dout.data(), dgrad.data());
  cpu_->EmbeddingBackward(rows, dim, ids.data(), out.data(), grad.data());
  ExpectClose(Down(dgrad), grad);
  // Over the table (vocab * dim elements; an earlier version of this test
  // ran rows * dim, past the end of both).
  gpu_->Axpy(vocab * dim, -0.5f, dout.data(), dgrad.data());
  cpu_->Axpy(vocab * dim, -0.5f, out.data(), grad.data());
  ExpectClose(Down(dgrad), grad);
}

TEST_P(CudaBackendTest, LayerNormAndGelu) {
  std::mt19937 rng(6);
  for (const auto& [rows, dim] : {std::pair{19, 8}, {19, 384}, {19, 1000}, {600, 384}}) {
    const std::vector<float> x = Random(rows * dim, rng, 3.0f), gamma = Random(dim, rng),
                             beta = Random(dim, rng), dy = Random(rows * dim, rng);
    std::vector<float> y(rows * dim), mean(rows), rstd(rows), dx(rows * dim), dg(dim), db(dim);
    DeviceArray<float> gx = Up(x), gg = Up(gamma), gb = Up(beta), gdy = Up(dy),
                       gy(gpu_.get(), rows * dim), gm(gpu_.get(), rows), gr(gpu_.get(), rows),
                       gdx(gpu_.get(), rows * dim), gdg(gpu_.get(), dim), gdb(gpu_.get(), dim);
    cpu_->LayerNorm(rows, dim, x.data(), gamma.data(), beta.data(), y.data(), mean.data(),
                    rstd.data());
    gpu_->LayerNorm(rows, dim, gx.data(), gg.data(), gb.data(), gy.data(), gm.data(), gr.data());
    ExpectClose(Down(gy), y);
    ExpectClose(Down(gm), mean);
    ExpectClose(Down(gr), rstd);
    cpu_->LayerNormBackward(rows, dim, x.data(), gamma.data(), mean.data(), rstd.data(), dy.data(),
                            dx.data(), dg.data(), db.data());
    gpu_->LayerNormBackward(rows, dim, gx.data(), gg.data(), gm.data(), gr.data(), gdy.data(),
                            gdx.data(), gdg.data(), gdb.data());
    ExpectClose(Down(gdx), dx);
    ExpectClose(Down(gdg), dg, kTol * std::sqrt(rows));
    ExpectClose(Down(gdb), db, kTol * std::sqrt(rows));

    cpu_->Gelu(rows * dim, x.data(), y.data());
    gpu_->Gelu(rows * dim, gx.data(), gy.data());
    ExpectClose(Down(gy), y);
    cpu_->GeluBackward(rows * dim, x.data(), dy.data(), dx.data());
    gpu_->GeluBackward(rows * dim, gx.data(), gdy.data(), gdx.data());
    ExpectClose(Down(gdx), dx);
  }
}

// The fused attention against the whole-matrix definition (in double,
// rounding where the products take 16 bits), across head sizes that fill
// each of the kernels' tile widths (32, 64, 128) and ones that pad them,
// sequences of one tile, several, and ragged ones.
// Attention against the reference with `library`'s kernels: in 16 bits on
// a CUDA device kAuto takes cuDNN's where it loads and takes the shape
// (heads of a multiple of 8 up to 128), kOwn the backend's own. With
// PSTRAIN_EXPECT_CUDNN=1 (bench/gpu_proof.sh, on a machine whose cuDNN
// must be taken) every shape any cuDNN 9 takes (those heads, sequences a
// multiple of 128) must have run on it.
void CausalAttentionCase(Backend* gpu, Precision precision, AttentionLibrary library) {
  std::mt19937 rng(7);
  gpu->SetAttentionLibrary(library);
  const bool expect_cudnn = library == AttentionLibrary::kAuto &&
                            precision != Precision::kFp32 && std::string(gpu->name()) == "cuda" &&
                            std::getenv("PSTRAIN_EXPECT_CUDNN") != nullptr &&
                            std::string(std::getenv("PSTRAIN_EXPECT_CUDNN")) == "1";
  struct Shape {
    int batch, seq, heads, head_dim;
  };
  // Each array within a share of its largest value: 16-bit rounding moves
  // a value by a share of the terms it sums, not of itself (the kernels
  // round each tile's weights before the running sum divides them, the
  // definition after). The share: twice the unit roundoff, or fp32's
  // summation orders.
  const double rel = precision == Precision::kBf16   ? 2.0 / 256
                     : precision == Precision::kFp16 ? 2.0 / 2048
                                                     : kEps / 10;
  auto expect_close = [](const char* what, const std::vector<float>& got,
                         const std::vector<float>& want, double rel) {
    ASSERT_EQ(got.size(), want.size());
    double largest = 0, worst = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      largest = std::max(largest, std::abs(double(want[i])));
      worst = std::max(worst, std::abs(double(got[i]) - want[i]));
    }
    EXPECT_LE(worst, rel * largest + kTol) << what << ": worst " << worst << " of " << largest;
  };
  for (const Shape& s : {Shape{2, 5, 2, 3}, Shape{3, 64, 6, 64}, Shape{2, 300, 2, 16},
                         Shape{1, 130, 2, 33}, Shape{1, 97, 1, 128}, Shape{1, 70, 3, 100},
                         Shape{2, 256, 4, 64}}) {
    SCOPED_TRACE(testing::Message() << "seq " << s.seq << ", head_dim " << s.head_dim);
    const int c = s.heads * s.head_dim;
    const std::vector<float> qkv = Random(s.batch * s.seq * 3 * c, rng, 2.0f),
                             dout = Random(s.batch * s.seq * c, rng);
    std::vector<float> lse(s.batch * s.heads * s.seq), out(s.batch * s.seq * c), dqkv(qkv.size());
    DeviceArray<float> gqkv = Uploaded(gpu, qkv), gdout = Uploaded(gpu, dout), glse(gpu, lse.size()),
                       gout(gpu, out.size()), gdqkv(gpu, dqkv.size());
    ReferenceAttention(precision, s.batch, s.seq, s.heads, s.head_dim, qkv.data(), lse.data(),
                       out.data());
    ReferenceAttentionBackward(precision, s.batch, s.seq, s.heads, s.head_dim, qkv.data(),
                               dout.data(), dqkv.data());
    gpu->Attention(s.batch, s.seq, s.heads, s.head_dim, gqkv.data(), glse.data(), gout.data());
    gpu->AttentionBackward(s.batch, s.seq, s.heads, s.head_dim, gqkv.data(), gout.data(),
                            glse.data(), gdout.data(), gdqkv.data());
    const std::string path = gpu->attention_path();
    std::printf("%s, %d x %d, %d heads of %d: %s\n", PrecisionName(precision), s.batch, s.seq,
                s.heads, s.head_dim, path.c_str());
    if (library == AttentionLibrary::kOwn || precision == Precision::kFp32) {
      EXPECT_EQ(path.rfind("own", 0), 0u) << path;
    } else if (expect_cudnn && s.head_dim % 8 == 0 && s.seq % 128 == 0) {
      EXPECT_EQ(path.rfind("cudnn", 0), 0u) << path;
    }
    // fp32 statistics in every precision; cuDNN's exponentials and
    // logarithms are the fast approximations (a few ulps).
    expect_close("lse", Downloaded(glse), lse, path.rfind("cudnn", 0) == 0 ? 1e-5 : 1e-6);
    expect_close("out", Downloaded(gout), out, rel);
    expect_close("dqkv", Downloaded(gdqkv), dqkv, rel);
    if (precision != Precision::kFp32) {
      // And the rounding happened: fp32 attention gives other values.
      std::vector<float> out32(out.size());
      ReferenceAttention(Precision::kFp32, s.batch, s.seq, s.heads, s.head_dim, qkv.data(),
                         lse.data(), out32.data());
      EXPECT_NE(out32, Downloaded(gout));
    }
  }
}


TEST_P(CudaBackendTest, CausalAttention) {
  CausalAttentionCase(gpu_.get(), GetParam(), AttentionLibrary::kAuto);
}

TEST_P(CudaBackendTest, CausalAttentionOnTheOwnKernels) {
  CausalAttentionCase(gpu_.get(), GetParam(), AttentionLibrary::kOwn);
}

// The device refuses heads wider than its kernels' tiles with an error,
// where a CPU backend (standing in) takes them.
TEST_P(CudaBackendTest, AttentionHeadsTooWideAreAnError) {
  if (std::string(gpu_->name()) != "cuda") GTEST_SKIP() << "a CUDA device's limit";
  {
    DeviceArray<float> qkv(gpu_.get(), 3 * 200), lse(gpu_.get(), 1), out(gpu_.get(), 200);
    gpu_->Attention(1, 1, 1, 200, qkv.data(), lse.data(), out.data());
    EXPECT_NE(gpu_->error(), "");
  }
  gpu_ = nullptr;  // its error is this test's point
}

// 16-bit products are the fp32 products of inputs the test rounded itself
// (not trusting the reference's own rounding).
TEST_P(CudaBackendTest, Gemm16BitInputsFp32Accumulation) {
  if (!sixteen_bit()) GTEST_SKIP() << "a 16-bit precision's test";
  std::mt19937 rng(8);
  const int m = 64, n = 96, k = 384;
  auto fp32 = MakeCpuReferenceBackend();
  auto round = [p = GetParam()](float v) {
    return p == Precision::kBf16 ? Bf16ToFloat(FloatToBf16(v)) : HalfToFloat(FloatToHalf(v));
  };
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      std::vector<float> a = Random(m * k, rng), b = Random(k * n, rng), c(m * n, 0.0f);
      DeviceArray<float> da = Up(a), db = Up(b), dc = Up(c);
      gpu_->Gemm(ta, tb, m, n, k, 1.0f, da.data(), db.data(), 0.0f, dc.data());
      for (float& v : a) v = round(v);
      for (float& v : b) v = round(v);
      fp32->Gemm(ta, tb, m, n, k, 1.0f, a.data(), b.data(), 0.0f, c.data());
      ExpectClose(Down(dc), c);
    }
  }
  std::vector<float> x = {1, 2, 4};
  DeviceArray<float> dx = Up(x);
  gpu_->Scale(3, 0.25f, dx.data());
  EXPECT_EQ(Down(dx), (std::vector<float>{0.25f, 0.5f, 1.0f}));
}

// Copies from and to pinned host memory run beside the computation: work
// queued after an Upload sees it, DownloadAsync has landed at the fence.
TEST_P(CudaBackendTest, PinnedCopiesAndFences) {
  const int n = 1 << 20;
  std::vector<float> in(n), out(n, -1.0f);
  for (int i = 0; i < n; ++i) in[i] = static_cast<float>(i % 1000);
  const bool pinned_in = gpu_->PinHost(in.data(), n * 4);
  const bool pinned_out = gpu_->PinHost(out.data(), n * 4);
  EXPECT_EQ(pinned_in, std::string(gpu_->name()) == "cuda");
  DeviceArray<float> d(gpu_.get(), n);
  for (int round = 0; round < 3; ++round) {
    d.Upload(in.data());
    gpu_->Scale(n, 2.0f, d.data());
    gpu_->DownloadAsync(d.data(), int64_t{n} * 4, out.data());
    gpu_->WaitFor(gpu_->Fence());
    for (int i = 0; i < n; i += 997) ASSERT_EQ(out[i], 2.0f * in[i]) << i;
    in[round] += 1.0f;  // after the fence the host buffers are free again
  }
  // Fences are reached in order; an old one returns at once.
  const int64_t first = gpu_->Fence(), second = gpu_->Fence();
  EXPECT_LT(first, second);
  gpu_->WaitFor(second);
  gpu_->WaitFor(first);
  EXPECT_TRUE(gpu_->Reached(first));
  EXPECT_TRUE(gpu_->Reached(second));
  // A fence on a long queue: Reached says so without waiting, WaitFor waits.
  for (int i = 0; i < 50; ++i) gpu_->Scale(n, 1.0f, d.data());
  const int64_t third = gpu_->Fence();
  const bool early = gpu_->Reached(third);
  gpu_->WaitFor(third);
  EXPECT_TRUE(gpu_->Reached(third));
  std::printf("a fence behind 50 scalings of 4 MB: %s when asked at once\n",
              early ? "reached" : "not yet reached");
  if (pinned_in) gpu_->UnpinHost(in.data());
  if (pinned_out) gpu_->UnpinHost(out.data());
}

TEST_P(CudaBackendTest, ErrorsBecomeMessagesNotExits) {
  // More memory than any device has: null and a message, and the backend
  // reports the error from then on.
  void* p = gpu_->Alloc(int64_t{1} << 50);
  EXPECT_EQ(p, nullptr);
  const bool cuda = std::string(gpu_->name()) == "cuda";
  EXPECT_NE(gpu_->error().find(cuda ? "cudaMalloc" : "out of memory"), std::string::npos)
      << gpu_->error();
  gpu_.reset();  // TearDown would flag the error we caused
}

TEST(CudaBackendBuildTest, SaysWhyWhenUnavailable) {
  std::string why;
  auto gpu = MakeCudaBackend(1000, &why);
  EXPECT_EQ(gpu, nullptr);
  EXPECT_FALSE(why.empty());
  std::printf("MakeCudaBackend(1000): %s (CUDA backend built: %s)\n", why.c_str(),
              CudaBackendBuilt() ? "yes" : "no");
}

}  // namespace
}  // namespace kernels
}  // namespace pstrain
