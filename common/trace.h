// --trace_file: one JSON TraceEvent (proto/tensor.proto) per line, written in
// the order the daemon did things, for tests and post-mortems.
#ifndef PSTRAIN_COMMON_TRACE_H_
#define PSTRAIN_COMMON_TRACE_H_

#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/tensor.pb.h"

namespace pstrain {

// Thread-safe. A TraceWriter opened on "" writes nothing.
class TraceWriter {
 public:
  static absl::StatusOr<std::unique_ptr<TraceWriter>> Open(const std::string& path,
                                                           bool append = false);
  ~TraceWriter();

  bool enabled() const { return file_ != nullptr; }
  void Write(const TraceEvent& event);

 private:
  explicit TraceWriter(FILE* file) : file_(file) {}
  absl::Mutex mu_;
  FILE* file_;
};

absl::StatusOr<std::vector<TraceEvent>> ReadTrace(const std::string& path);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_TRACE_H_
