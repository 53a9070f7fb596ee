#include "scheduler/manifest.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common/checkpoint_names.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

std::string TempDir(const std::string& name) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  std::filesystem::create_directories(dir);
  return dir;
}

void Touch(const std::string& path) { std::ofstream(path) << "x"; }

TEST(ManifestTest, NamesACompleteSetAndReadsBack) {
  const std::string dir = TempDir("manifest");
  EXPECT_FALSE(ReadManifest(dir)->has_value());
  for (int64_t c : {10, 20, 30}) Touch(CheckpointPath(dir, 0, c));
  for (int64_t c : {10, 20}) Touch(CheckpointPath(dir, 2, c));
  Touch(CheckpointPath(dir, 2, 30) + ".tmp");  // not complete
  EXPECT_EQ(NewestCompleteSet(dir, {0, 2}, 100), 20);
  EXPECT_EQ(NewestCompleteSet(dir, {0, 2}, 15), 10);
  EXPECT_EQ(NewestCompleteSet(dir, {0}, 100), 30);
  EXPECT_EQ(NewestCompleteSet(dir, {0, 1}, 100), 0);
  // With a table, a set needs each server's file of the table too.
  Touch(TableCheckpointPath(dir, 0, 10, "words"));
  Touch(TableCheckpointPath(dir, 2, 10, "words"));
  Touch(TableCheckpointPath(dir, 0, 20, "words"));
  Touch(TableCheckpointPath(dir, 2, 20, "words") + ".tmp");  // not complete
  EXPECT_EQ(NewestCompleteSet(dir, {0, 2}, 100, {"words"}), 10);
  EXPECT_EQ(NewestCompleteSet(dir, {0}, 100, {"words"}), 20);
  EXPECT_EQ(NewestCompleteSet(dir, {0}, 100, {"words", "tags"}), 0);
  EXPECT_EQ(NewestCompleteSet(dir, {0, 2}, 100), 20) << "the table files are not chunks' files";
  ASSERT_TRUE(WriteManifest(dir, 20, 3, {0, 2}).ok());
  absl::StatusOr<std::optional<Manifest>> m = ReadManifest(dir);
  ASSERT_TRUE(m.ok() && m->has_value()) << m.status();
  EXPECT_EQ((*m)->clock, 20);
  EXPECT_EQ((*m)->num_servers, 3);
  EXPECT_EQ((*m)->files, (std::vector<std::string>{"server-0-clock-20.safetensors",
                                                   "server-2-clock-20.safetensors"}));
  std::filesystem::remove(CheckpointPath(dir, 2, 20));
  EXPECT_TRUE(absl::IsNotFound(ReadManifest(dir).status()));
}

TEST(ManifestTest, MalformedManifestsAreRefused) {
  const std::string dir = TempDir("bad_manifest");
  for (const char* text :
       {"", "[]", "{\"clock\": 1}", "{\"clock\": -1, \"servers\": 1, \"files\": []}",
        "{\"clock\": 1.5, \"servers\": 1, \"files\": []}",
        "{\"clock\": 1, \"servers\": 1, \"files\": [\"../x\"]}"}) {
    std::ofstream(dir + "/manifest.json") << text;
    EXPECT_TRUE(absl::IsInvalidArgument(ReadManifest(dir).status())) << text;
  }
}

}  // namespace
}  // namespace pstrain
