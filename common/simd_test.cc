#include "common/simd.h"

#include <string>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

// The loops' clones are bound by the CPU's features, not its model name: a
// CPU with AVX2 and FMA (x86-64-v3) runs the vector clone whatever its vendor.
TEST(SimdTest, VectorClonesRunWhereverTheCpuHasAvx2AndFma) {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  __builtin_cpu_init();
  const bool v3 = __builtin_cpu_supports("x86-64-v3");
  EXPECT_EQ(std::string(SimdLevel()), v3 ? "avx2+fma" : "scalar");
#else
  EXPECT_EQ(std::string(SimdLevel()), "scalar");
#endif
}

}  // namespace
}  // namespace pstrain
