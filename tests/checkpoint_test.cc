// Server checkpoints: written every N clocks while training, and readable by
// any safetensors reader. The reader here is written from the format's
// description (8-byte little-endian header length, a JSON header, raw data),
// sharing no code with the writer, and the weights it finds equal the ones
// the worker read at the end.
#include <cctype>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "proto/tensor.pb.h"
#include "tests/cluster.h"
#include "tests/test_jobs.h"

namespace pstrain {
namespace testing {
namespace {

// A minimal JSON value and parser (objects, arrays, strings, integers).
struct Json {
  enum Kind { kNull, kString, kNumber, kArray, kObject } kind = kNull;
  std::string text;
  int64_t number = 0;
  std::vector<Json> items;
  std::map<std::string, Json> fields;
};

class Parser {
 public:
  explicit Parser(const std::string& s) : s_(s) {}
  bool Parse(Json* out) {
    if (!Value(out)) return false;
    Space();
    return i_ == s_.size();
  }

 private:
  void Space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t')) ++i_;
  }
  bool String(std::string* out) {
    if (i_ >= s_.size() || s_[i_] != '"') return false;
    for (++i_; i_ < s_.size() && s_[i_] != '"'; ++i_) {
      if (s_[i_] == '\\' && ++i_ >= s_.size()) return false;
      out->push_back(s_[i_]);
    }
    return i_++ < s_.size();
  }
  bool Value(Json* v) {
    Space();
    if (i_ >= s_.size()) return false;
    const char c = s_[i_];
    if (c == '"') {
      v->kind = Json::kString;
      return String(&v->text);
    }
    if (c == '{' || c == '[') {
      const bool object = c == '{';
      v->kind = object ? Json::kObject : Json::kArray;
      ++i_;
      Space();
      if (i_ < s_.size() && s_[i_] == (object ? '}' : ']')) return ++i_, true;
      while (true) {
        Space();
        std::string key;
        if (object) {
          if (!String(&key)) return false;
          Space();
          if (i_ >= s_.size() || s_[i_++] != ':') return false;
        }
        Json item;
        if (!Value(&item)) return false;
        if (object) {
          if (!v->fields.emplace(key, std::move(item)).second) return false;  // no duplicates
        } else {
          v->items.push_back(std::move(item));
        }
        Space();
        if (i_ >= s_.size()) return false;
        if (s_[i_] == ',') {
          ++i_;
          continue;
        }
        return s_[i_++] == (object ? '}' : ']');
      }
    }
    size_t end = i_;
    while (end < s_.size() &&
           (std::isdigit(static_cast<unsigned char>(s_[end])) || s_[end] == '-')) {
      ++end;
    }
    v->kind = Json::kNumber;
    const bool ok = end > i_ && absl::SimpleAtoi(s_.substr(i_, end - i_), &v->number);
    i_ = end;
    return ok;
  }
  const std::string& s_;
  size_t i_ = 0;
};

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// "param[begin:end]" -> (param, begin, end).
bool ParseName(const std::string& name, std::string* param, int64_t* begin, int64_t* end) {
  const size_t open = name.rfind('['), colon = name.rfind(':'), close = name.rfind(']');
  if (open == std::string::npos || colon < open || close != name.size() - 1) return false;
  *param = name.substr(0, open);
  return absl::SimpleAtoi(name.substr(open + 1, colon - open - 1), begin) &&
         absl::SimpleAtoi(name.substr(colon + 1, close - colon - 1), end);
}

TEST(CheckpointTest, ServersWriteSafetensorsThatAnyReaderLoads) {
  Cluster cluster("ckpt");
  const std::string dir = cluster.dir() + "/checkpoints";
  ClusterOptions options;
  options.job_text = SmallJob("consistency: BSP\nbatch_size: 32\nclocks: 20\n");
  options.servers = 2;
  options.workers = 1;
  options.scheduler_flags = {"--checkpoint_dir=" + dir, "--checkpoint_every=5"};
  ASSERT_TRUE(cluster.Start(options).ok()) << cluster.Logs();
  absl::StatusOr<int> code = cluster.WaitAll(absl::Seconds(120));
  ASSERT_TRUE(code.ok()) << code.status() << cluster.Logs();
  ASSERT_EQ(*code, 0) << cluster.Logs();

  TensorSet final_weights;
  std::ifstream in(cluster.worker_weights(0), std::ios::binary);
  ASSERT_TRUE(final_weights.ParseFromIstream(&in)) << cluster.Logs();
  std::map<std::string, const NamedTensor*> by_name;
  for (const NamedTensor& t : final_weights.tensors()) by_name[t.name()] = &t;

  // The manifest names the last complete set: both servers' files of clock 20.
  Json manifest;
  ASSERT_TRUE(Parser(Slurp(dir + "/manifest.json")).Parse(&manifest)) << cluster.Logs();
  EXPECT_EQ(manifest.fields["clock"].number, 20);
  EXPECT_EQ(manifest.fields["servers"].number, 2);
  ASSERT_EQ(manifest.fields["files"].items.size(), 2u);
  std::map<std::string, int64_t> covered;  // param -> elements found in checkpoints
  for (int server = 0; server < 2; ++server) {
    const std::string latest = manifest.fields["files"].items[server].text;
    ASSERT_EQ(latest, absl::StrCat("server-", server, "-clock-20.safetensors"));
    const std::string file = Slurp(dir + "/" + latest);
    ASSERT_GE(file.size(), 8u);
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(file[i]);
    ASSERT_LE(8 + n, file.size());
    Json header;
    ASSERT_TRUE(Parser(file.substr(8, n)).Parse(&header)) << file.substr(8, n);
    ASSERT_EQ(header.kind, Json::kObject);
    const Json& meta = header.fields["__metadata__"];
    EXPECT_EQ(meta.fields.at("clock").text, "20");
    EXPECT_EQ(meta.fields.at("server").text, absl::StrCat(server));
    const std::string data = file.substr(8 + n);
    // Tensors tile the data exactly, in some order.
    std::map<int64_t, int64_t> ranges;
    for (const auto& [name, t] : header.fields) {
      if (name == "__metadata__") continue;
      ASSERT_EQ(t.fields.at("dtype").text, "F32") << name;
      const Json& shape = t.fields.at("shape");
      const Json& offsets = t.fields.at("data_offsets");
      ASSERT_EQ(shape.items.size(), 1u) << name;
      ASSERT_EQ(offsets.items.size(), 2u) << name;
      const int64_t a = offsets.items[0].number, b = offsets.items[1].number;
      ASSERT_EQ(b - a, shape.items[0].number * 4) << name;
      ASSERT_LE(b, static_cast<int64_t>(data.size())) << name;
      ranges[a] = b;
      if (absl::EndsWith(name, "/state")) continue;
      std::string param;
      int64_t begin, end;
      ASSERT_TRUE(ParseName(name, &param, &begin, &end)) << name;
      ASSERT_TRUE(by_name.count(param)) << name;
      ASSERT_EQ(end - begin, shape.items[0].number);
      std::vector<float> values(end - begin);
      std::memcpy(values.data(), data.data() + a, b - a);
      for (int64_t i = begin; i < end; ++i) {
        ASSERT_EQ(values[i - begin], by_name[param]->values(i)) << name << " at " << i;
      }
      covered[param] += end - begin;
    }
    int64_t at = 0;
    for (const auto& [a, b] : ranges) {
      ASSERT_EQ(a, at) << "a hole or an overlap in the data";
      at = b;
    }
    EXPECT_EQ(at, static_cast<int64_t>(data.size()));
  }
  // Both servers together hold every element of every parameter.
  for (const NamedTensor& t : final_weights.tensors()) {
    EXPECT_EQ(covered[t.name()], t.values_size()) << t.name();
  }
}

}  // namespace
}  // namespace testing
}  // namespace pstrain
