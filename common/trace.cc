#include "common/trace.h"

#include <fstream>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"

namespace pstrain {

absl::StatusOr<std::unique_ptr<TraceWriter>> TraceWriter::Open(const std::string& path,
                                                               bool append) {
  FILE* f = nullptr;
  if (!path.empty()) {
    f = std::fopen(path.c_str(), append ? "a" : "w");
    if (f == nullptr) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot write trace"));
  }
  return std::unique_ptr<TraceWriter>(new TraceWriter(f));
}

TraceWriter::~TraceWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void TraceWriter::Write(const TraceEvent& event) {
  if (file_ == nullptr) return;
  std::string line;
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(event, &line, options);
  absl::MutexLock lock(&mu_);
  std::fprintf(file_, "%s\n", line.c_str());
  std::fflush(file_);
}

absl::StatusOr<std::vector<TraceEvent>> ReadTrace(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open trace"));
  std::vector<TraceEvent> events;
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    TraceEvent e;
    if (!google::protobuf::util::JsonStringToMessage(line, &e).ok()) {
      return absl::DataLossError(absl::StrCat(path, ":", n, ": bad trace line"));
    }
    events.push_back(std::move(e));
  }
  return events;
}

}  // namespace pstrain
