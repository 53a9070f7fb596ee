// Runs a fuzz target without libFuzzer, with any compiler: every seed in
// the corpus folder, then random mutations of them (bit flips, byte
// changes, insertions, deletions, truncations, splices) for a bounded time.
// Used by the fuzz targets' tests under `bazel test`; fuzz/run.sh runs the
// same targets under libFuzzer with clang's sanitizers.
//
//   <target> [CORPUS_DIR] [SECONDS]
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

std::string Mutate(std::string s, const std::vector<std::string>& seeds, std::mt19937_64& rng) {
  const int ops = 1 + static_cast<int>(rng() % 8);
  for (int k = 0; k < ops; ++k) {
    const size_t at = s.empty() ? 0 : rng() % s.size();
    switch (rng() % 7) {
      case 0:
        if (!s.empty()) s[at] ^= static_cast<char>(1 << (rng() % 8));
        break;
      case 1:
        if (!s.empty()) s[at] = static_cast<char>(rng());
        break;
      case 2:
        s.insert(at, 1 + rng() % 8, static_cast<char>(rng()));
        break;
      case 3:
        if (!s.empty()) s.erase(at, 1 + rng() % 8);
        break;
      case 4:
        s.resize(at);
        break;
      case 5: {  // an interesting byte: 0, 0x7f, 0x80, 0xff
        static const char kBytes[] = {0, 0x7f, static_cast<char>(0x80), static_cast<char>(0xff)};
        if (!s.empty()) s[at] = kBytes[rng() % 4];
        break;
      }
      case 6: {  // splice with another seed
        const std::string& other = seeds[rng() % seeds.size()];
        if (!other.empty()) s = s.substr(0, at) + other.substr(rng() % other.size());
        break;
      }
    }
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> seeds;
  if (argc > 1) {
    std::string dir = argv[1];
    if (const char* src = std::getenv("TEST_SRCDIR"); src != nullptr && dir[0] != '/') {
      const char* ws = std::getenv("TEST_WORKSPACE");
      dir = std::string(src) + "/" + (ws != nullptr ? ws : "pstrain") + "/" + dir;
    }
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
      std::ifstream in(entry.path(), std::ios::binary);
      std::stringstream text;
      text << in.rdbuf();
      seeds.push_back(text.str());
    }
  }
  if (seeds.empty()) seeds.push_back("");
  const double seconds = argc > 2 ? std::atof(argv[2]) : 2.0;
  for (const std::string& s : seeds) {
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  }
  std::mt19937_64 rng(1);
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  int64_t runs = static_cast<int64_t>(seeds.size());
  while (std::chrono::steady_clock::now() < until) {
    const std::string input = Mutate(seeds[rng() % seeds.size()], seeds, rng);
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
    ++runs;
  }
  std::printf("%lld inputs (%zu seeds) in %.1f s, no crash\n", static_cast<long long>(runs),
              seeds.size(), seconds);
  return 0;
}
