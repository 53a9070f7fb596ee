// A server's checkpoint reader on any file (what a restarted server loads
// from a shared directory), and the scheduler's manifest reader: first byte
// even, a checkpoint; odd, a manifest.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "scheduler/manifest.h"
#include "server/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pstrain;
  if (size < 1) return 0;
  static const std::string dir = [] {
    const char* tmp = std::getenv("TEST_TMPDIR");
    std::string d = std::string(tmp != nullptr ? tmp : "/tmp") + "/checkpoint_fuzz." +
                    std::to_string(getpid());
    std::filesystem::create_directories(d);
    return d;
  }();
  const bool checkpoint = data[0] % 2 == 0;
  const std::string path = dir + (checkpoint ? "/input.safetensors" : "/manifest.json");
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data + 1), static_cast<std::streamsize>(size - 1));
  }
  if (!checkpoint) {
    (void)ReadManifest(dir);
    return 0;
  }
  absl::StatusOr<CheckpointFile> file = CheckpointFile::Open(path);
  if (!file.ok()) return 0;
  // Read what a store of one 4-float chunk would.
  std::vector<float> values(4);
  (void)file->Read("w[0:4]", values.data(), 4);
  (void)file->Read("w[0:4]/state", values.data(), 4);
  (void)file->Steps("w[0:4]");
  return 0;
}
