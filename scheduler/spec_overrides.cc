#include "scheduler/spec_overrides.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/enum_names.h"
#include "common/flags.h"
#include "common/status_macros.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/reflection.h"

namespace pstrain {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

// The field at `path` ("data.path") in JobSpec.
const FieldDescriptor* FieldOf(const std::string& path) {
  const google::protobuf::Descriptor* message = JobSpec::descriptor();
  const FieldDescriptor* field = nullptr;
  for (const absl::string_view part : absl::StrSplit(path, '.')) {
    if (field != nullptr) message = field->message_type();
    field = message->FindFieldByName(std::string(part));
  }
  return field;
}

// The message of *job that holds the field at `path` (nested messages on
// the way are created) and the field.
std::pair<Message*, const FieldDescriptor*> Resolve(JobSpec* job, const std::string& path) {
  const std::vector<std::string> parts = absl::StrSplit(path, '.');
  Message* m = job;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    m = m->GetReflection()->MutableMessage(m, m->GetDescriptor()->FindFieldByName(parts[i]));
  }
  return {m, m->GetDescriptor()->FindFieldByName(parts.back())};
}

// Checks one given flag's value against its field's type and range.
absl::Status CheckOne(const SpecOverrideFlag& f, const std::string& value) {
  const FieldDescriptor* field = FieldOf(f.field);
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_STRING:
      return CheckFlagNotEmpty(f.flag, value, "a directory");
    case FieldDescriptor::CPPTYPE_ENUM: {
      const std::vector<std::string> words = EnumWords(field->enum_type());
      const std::string lower = absl::AsciiStrToLower(value);
      for (const std::string& w : words) {
        if (lower == w) return absl::OkStatus();
      }
      return absl::InvalidArgumentError(
          absl::StrCat("--", f.flag, "=", lower, ": expected one of ", absl::StrJoin(words, ", ")));
    }
    default: {
      int64_t n = 0;
      if (!absl::SimpleAtoi(value, &n)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", f.flag, "=", value, ": expected an integer"));
      }
      return CheckFlagRanges({{f.flag, n, f.min, f.max}});
    }
  }
}

// Sets one checked value.
void SetOne(const SpecOverrideFlag& f, const std::string& value, JobSpec* job) {
  const auto [m, field] = Resolve(job, f.field);
  const google::protobuf::Reflection* r = m->GetReflection();
  int64_t n = 0;
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_STRING:
      r->SetString(m, field, value);
      return;
    case FieldDescriptor::CPPTYPE_ENUM:
      r->SetEnumValue(m, field, *ParseEnumWord(field->enum_type(), value));
      return;
    case FieldDescriptor::CPPTYPE_INT32:
      (void)absl::SimpleAtoi(value, &n);
      r->SetInt32(m, field, static_cast<int32_t>(n));
      return;
    case FieldDescriptor::CPPTYPE_BOOL:
      (void)absl::SimpleAtoi(value, &n);
      r->SetBool(m, field, n != 0);
      return;
    case FieldDescriptor::CPPTYPE_UINT64:
      (void)absl::SimpleAtoi(value, &n);
      r->SetUInt64(m, field, static_cast<uint64_t>(n));
      return;
    default:
      (void)absl::SimpleAtoi(value, &n);
      r->SetInt64(m, field, n);
      return;
  }
}

}  // namespace

const std::vector<SpecOverrideFlag>& SpecOverrideFlags() {
  constexpr int64_t kInt = std::numeric_limits<int32_t>::max();
  static const auto* flags = new std::vector<SpecOverrideFlag>{
      {"staleness", "staleness", 0, kInt},
      {"num_servers", "num_servers", 1, 4096},
      {"num_workers", "num_workers", 1, 65536},
      {"batch_size", "batch_size", 1, kInt},
      {"epochs", "epochs", 0, kInt},
      {"clocks", "clocks"},
      {"seed", "seed"},
      {"checkpoint_every", "checkpoint_every"},
      {"pipeline_stages", "pipeline_stages", 1, 1024},
      {"micro_batches", "micro_batches", 1, 65536},
      {"data_dir", "data.path"},
      {"checkpoint_dir", "checkpoint_dir"},
      {"consistency", "consistency"},
      {"pipeline_schedule", "pipeline_schedule"},
      {"table_consistency", "table_consistency"},
      {"standby_copies", "standby_copies", 0, 1},
      {"compression", "compression.codec"},
      {"compression_pulls", "compression.pulls", 0, 1},
  };
  return *flags;
}

absl::Status CheckOverrides(const SpecOverrides& overrides) {
  for (const auto& given : overrides) {
    const std::vector<SpecOverrideFlag>& table = SpecOverrideFlags();
    if (std::none_of(table.begin(), table.end(),
                     [&](const SpecOverrideFlag& f) { return given.first == f.flag; })) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", given.first, " overrides no field of the job spec"));
    }
  }
  for (const SpecOverrideFlag& f : SpecOverrideFlags()) {
    const auto it = overrides.find(f.flag);
    if (it != overrides.end()) RETURN_IF_ERROR(CheckOne(f, it->second));
  }
  return absl::OkStatus();
}

absl::Status ApplyOverrides(const SpecOverrides& overrides, JobSpec* job) {
  RETURN_IF_ERROR(CheckOverrides(overrides));
  for (const SpecOverrideFlag& f : SpecOverrideFlags()) {
    const auto it = overrides.find(f.flag);
    if (it != overrides.end()) SetOne(f, it->second, job);
  }
  return absl::OkStatus();
}

}  // namespace pstrain
