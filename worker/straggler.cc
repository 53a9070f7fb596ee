#include "worker/straggler.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/hash.h"

namespace pstrain {
namespace {

absl::Status Bad(absl::string_view text, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(
      "--straggler=", text, ": ", why,
      " (none, fixed:MS, uniform:LO:HI or pareto:SCALE:SHAPE, optionally @SHARE)"));
}

// A uniform double in (0, 1] from (seed, worker, clock, stream).
double Uniform(uint64_t seed, int worker, int64_t clock, uint64_t stream) {
  const uint64_t h = SplitMix64(SplitMix64(SplitMix64(seed ^ (stream * 0x9e3779b97f4a7c15ULL)) ^
                                           static_cast<uint64_t>(worker)) ^
                                static_cast<uint64_t>(clock));
  return (static_cast<double>(h >> 11) + 1.0) * (1.0 / 9007199254740992.0);
}

}  // namespace

absl::StatusOr<StragglerSpec> ParseStraggler(absl::string_view text, absl::string_view workers,
                                             uint64_t seed) {
  StragglerSpec spec;
  spec.seed = seed;
  for (absl::string_view w : absl::StrSplit(workers, ',', absl::SkipEmpty())) {
    int id;
    if (!absl::SimpleAtoi(w, &id) || id < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--straggler_workers=", workers, ": '", w, "' is not a worker id >= 0"));
    }
    spec.workers.push_back(id);
  }
  std::vector<absl::string_view> share_split = absl::StrSplit(text, '@');
  if (share_split.size() > 2) return Bad(text, "more than one @");
  if (share_split.size() == 2 &&
      (!absl::SimpleAtod(share_split[1], &spec.share) || !(spec.share > 0 && spec.share <= 1))) {
    return Bad(text, "the share after @ must be in (0, 1]");
  }
  const std::vector<absl::string_view> parts = absl::StrSplit(share_split[0], ':');
  std::vector<double> args;
  for (size_t i = 1; i < parts.size(); ++i) {
    double v;
    if (!absl::SimpleAtod(parts[i], &v) || !std::isfinite(v)) {
      return Bad(text, absl::StrCat("'", parts[i], "' is not a number"));
    }
    if (v < 0) return Bad(text, "a delay cannot be negative");
    args.push_back(v);
  }
  const absl::string_view kind = parts[0];
  auto want = [&](size_t n) -> absl::Status {
    return args.size() == n ? absl::OkStatus()
                            : Bad(text, absl::StrCat(kind, " takes ", n, " number(s)"));
  };
  if (kind == "none" || kind.empty()) {
    if (!args.empty()) return Bad(text, "none takes no numbers");
    return spec;
  }
  if (kind == "fixed") {
    if (absl::Status st = want(1); !st.ok()) return st;
    spec.kind = StragglerSpec::Kind::kFixed;
  } else if (kind == "uniform") {
    if (absl::Status st = want(2); !st.ok()) return st;
    if (args[0] > args[1]) return Bad(text, "LO is above HI");
    spec.kind = StragglerSpec::Kind::kUniform;
  } else if (kind == "pareto") {
    if (absl::Status st = want(2); !st.ok()) return st;
    if (args[1] <= 0) return Bad(text, "the shape must be > 0");
    spec.kind = StragglerSpec::Kind::kPareto;
  } else {
    return Bad(text, absl::StrCat("unknown distribution '", kind, "'"));
  }
  spec.a_ms = args[0];
  spec.b_ms = args.size() > 1 ? args[1] : 0;
  if (spec.a_ms > kMaxStragglerMs || (spec.kind == StragglerSpec::Kind::kUniform &&
                                      spec.b_ms > kMaxStragglerMs)) {
    return Bad(text, "a delay above 60000 ms");
  }
  return spec;
}

absl::Duration StragglerDelay(const StragglerSpec& spec, int worker, int64_t clock) {
  if (spec.kind == StragglerSpec::Kind::kNone) return absl::ZeroDuration();
  if (!spec.workers.empty() &&
      std::find(spec.workers.begin(), spec.workers.end(), worker) == spec.workers.end()) {
    return absl::ZeroDuration();
  }
  if (spec.share < 1 && Uniform(spec.seed, worker, clock, 1) > spec.share) {
    return absl::ZeroDuration();
  }
  const double u = Uniform(spec.seed, worker, clock, 0);
  double ms = 0;
  switch (spec.kind) {
    case StragglerSpec::Kind::kFixed:
      ms = spec.a_ms;
      break;
    case StragglerSpec::Kind::kUniform:
      ms = spec.a_ms + (spec.b_ms - spec.a_ms) * u;
      break;
    case StragglerSpec::Kind::kPareto:
      ms = spec.a_ms / std::pow(u, 1.0 / spec.b_ms);
      break;
    case StragglerSpec::Kind::kNone:
      break;
  }
  return absl::Microseconds(std::llround(std::min(ms, kMaxStragglerMs) * 1000));
}

}  // namespace pstrain
