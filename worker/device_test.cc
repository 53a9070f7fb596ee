#include "worker/device.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_backend.h"

namespace pstrain {
namespace {

TEST(DeviceTest, CpuAndUnknownNames) {
  std::string note;
  auto cpu = OpenDevice("cpu", 1, &note);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_STREQ((*cpu)->name(), "cpu");
  for (const char* bad : {"tpu", "cuda:", "cuda:x", "cuda:-1", ""}) {
    auto b = OpenDevice(bad, 1, &note);
    EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(DeviceTest, AutoFallsBackToCpuWithTheReason) {
  std::string why;
  const bool has_gpu = kernels::MakeCudaBackend(0, &why) != nullptr;
  std::string note;
  auto b = OpenDevice("auto", 1, &note);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_STREQ((*b)->name(), has_gpu ? "cuda" : "cpu");
  if (!has_gpu) {
    EXPECT_TRUE(absl::StrContains(note, why)) << note;
  }
  // An explicit CUDA device that cannot be used is an error, with the reason.
  auto missing = OpenDevice("cuda:1000", 1, &note);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(missing.status().message(), "cuda:1000")) << missing.status();
}

}  // namespace
}  // namespace pstrain
