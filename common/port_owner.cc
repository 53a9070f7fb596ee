#include "common/port_owner.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace pstrain {
namespace {

constexpr char kListen[] = "0A";  // TCP_LISTEN in /proc/net/tcp

// `host` as /proc/net/tcp{,6} print a local address (the raw words of the
// address in %08X), or "" when it names no one numeric address (a name, a
// wildcard: any listener on the port may be the one in the way).
std::string ProcAddress(const std::string& host, bool* ipv6) {
  std::string h = host;
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  in6_addr a6;
  in_addr a4;
  std::string out;
  if (inet_pton(AF_INET, h.c_str(), &a4) == 1) {
    *ipv6 = false;
    if (a4.s_addr != 0) out = absl::StrFormat("%08X", a4.s_addr);
  } else if (inet_pton(AF_INET6, h.c_str(), &a6) == 1) {
    *ipv6 = true;
    uint32_t words[4];
    std::memcpy(words, &a6, sizeof(words));
    if ((words[0] | words[1] | words[2] | words[3]) != 0) {
      out = absl::StrFormat("%08X%08X%08X%08X", words[0], words[1], words[2], words[3]);
    }
  }
  return out;
}

// The inodes of the listening sockets on `port` in a /proc/net/tcp table
// that may hold `address` (ProcAddress; "" for any): bound to it or to the
// table's wildcard.
void ListeningInodes(const std::string& table, const std::string& address, int port,
                     std::set<std::string>* inodes) {
  std::ifstream in(table);
  std::string line;
  std::getline(in, line);  // the header
  while (std::getline(in, line)) {
    // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
    const std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f.size() < 10 || f[3] != kListen) continue;
    const size_t colon = f[1].rfind(':');
    if (colon == std::string::npos) continue;
    if (std::strtol(f[1].c_str() + colon + 1, nullptr, 16) != port) continue;
    const std::string local = f[1].substr(0, colon);
    const bool wildcard = local.find_first_not_of('0') == std::string::npos;
    if (address.empty() || wildcard || local == address) inodes->insert(f[9]);
  }
}

// The pid of a process holding one of the sockets `inodes`, or -1.
int HolderOf(const std::set<std::string>& inodes) {
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return -1;
  int found = -1;
  for (dirent* e = readdir(proc); e != nullptr && found < 0; e = readdir(proc)) {
    int pid = 0;
    if (!absl::SimpleAtoi(e->d_name, &pid) || pid == getpid()) continue;
    const std::string fds = absl::StrCat("/proc/", pid, "/fd");
    DIR* dir = opendir(fds.c_str());
    if (dir == nullptr) continue;
    for (dirent* fd = readdir(dir); fd != nullptr && found < 0; fd = readdir(dir)) {
      char target[128];
      const std::string link = absl::StrCat(fds, "/", fd->d_name);
      const ssize_t n = readlink(link.c_str(), target, sizeof(target) - 1);
      if (n <= 0) continue;
      absl::string_view t(target, n);
      if (absl::ConsumePrefix(&t, "socket:[") && absl::ConsumeSuffix(&t, "]") &&
          inodes.count(std::string(t)) > 0) {
        found = pid;
      }
    }
    closedir(dir);
  }
  closedir(proc);
  return found;
}

std::string CommandLine(int pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/cmdline"), std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string cmd = absl::StrReplaceAll(absl::StripSuffix(raw, std::string(1, '\0')),
                                        {{std::string(1, '\0'), " "}});
  const size_t slash = cmd.substr(0, cmd.find(' ')).rfind('/');
  if (slash != std::string::npos) cmd = cmd.substr(slash + 1);  // the program's base name
  if (cmd.size() > 160) cmd = cmd.substr(0, 160) + " ...";
  return cmd;
}

}  // namespace

std::string PortOwner(const std::string& host, int port) {
  bool ipv6 = false;
  const std::string address = ProcAddress(host, &ipv6);
  std::set<std::string> inodes;
  // An IPv4 address stands in tcp6 mapped (gRPC listens on IPv6 sockets
  // where it can); an IPv6 one meets only the IPv4 wildcard.
  const std::string v4 = address.empty() || !ipv6 ? address : "-";
  const std::string v6 = address.empty() || ipv6 ? address : "0000000000000000FFFF0000" + address;
  ListeningInodes("/proc/net/tcp", v4, port, &inodes);
  ListeningInodes("/proc/net/tcp6", v6, port, &inodes);
  if (inodes.empty()) return "";
  const int pid = HolderOf(inodes);
  if (pid < 0) return "another process";
  return absl::StrCat("pid ", pid, " (", CommandLine(pid), ")");
}

}  // namespace pstrain
