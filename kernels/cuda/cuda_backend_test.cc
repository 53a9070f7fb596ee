// Each op of the CUDA backend against the CPU backend on the same random
// inputs, within tol + |ref|·eps. Skips, saying why, where there is no CUDA
// device (or the build has no CUDA backend).
#include "kernels/cuda/cuda_backend.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
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

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    gpu_ = MakeCudaBackend(0, &why);
    if (gpu_ == nullptr) {
      std::printf("skipping: no CUDA backend here: %s\n", why.c_str());
      GTEST_SKIP() << "no CUDA backend here: " << why;
    }
    cpu_ = MakeCpuBackend(1);
  }
  void TearDown() override {
    if (gpu_ != nullptr) {
      EXPECT_EQ(gpu_->error(), "");
    }
  }

  // A device copy of `host`.
  DeviceArray<float> Up(const std::vector<float>& host) {
    DeviceArray<float> d(gpu_.get(), static_cast<int64_t>(host.size()));
    d.Upload(host.data());
    return d;
  }
  std::vector<float> Down(const DeviceArray<float>& d) {
    std::vector<float> host(d.size());
    d.Download(host.data());
    return host;
  }
  static void ExpectClose(const std::vector<float>& got, const std::vector<float>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], kTol + std::abs(want[i]) * kEps) << "at " << i;
    }
  }

  std::unique_ptr<Backend> gpu_, cpu_;
};

TEST_F(CudaBackendTest, GemmAllTranspositionsAndBeta) {
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

TEST_F(CudaBackendTest, BiasAndRelu) {
  std::mt19937 rng(2);
  const int rows = 33, cols = 300;
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
  ExpectClose(Down(dgrad), grad);

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

TEST_F(CudaBackendTest, SoftmaxXent) {
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

TEST_F(CudaBackendTest, EmbeddingAndAxpy) {
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
  gpu_->Axpy(rows * dim, -0.5f, dout.data(), dgrad.data());
  cpu_->Axpy(rows * dim, -0.5f, out.data(), grad.data());
  ExpectClose(Down(dgrad), grad);
}

TEST_F(CudaBackendTest, LayerNormAndGelu) {
  std::mt19937 rng(6);
  for (int dim : {8, 384, 1000}) {
    const int rows = 19;
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
    cpu_->LayerNormBackward(rows, dim, x.data(), gamma.data(), mean.data(), rstd.data(),
                            dy.data(), dx.data(), dg.data(), db.data());
    gpu_->LayerNormBackward(rows, dim, gx.data(), gg.data(), gm.data(), gr.data(), gdy.data(),
                            gdx.data(), gdg.data(), gdb.data());
    ExpectClose(Down(gdx), dx);
    ExpectClose(Down(gdg), dg);
    ExpectClose(Down(gdb), db);

    cpu_->Gelu(rows * dim, x.data(), y.data());
    gpu_->Gelu(rows * dim, gx.data(), gy.data());
    ExpectClose(Down(gy), y);
    cpu_->GeluBackward(rows * dim, x.data(), dy.data(), dx.data());
    gpu_->GeluBackward(rows * dim, gx.data(), gdy.data(), gdx.data());
    ExpectClose(Down(gdx), dx);
  }
}

TEST_F(CudaBackendTest, CausalAttention) {
  std::mt19937 rng(7);
  struct Shape {
    int batch, seq, heads, head_dim;
  };
  for (const Shape& s : {Shape{2, 5, 2, 3}, Shape{3, 64, 6, 64}}) {
    const int c = s.heads * s.head_dim;
    const std::vector<float> qkv = Random(s.batch * s.seq * 3 * c, rng),
                             dout = Random(s.batch * s.seq * c, rng);
    std::vector<float> att(s.batch * s.heads * s.seq * s.seq), out(s.batch * s.seq * c),
        dqkv(qkv.size());
    DeviceArray<float> gqkv = Up(qkv), gdout = Up(dout), gatt(gpu_.get(), att.size()),
                       gout(gpu_.get(), out.size()), gdqkv(gpu_.get(), dqkv.size());
    cpu_->Attention(s.batch, s.seq, s.heads, s.head_dim, qkv.data(), att.data(), out.data());
    gpu_->Attention(s.batch, s.seq, s.heads, s.head_dim, gqkv.data(), gatt.data(), gout.data());
    ExpectClose(Down(gatt), att);
    ExpectClose(Down(gout), out);
    cpu_->AttentionBackward(s.batch, s.seq, s.heads, s.head_dim, qkv.data(), att.data(),
                            dout.data(), dqkv.data());
    gpu_->AttentionBackward(s.batch, s.seq, s.heads, s.head_dim, gqkv.data(), gatt.data(),
                            gdout.data(), gdqkv.data());
    ExpectClose(Down(gdqkv), dqkv);
  }
}

// 16-bit products: the CPU's fp32 product of the same rounded inputs.
TEST_F(CudaBackendTest, Gemm16BitInputsFp32Accumulation) {
  std::mt19937 rng(8);
  const int m = 64, n = 96, k = 384;
  for (Precision p : {Precision::kBf16, Precision::kFp16}) {
    std::string why;
    ASSERT_TRUE(gpu_->SetPrecision(p, &why)) << why;
    auto round = [p](float v) {
      return p == Precision::kBf16 ? Bf16ToFloat(FloatToBf16(v)) : HalfToFloat(FloatToHalf(v));
    };
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        std::vector<float> a = Random(m * k, rng), b = Random(k * n, rng), c(m * n, 0.0f);
        DeviceArray<float> da = Up(a), db = Up(b), dc = Up(c);
        gpu_->Gemm(ta, tb, m, n, k, 1.0f, da.data(), db.data(), 0.0f, dc.data());
        for (float& v : a) v = round(v);
        for (float& v : b) v = round(v);
        cpu_->Gemm(ta, tb, m, n, k, 1.0f, a.data(), b.data(), 0.0f, c.data());
        ExpectClose(Down(dc), c);
      }
    }
  }
  std::string why;
  ASSERT_TRUE(gpu_->SetPrecision(Precision::kFp32, &why));
  std::vector<float> x = {1, 2, 4};
  DeviceArray<float> dx = Up(x);
  gpu_->Scale(3, 0.25f, dx.data());
  EXPECT_EQ(Down(dx), (std::vector<float>{0.25f, 0.5f, 1.0f}));
}

TEST_F(CudaBackendTest, ErrorsBecomeMessagesNotExits) {
  // More memory than any device has: null and a message, and the backend
  // reports the error from then on.
  void* p = gpu_->Alloc(int64_t{1} << 50);
  EXPECT_EQ(p, nullptr);
  EXPECT_NE(gpu_->error().find("cudaMalloc"), std::string::npos) << gpu_->error();
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
