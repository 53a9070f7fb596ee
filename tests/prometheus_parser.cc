#include "tests/prometheus_parser.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <regex>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace pstrain {
namespace {

const std::regex kName("[a-zA-Z_:][a-zA-Z0-9_:]*");
const std::regex kHelp("# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) (.*)");
const std::regex kType("# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped)");
// name{labels} value [timestamp]
const std::regex kSample(
    R"(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)( -?[0-9]+)?)");
const std::regex kLabel(R"re(([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"(,|$))re");

bool ParseValue(const std::string& s, double* v) {
  if (s == "+Inf") return *v = INFINITY, true;
  if (s == "-Inf") return *v = -INFINITY, true;
  if (s == "NaN") return *v = NAN, true;
  return absl::SimpleAtod(s, v) && s.find_first_of(" \t") == std::string::npos;
}

absl::Status LabelsOf(const std::string& body, std::map<std::string, std::string>* labels) {
  auto it = body.cbegin();
  std::smatch m;
  while (it != body.cend()) {
    if (!std::regex_search(it, body.cend(), m, kLabel, std::regex_constants::match_continuous)) {
      return absl::InvalidArgumentError(absl::StrCat("bad labels '", body, "'"));
    }
    if (!labels->emplace(m[1], m[2]).second) {
      return absl::InvalidArgumentError(absl::StrCat("label ", m[1].str(), " twice"));
    }
    it = m[0].second;
  }
  return absl::OkStatus();
}

// The family a sample belongs to: its own name, or a histogram's base name.
std::string FamilyOf(const std::string& sample, const std::map<std::string, PromFamily>& families) {
  for (const char* suffix : {"_bucket", "_sum", "_count"}) {
    const std::string s(suffix);
    if (sample.size() > s.size() && sample.compare(sample.size() - s.size(), s.size(), s) == 0) {
      const std::string base = sample.substr(0, sample.size() - s.size());
      auto it = families.find(base);
      if (it != families.end() && (it->second.type == "histogram" || it->second.type == "summary")) {
        return base;
      }
    }
  }
  return sample;
}

absl::Status CheckHistogram(const std::string& name, const PromFamily& f) {
  // Per label set (without le): buckets ascending in le and cumulative, +Inf == _count.
  std::map<std::map<std::string, std::string>, std::vector<std::pair<double, double>>> buckets;
  std::map<std::map<std::string, std::string>, double> counts;
  for (const PromSample& s : f.samples) {
    std::map<std::string, std::string> key = s.labels;
    if (s.name == name + "_bucket") {
      double le = 0;
      if (!key.count("le") || !ParseValue(key["le"], &le)) {
        return absl::InvalidArgumentError(absl::StrCat(name, ": a bucket without a valid le"));
      }
      key.erase("le");
      buckets[key].emplace_back(le, s.value);
    } else if (s.name == name + "_count") {
      counts[key] = s.value;
    }
  }
  for (const auto& [key, list] : buckets) {
    for (size_t i = 1; i < list.size(); ++i) {
      if (!(list[i].first > list[i - 1].first) || list[i].second < list[i - 1].second) {
        return absl::InvalidArgumentError(absl::StrCat(name, ": buckets not cumulative"));
      }
    }
    if (list.empty() || !std::isinf(list.back().first) || !counts.count(key) ||
        counts[key] != list.back().second) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": +Inf bucket is not _count"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::map<std::string, PromFamily>> ParsePrometheusText(const std::string& text) {
  std::map<std::string, PromFamily> families;
  std::string current;  // the family whose samples are being read
  int n = 0;
  for (const absl::string_view view : absl::StrSplit(text, '\n')) {
    const std::string line(view);
    ++n;
    auto bad = [&](const std::string& why) {
      return absl::InvalidArgumentError(absl::StrCat("line ", n, " '", line, "': ", why));
    };
    std::smatch m;
    if (line.empty()) continue;
    if (std::regex_match(line, m, kHelp)) {
      families[m[1]].help = m[2];
      continue;
    }
    if (std::regex_match(line, m, kType)) {
      PromFamily& f = families[m[1]];
      if (!f.type.empty()) return bad("TYPE given twice");
      if (!f.samples.empty()) return bad("TYPE after samples");
      f.type = m[2];
      current = m[1];
      continue;
    }
    if (line[0] == '#') continue;  // a comment
    if (!std::regex_match(line, m, kSample)) return bad("not a sample");
    PromSample s;
    s.name = m[1];
    if (!ParseValue(m[4], &s.value)) return bad("bad value");
    if (absl::Status st = LabelsOf(m[3], &s.labels); !st.ok()) return bad(std::string(st.message()));
    const std::string family = FamilyOf(s.name, families);
    auto it = families.find(family);
    if (it == families.end() || it->second.type.empty()) return bad("no TYPE before the sample");
    if (family != current) return bad("family interleaved with another");
    if (it->second.type == "counter" && !(s.value >= 0)) return bad("negative counter");
    it->second.samples.push_back(std::move(s));
  }
  for (const auto& [name, f] : families) {
    if (f.type == "histogram") {
      if (absl::Status st = CheckHistogram(name, f); !st.ok()) return st;
    }
  }
  return families;
}

absl::StatusOr<double> PromValue(const std::map<std::string, PromFamily>& families,
                                 const std::string& name,
                                 const std::map<std::string, std::string>& labels) {
  const double* found = nullptr;
  int matches = 0;
  for (const auto& [family, f] : families) {
    for (const PromSample& s : f.samples) {
      if (s.name != name) continue;
      bool all = true;
      for (const auto& [k, v] : labels) {
        auto it = s.labels.find(k);
        all = all && it != s.labels.end() && it->second == v;
      }
      if (all) found = &s.value, ++matches;
    }
  }
  if (matches != 1) {
    return absl::NotFoundError(absl::StrCat(matches, " samples of ", name, " match"));
  }
  return *found;
}

absl::StatusOr<HttpReply> HttpGet(const std::string& address, const std::string& path,
                                  const std::vector<std::string>& headers) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return absl::InvalidArgumentError("address without a port");
  std::string host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), address.substr(colon + 1).c_str(), &hints, &found) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot resolve ", address));
  }
  const int fd = socket(found->ai_family, SOCK_STREAM, 0);
  const bool connected = fd >= 0 && connect(fd, found->ai_addr, found->ai_addrlen) == 0;
  freeaddrinfo(found);
  if (!connected) {
    if (fd >= 0) close(fd);
    return absl::UnavailableError(absl::StrCat("cannot connect to ", address));
  }
  std::string request = absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: ", address, "\r\n");
  for (const std::string& h : headers) absl::StrAppend(&request, h, "\r\n");
  request += "\r\n";
  const bool sent = write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size());
  std::string raw;
  char buf[65536];
  for (ssize_t k; sent && (k = read(fd, buf, sizeof(buf))) > 0;) raw.append(buf, k);
  close(fd);
  const size_t end = raw.find("\r\n\r\n");
  int code = 0;
  if (end == std::string::npos || raw.compare(0, 5, "HTTP/") != 0 ||
      !absl::SimpleAtoi(raw.substr(9, 3), &code)) {
    return absl::DataLossError(absl::StrCat("not an HTTP reply from ", address));
  }
  return HttpReply{code, raw.substr(0, end), raw.substr(end + 4)};
}

}  // namespace pstrain
