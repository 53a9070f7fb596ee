#include "worker/data/idx.h"

#include <zlib.h>

#include <fstream>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

std::string TempPath(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp != nullptr ? tmp : "/tmp") + "/" + name;
}

std::string Header(uint8_t type, std::vector<uint32_t> dims) {
  std::string h = {0, 0, static_cast<char>(type), static_cast<char>(dims.size())};
  for (uint32_t d : dims) {
    h += static_cast<char>(d >> 24);
    h += static_cast<char>(d >> 16);
    h += static_cast<char>(d >> 8);
    h += static_cast<char>(d);
  }
  return h;
}

void WritePlain(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

void WriteGz(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
}

TEST(IdxTest, ReadsPlainAndGzipped) {
  const std::string body = Header(0x08, {2, 2, 3}) + std::string("\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\xff");
  for (bool gz : {false, true}) {
    const std::string path = TempPath(gz ? "a.idx.gz" : "a.idx");
    gz ? WriteGz(path, body) : WritePlain(path, body);
    absl::StatusOr<IdxArray> a = ReadIdx(path);
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(a->dims, (std::vector<int64_t>{2, 2, 3}));
    ASSERT_EQ(a->data.size(), 12u);
    EXPECT_EQ(a->data[0], 1);
    EXPECT_EQ(a->data[11], 255);
  }
}

TEST(IdxTest, BadFilesGiveClearErrors) {
  EXPECT_EQ(ReadIdx("/nonexistent/x.gz").status().code(), absl::StatusCode::kNotFound);
  const std::string path = TempPath("bad.idx");
  WritePlain(path, Header(0x08, {10, 2}) + "abc");  // 20 bytes promised
  absl::StatusOr<IdxArray> a = ReadIdx(path);
  EXPECT_EQ(a.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(a.status().message(), "shorter")) << a.status();
  WritePlain(path, Header(0x0D, {1}) + "abcd");  // floats
  EXPECT_EQ(ReadIdx(path).status().code(), absl::StatusCode::kDataLoss);
  WritePlain(path, "PK\x03\x04garbage");
  EXPECT_EQ(ReadIdx(path).status().code(), absl::StatusCode::kDataLoss);
  WritePlain(path, Header(0x08, {0xffffff, 0xffffff}));  // absurd size
  EXPECT_TRUE(absl::StrContains(ReadIdx(path).status().message(), "4 GiB"));
  WritePlain(path, "");
  EXPECT_EQ(ReadIdx(path).status().code(), absl::StatusCode::kDataLoss);
}

TEST(IdxTest, ReadsDebiansFashionMnist) {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  absl::StatusOr<IdxArray> labels = ReadIdx(dir + "/t10k-labels-idx1-ubyte.gz");
  if (!labels.ok() && absl::IsNotFound(labels.status())) {
    GTEST_SKIP() << "dataset-fashion-mnist is not installed: " << labels.status();
  }
  ASSERT_TRUE(labels.ok()) << labels.status();
  EXPECT_EQ(labels->dims, (std::vector<int64_t>{10000}));
  std::vector<int> counts(10, 0);
  for (uint8_t l : labels->data) {
    ASSERT_LT(l, 10);
    ++counts[l];
  }
  for (int c : counts) EXPECT_EQ(c, 1000);  // the test set is balanced
  absl::StatusOr<IdxArray> images = ReadIdx(dir + "/t10k-images-idx3-ubyte.gz");
  ASSERT_TRUE(images.ok()) << images.status();
  EXPECT_EQ(images->dims, (std::vector<int64_t>{10000, 28, 28}));
}

}  // namespace
}  // namespace pstrain
