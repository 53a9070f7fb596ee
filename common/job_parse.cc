#include "common/job_parse.h"

#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"

namespace pstrain {
namespace {

// Fields renamed (issue 25: the spec's clock counts say clocks, a step
// being one optimizer update; issue 69: a server's copy is a standby, a
// replica is a pipeline's): a job file with an old name is refused naming
// the new one.
constexpr struct {
  absl::string_view old_name;
  absl::string_view new_name;
} kRenamedFields[] = {{"steps", "clocks"},
                      {"warmup_steps", "warmup_clocks"},
                      {"decay_steps", "decay_clocks"},
                      {"replicas", "standby_copies"}};

// The parser's message, or what to write instead when it is about a
// renamed field.
std::string Explained(const std::string& message) {
  for (const auto& r : kRenamedFields) {
    if (absl::StrContains(message, absl::StrCat("has no field named \"", r.old_name, "\""))) {
      return absl::StrCat("field \"", r.old_name, "\" is now \"", r.new_name, "\"");
    }
  }
  return message;
}

// Keeps the first parse error with its position.
class FirstErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  explicit FirstErrorCollector(std::string file) : file_(std::move(file)) {}
  void AddError(int line, int column, const std::string& message) override {
    if (error_.empty()) {
      // The parser counts from 0; editors count from 1.
      error_ = absl::StrCat(file_, ":", line + 1, ":", column + 1, ": ", Explained(message));
    }
  }
  const std::string& error() const { return error_; }

 private:
  std::string file_;
  std::string error_;
};

}  // namespace

absl::StatusOr<JobSpec> ParseJobSpecText(const std::string& text, const std::string& file_name) {
  JobSpec job;
  FirstErrorCollector errors(file_name);
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text, &job)) {
    return absl::InvalidArgumentError(errors.error().empty()
                                          ? absl::StrCat(file_name, ": cannot parse job spec")
                                          : errors.error());
  }
  return job;
}

absl::StatusOr<JobSpec> LoadJobSpec(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open job spec"));
  }
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    return absl::DataLossError(absl::StrCat(path, ": cannot read job spec"));
  }
  return ParseJobSpecText(text.str(), path);
}

}  // namespace pstrain
