#include "tests/netns.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "tests/cluster.h"

namespace pstrain {
namespace testing {

const char kIp[] = "/usr/sbin/ip";

namespace {

const char kTc[] = "/usr/sbin/tc";
const char kForwarding[] = "/proc/sys/net/ipv4/ip_forward";

}  // namespace

std::string Netns::Unavailable() {
  if (geteuid() != 0) return "not root (network namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN)";
  for (const char* tool : {kIp, kTc}) {
    if (access(tool, X_OK) != 0) return absl::StrCat(tool, " not found (Debian's iproute2)");
  }
  // Root is not enough everywhere: in a chroot or a container without a
  // mount namespace of its own, `ip netns add` cannot mount the
  // namespace's file. Tried once, with a name of this process's.
  const std::string probe = absl::StrCat("pstrain-probe-", getpid());
  std::string out;
  absl::StatusOr<int> code = RunCommand({kIp, "netns", "add", probe}, &out, absl::Seconds(10), "ip");
  if (!code.ok() || *code != 0) {
    return absl::StrCat("ip netns add fails here: ",
                        code.ok() ? absl::StripAsciiWhitespace(out) : code.status().message());
  }
  (void)RunCommand({kIp, "netns", "del", probe}, &out, absl::Seconds(10), "ip");
  return "";
}

bool Netns::Run(const std::vector<std::string>& argv) {
  std::string out;
  absl::StatusOr<int> code = RunCommand(argv, &out, absl::Seconds(10), "ip");
  if (code.ok() && *code == 0) return true;
  if (error_.empty()) error_ = absl::StrCat(absl::StrJoin(argv, " "), ": ", out);
  return false;
}

Netns::Netns(int index) {
  const int id = static_cast<int>(getpid() % 100) * 2 + index;
  name_ = absl::StrCat("pstrain", getpid(), "-", index);
  host_if_ = absl::StrCat("pvh", getpid() % 100000, "-", index);
  ns_if_ = absl::StrCat("pvn", getpid() % 100000, "-", index);
  host_ip_ = absl::StrCat("10.", 200 + id / 250, ".", id % 250, ".1");
  ns_ip_ = absl::StrCat("10.", 200 + id / 250, ".", id % 250, ".2");
  for (const std::vector<std::string>& argv : std::vector<std::vector<std::string>>{
           {kIp, "netns", "add", name_},
           {kIp, "link", "add", host_if_, "type", "veth", "peer", "name", ns_if_},
           {kIp, "link", "set", ns_if_, "netns", name_},
           {kIp, "addr", "add", host_ip_ + "/30", "dev", host_if_},
           {kIp, "link", "set", host_if_, "up"},
           {kIp, "netns", "exec", name_, kIp, "addr", "add", ns_ip_ + "/30", "dev", ns_if_},
           {kIp, "netns", "exec", name_, kIp, "link", "set", ns_if_, "up"},
           {kIp, "netns", "exec", name_, kIp, "link", "set", "lo", "up"},
           {kIp, "netns", "exec", name_, kIp, "route", "add", "default", "via", host_ip_}}) {
    if (!Run(argv)) return;
  }
}

Netns::~Netns() {
  std::string out;
  (void)RunCommand({kIp, "link", "del", host_if_}, &out, absl::Seconds(10), "ip");
  (void)RunCommand({kIp, "netns", "del", name_}, &out, absl::Seconds(10), "ip");
}

bool Netns::SetLink(bool up) { return Run({kIp, "link", "set", host_if_, up ? "up" : "down"}); }

bool Netns::Shape(int mbit) {
  const std::vector<std::string> tbf = {
      "root", "tbf", "rate", absl::StrCat(mbit, "mbit"), "burst", "256kb", "latency", "200ms"};
  std::vector<std::string> host = {kTc, "qdisc", "replace", "dev", host_if_};
  std::vector<std::string> ns = {kIp, "netns", "exec", name_, kTc, "qdisc", "replace", "dev",
                                 ns_if_};
  host.insert(host.end(), tbf.begin(), tbf.end());
  ns.insert(ns.end(), tbf.begin(), tbf.end());
  return Run(host) && Run(ns);
}

HostForwarding::HostForwarding() {
  before_ = std::string(absl::StripAsciiWhitespace(ReadFile(kForwarding)));
  WriteFile(kForwarding, "1\n");
  ok_ = absl::StripAsciiWhitespace(ReadFile(kForwarding)) == "1";
}

HostForwarding::~HostForwarding() {
  if (!before_.empty()) WriteFile(kForwarding, before_ + "\n");
}

}  // namespace testing
}  // namespace pstrain
