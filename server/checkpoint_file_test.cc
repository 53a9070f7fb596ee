// CheckpointFile: what the writer writes reads back; a malformed file is an
// INVALID_ARGUMENT naming it, never a crash or a read outside the file.
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/checkpoint.h"
#include "server/checkpoint_set.h"

namespace pstrain {
namespace {

std::string TempDir(const std::string& name) {
  return std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
}

// A file of an 8-byte little-endian header length, `header`, then `data`.
std::string WriteRaw(const std::string& name, uint64_t length, const std::string& header,
                     const std::string& data) {
  const std::string path = TempDir(name);
  std::ofstream out(path, std::ios::binary);
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>(length >> (8 * i)));
  out << header << data;
  return path;
}

std::string Written(const std::string& dir) {
  CheckpointWriter writer(dir, 3, "ADAM", {{7, "w[0:4]", 4, 8}, {9, "b[0:2]", 2, 0}});
  const float w[4] = {1, 2, 3, 4}, state[8] = {0, 1, 2, 3, 4, 5, 6, 7}, b[2] = {-1, -2};
  EXPECT_TRUE(writer.Write(10, 9, b, nullptr, 5).ok());
  EXPECT_TRUE(writer.Write(10, 7, w, state, 6).ok());
  EXPECT_EQ(writer.latest(), 10);
  return CheckpointPath(dir, 3, 10);
}

TEST(CheckpointFileTest, ReadsWhatTheWriterWrote) {
  absl::StatusOr<CheckpointFile> f = CheckpointFile::Open(Written(TempDir("good")));
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->clock(), 10);
  EXPECT_EQ(f->server(), 3);
  EXPECT_EQ(f->optimizer(), "ADAM");
  EXPECT_EQ(*f->Steps("w[0:4]"), 6);
  EXPECT_EQ(*f->Steps("b[0:2]"), 5);
  std::vector<float> w(4), state(8), b(2);
  ASSERT_TRUE(f->Read("w[0:4]", w.data(), 4).ok());
  ASSERT_TRUE(f->Read("w[0:4]/state", state.data(), 8).ok());
  ASSERT_TRUE(f->Read("b[0:2]", b.data(), 2).ok());
  EXPECT_EQ(w, (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(state[7], 7);
  EXPECT_EQ(b, (std::vector<float>{-1, -2}));
  // Wrong sizes and unknown names.
  EXPECT_TRUE(absl::IsInvalidArgument(f->Read("w[0:4]", w.data(), 3)));
  EXPECT_TRUE(absl::IsInvalidArgument(f->Read("nope", w.data(), 4)));
  EXPECT_FALSE(f->Steps("nope").ok());
  EXPECT_EQ(CheckpointClocks(TempDir("good"), 3), std::vector<int64_t>{10});
  EXPECT_TRUE(CheckpointClocks(TempDir("absent"), 3).empty());
}

// Two servers' files of one clock as a set: each chunk found in its file,
// whichever server wrote it; a chunk in two files, or no file, refused.
TEST(CheckpointFileTest, ASetFindsEachChunkInTheFileThatHoldsIt) {
  const std::string dir = TempDir("set");
  const float w[4] = {1, 2, 3, 4}, b[2] = {-1, -2};
  CheckpointWriter zero(dir, 0, "SGD", {{0, "w[0:4]", 4, 0}});
  CheckpointWriter two(dir, 2, "SGD", {{1, "b[0:2]", 2, 0}});
  ASSERT_TRUE(zero.Write(6, 0, w, nullptr, 1).ok());
  ASSERT_TRUE(two.Write(6, 1, b, nullptr, 1).ok());
  ASSERT_TRUE(two.Write(8, 1, b, nullptr, 2).ok());  // another clock's file
  absl::StatusOr<CheckpointSet> set = CheckpointSet::Open(dir, 6);
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->servers(), (std::vector<int>{0, 2}));
  EXPECT_EQ((*set->Holding("w[0:4]"))->server(), 0);
  EXPECT_EQ((*set->Holding("b[0:2]"))->server(), 2);
  EXPECT_TRUE(absl::IsNotFound(set->Holding("v[0:1]").status()));
  EXPECT_EQ(CheckpointSet::Open(dir, 8)->servers(), (std::vector<int>{2}));
  EXPECT_TRUE(absl::IsNotFound(CheckpointSet::Open(dir, 7).status()));
  CheckpointWriter again(dir, 1, "SGD", {{0, "w[0:4]", 4, 0}});
  ASSERT_TRUE(again.Write(6, 0, w, nullptr, 1).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(CheckpointSet::Open(dir, 6).status()));
}

TEST(CheckpointFileTest, MalformedFilesAreRefused) {
  EXPECT_TRUE(absl::IsNotFound(CheckpointFile::Open(TempDir("missing")).status()));
  const std::string meta = R"("__metadata__":{"clock":"1","server":"0"})";
  const std::string ok = "{" + meta + R"(,"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  ASSERT_TRUE(CheckpointFile::Open(WriteRaw("fine", ok.size(), ok, std::string(8, '\0'))).ok());
  struct Case {
    const char* name;
    uint64_t length;
    std::string header, data;
  };
  const std::vector<Case> cases = {
      {"empty", 0, "", ""},
      {"short", 0, "", ""},
      {"huge_length", uint64_t{1} << 62, ok, std::string(8, '\0')},
      {"length_past_end", ok.size() + 1, ok, ""},
      {"not_json", 5, "hello", ""},
      {"array", 2, "[]", ""},
      {"no_metadata", 2, "{}", ""},
      {"bad_clock", 0, R"({"__metadata__":{"clock":"x","server":"0"}})", ""},
      {"f16", 0, "{" + meta + R"(,"t":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})", "...."},
      {"past_data", 0, "{" + meta + R"(,"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
       "...."},
      {"size_mismatch", 0,
       "{" + meta + R"(,"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})",
       std::string(8, '\0')},
      {"negative", 0, "{" + meta + R"(,"t":{"dtype":"F32","shape":[-2],"data_offsets":[8,0]}})",
       std::string(8, '\0')},
      {"fraction", 0, "{" + meta + R"(,"t":{"dtype":"F32","shape":[0.5],"data_offsets":[0,2]}})",
       std::string(8, '\0')},
      {"huge_shape", 0,
       "{" + meta + R"(,"t":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})",
       ""},
      {"tensor_not_object", 0, "{" + meta + R"(,"t":3})", ""},
  };
  for (const Case& c : cases) {
    const uint64_t length = c.length > 0 || std::string(c.name) == "empty" ? c.length
                                                                           : c.header.size();
    std::string path;
    if (std::string(c.name) == "short") {
      path = TempDir("short");
      std::ofstream(path) << "abc";
    } else {
      path = WriteRaw(c.name, length, c.header, c.data);
    }
    const absl::StatusOr<CheckpointFile> f = CheckpointFile::Open(path);
    EXPECT_TRUE(absl::IsInvalidArgument(f.status())) << c.name << ": " << f.status();
  }
}

}  // namespace
}  // namespace pstrain
