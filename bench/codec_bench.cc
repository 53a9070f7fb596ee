// The compressed-push codecs' cost (common/grad_codec.h): for each codec,
// encoding with error feedback and decoding one chunk, next to a copy of
// its fp32 values measured in the same run, on one thread. Prints one JSON
// object: per codec the median of interleaved rounds, in microseconds, and
// the median ratio to the copy of the same round.
//
//   bazel run -c opt //bench:codec_bench -- [--numel=65536] [--rounds=9]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "common/grad_codec.h"
#include "common/logging.h"

ABSL_FLAG(int64_t, numel, 65536, "values a chunk");
ABSL_FLAG(int, rounds, 9, "interleaved (copy, encode, decode) rounds");
ABSL_FLAG(int, reps, 200, "chunks timed a round");

namespace pstrain {
namespace {

using Clock = std::chrono::steady_clock;

template <typename F>
double MicrosEach(int reps, F f) {
  const auto start = Clock::now();
  for (int i = 0; i < reps; ++i) f();
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count() / reps;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Case {
  const char* name;
  GradCompression spec;
};

std::vector<Case> Cases() {
  auto spec = [](GradCompression::Codec codec, float ratio) {
    GradCompression s;
    s.set_codec(codec);
    s.set_ratio(ratio);
    return WithCompressionDefaults(s);
  };
  return {{"INT8", spec(GradCompression::INT8, 0.1f)},
          {"INT4", spec(GradCompression::INT4, 0.1f)},
          {"SIGN", spec(GradCompression::SIGN, 0.1f)},
          {"TOP_K 0.01", spec(GradCompression::TOP_K, 0.01f)},
          {"TOP_K 0.1", spec(GradCompression::TOP_K, 0.1f)}};
}

void Run() {
  const int64_t n = absl::GetFlag(FLAGS_numel);
  const int reps = absl::GetFlag(FLAGS_reps);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> g(n), residual(n, 0.0f), out(n), copy(n);
  for (float& x : g) x = normal(rng);
  std::printf("{\"bench\": \"codec_bench\", \"numel\": %lld, \"codecs\": [",
              static_cast<long long>(n));
  const std::vector<Case> cases = Cases();
  for (size_t c = 0; c < cases.size(); ++c) {
    const GradCompression& spec = cases[c].spec;
    std::vector<char> bytes(EncodedBytes(spec, n));
    std::vector<double> enc, dec, cp, enc_ratio, dec_ratio;
    for (int round = 0; round < absl::GetFlag(FLAGS_rounds); ++round) {
      cp.push_back(MicrosEach(reps, [&] { std::memcpy(copy.data(), g.data(), 4 * n); }));
      enc.push_back(MicrosEach(reps, [&] {
        std::fill(residual.begin(), residual.end(), 0.0f);
        EncodeWithFeedback(spec, g.data(), n, residual.data(), bytes.data());
      }));
      dec.push_back(MicrosEach(reps, [&] {
        if (!Decode(spec, bytes.data(), static_cast<int64_t>(bytes.size()), n, out.data()).ok()) {
          std::abort();  // our own encoding
        }
      }));
      enc_ratio.push_back(enc.back() / cp.back());
      dec_ratio.push_back(dec.back() / cp.back());
    }
    std::printf(
        "%s\n  {\"codec\": \"%s\", \"bytes\": %zu, \"copy_us\": %.1f, \"encode_us\": %.1f, "
        "\"decode_us\": %.1f, \"encode_vs_copy\": %.2f, \"decode_vs_copy\": %.2f}",
        c ? "," : "", cases[c].name, bytes.size(), Median(cp), Median(enc), Median(dec),
        Median(enc_ratio), Median(dec_ratio));
  }
  std::printf("\n]}\n");
}

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  pstrain::LogToStderr();
  absl::ParseCommandLine(argc, argv);
  pstrain::Run();
  return 0;
}
