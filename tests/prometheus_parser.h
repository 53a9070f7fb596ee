// A strict reader of Prometheus' text exposition format (0.0.4), written
// from the format's description for the tests: it checks every line, not
// just the ones a test looks at.
#ifndef PSTRAIN_TESTS_PROMETHEUS_PARSER_H_
#define PSTRAIN_TESTS_PROMETHEUS_PARSER_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pstrain {

struct PromSample {
  std::string name;  // with _bucket / _sum / _count for histograms
  std::map<std::string, std::string> labels;
  double value = 0;
};

struct PromFamily {
  std::string type;  // counter, gauge, histogram, summary, untyped
  std::string help;
  std::vector<PromSample> samples;
};

// Parses `text`; INVALID_ARGUMENT naming the line when any line breaks the
// format: a bad name, label or value, a sample before its family's TYPE, a
// family declared twice or interleaved with another, a counter that is
// negative, or a histogram whose buckets are not cumulative or whose +Inf
// bucket is not its _count.
absl::StatusOr<std::map<std::string, PromFamily>> ParsePrometheusText(const std::string& text);

// The value of the sample `name` whose labels include `labels`; NOT_FOUND
// when none, or more than one, matches.
absl::StatusOr<double> PromValue(const std::map<std::string, PromFamily>& families,
                                 const std::string& name,
                                 const std::map<std::string, std::string>& labels);

struct HttpReply {
  int code = 0;
  std::string headers;
  std::string body;
};
// GET http://address/path (address "HOST:PORT") with optional extra header
// lines ("Authorization: Bearer x"); a bare socket, HTTP/1.0.
absl::StatusOr<HttpReply> HttpGet(const std::string& address, const std::string& path,
                                  const std::vector<std::string>& headers = {});

}  // namespace pstrain

#endif  // PSTRAIN_TESTS_PROMETHEUS_PARSER_H_
