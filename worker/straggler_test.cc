// The straggler delays: what the flag accepts and refuses, and the
// distributions drawn (their medians and shares over many clocks), the
// same for the same seed, worker and clock.
#include "worker/straggler.h"

#include <algorithm>
#include <vector>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

std::vector<double> Draw(const StragglerSpec& spec, int worker, int n) {
  std::vector<double> ms;
  for (int c = 0; c < n; ++c) ms.push_back(absl::ToDoubleMilliseconds(StragglerDelay(spec, worker, c)));
  return ms;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

TEST(StragglerTest, BadValuesAreRefusedNamingTheProblem) {
  for (const char* bad : {"fixed:-5", "gamma:3", "uniform:10", "uniform:20:10", "pareto:10:0",
                          "pareto:10:-1", "fixed:abc", "fixed:5@0", "fixed:5@1.5", "fixed:5@x",
                          "fixed:120000", "none:3", "fixed:nan", "fixed:5@0.5@0.5"}) {
    const absl::StatusOr<StragglerSpec> spec = ParseStraggler(bad, "", 1);
    ASSERT_FALSE(spec.ok()) << bad;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(spec.status().message().find(bad), std::string::npos) << spec.status();
  }
  EXPECT_EQ(ParseStraggler("fixed:5", "0,x", 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseStraggler("fixed:5", "-1", 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ParseStraggler("none", "", 1).ok());
  EXPECT_TRUE(ParseStraggler("", "", 1).ok());
}

TEST(StragglerTest, DistributionsAndSharesAreWhatTheyStateAndRepeat) {
  const StragglerSpec fixed = *ParseStraggler("fixed:7", "", 1);
  EXPECT_EQ(StragglerDelay(fixed, 3, 10), absl::Milliseconds(7));
  const StragglerSpec uniform = *ParseStraggler("uniform:10:30", "", 1);
  const std::vector<double> u = Draw(uniform, 0, 20000);
  EXPECT_NEAR(Median(u), 20, 0.5);
  EXPECT_GE(*std::min_element(u.begin(), u.end()), 10);
  EXPECT_LE(*std::max_element(u.begin(), u.end()), 30);
  // Pareto(scale 5, shape 1.5): at least 5, median 5 * 2^(2/3) = 7.94, a
  // heavy tail (the 99th percentile 5 * 100^(2/3) = 108).
  const StragglerSpec pareto = *ParseStraggler("pareto:5:1.5", "", 1);
  std::vector<double> p = Draw(pareto, 0, 20000);
  EXPECT_NEAR(Median(p), 7.94, 0.3);
  EXPECT_GE(*std::min_element(p.begin(), p.end()), 5);
  std::sort(p.begin(), p.end());
  EXPECT_NEAR(p[p.size() * 99 / 100], 108, 15);
  // A share: about a fifth of the clocks delayed.
  const std::vector<double> some = Draw(*ParseStraggler("fixed:4@0.2", "", 1), 0, 20000);
  const double delayed = std::count(some.begin(), some.end(), 4.0) / 20000.0;
  EXPECT_NEAR(delayed, 0.2, 0.02);
  // The same (seed, worker, clock): the same delay; other seeds or workers differ.
  EXPECT_EQ(Draw(pareto, 1, 100), Draw(pareto, 1, 100));
  EXPECT_NE(Draw(pareto, 1, 100), Draw(pareto, 2, 100));
  EXPECT_NE(Draw(*ParseStraggler("pareto:5:1.5", "", 2), 1, 100), Draw(pareto, 1, 100));
}

TEST(StragglerTest, OnlyTheNamedWorkersAreSlow) {
  const StragglerSpec slow = *ParseStraggler("fixed:50", "1,3", 9);
  EXPECT_EQ(StragglerDelay(slow, 1, 0), absl::Milliseconds(50));
  EXPECT_EQ(StragglerDelay(slow, 3, 5), absl::Milliseconds(50));
  EXPECT_EQ(StragglerDelay(slow, 0, 0), absl::ZeroDuration());
  EXPECT_EQ(StragglerDelay(slow, 2, 0), absl::ZeroDuration());
}

}  // namespace
}  // namespace pstrain
