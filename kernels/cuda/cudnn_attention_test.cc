// cuDNN's attention graphs, described to the library itself: every tensor,
// pointwise, reduction, matmul and reshape descriptor of the forward and the
// backward must finalize, which checks each one's attributes, types and
// shapes (a product of mismatched operands is refused) without a device.
// The plans, and the results against the own kernels, need a GPU:
// cuda_backend_test. Skips where the build has no CUDA or cuDNN cannot be
// loaded.
#include <string>

#include "gtest/gtest.h"

#ifdef PSTRAIN_CUDA_BUILT
#include "kernels/cuda/cudnn_attention.h"

namespace pstrain {
namespace kernels {
namespace {

bool Loadable(std::string* why) {
  // Describing the smallest shape loads the library; a refusal that does
  // not come from loading it is the test's failure, not a skip.
  CudnnShape s{1, 16, 1, 8, true};
  if (CudnnAttention::Describe(s, why)) return true;
  return why->rfind("cannot load", 0) != 0 && why->find("older than") == std::string::npos;
}

class CudnnAttentionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!Loadable(&why)) GTEST_SKIP() << "cuDNN: " << why;
  }
};

TEST_F(CudnnAttentionTest, TheGraphsOfEveryShapeAndPrecisionAreDescribed) {
  // The GPT shapes of bench/gpt (6 x 384 and 12 x 768: heads of 64), a
  // sequence shorter than a tile, and heads of 32 and 128.
  const CudnnShape shapes[] = {{16, 256, 6, 64, true},  {8, 1024, 12, 64, true},
                               {2, 5, 2, 32, true},     {3, 100, 4, 128, true},
                               {16, 256, 6, 64, false}, {8, 1024, 12, 64, false}};
  for (const CudnnShape& s : shapes) {
    std::string why;
    EXPECT_TRUE(CudnnAttention::Describe(s, &why))
        << s.batch << " x " << s.seq << ", " << s.heads << " heads of " << s.head_dim
        << (s.bf16 ? " bf16: " : " fp16: ") << why;
  }
}

TEST_F(CudnnAttentionTest, OpeningSaysWhyWithoutADevice) {
  std::string why;
  std::unique_ptr<CudnnAttention> cudnn = CudnnAttention::Open(nullptr, &why);
  if (cudnn != nullptr) {
    EXPECT_EQ(cudnn->version().rfind("9.", 0), 0u) << cudnn->version();
    EXPECT_FALSE(cudnn->library().empty());
  } else {
    // No GPU here: the handle is refused, with a reason.
    EXPECT_FALSE(why.empty());
  }
}

}  // namespace
}  // namespace kernels
}  // namespace pstrain

#else

TEST(CudnnAttentionTest, NeedsACudaBuild) { GTEST_SKIP() << "built without a CUDA toolkit"; }

#endif
