// Network namespaces for multi-process tests and benches: a namespace joined
// to the host's by a veth pair on a /30 of its own, optionally shaped to a
// fixed rate each way (tc tbf), with a default route through the host so
// that namespaces reach each other when the host forwards. Needs root and
// iproute2 (Netns::Unavailable says why not).
#ifndef PSTRAIN_TESTS_NETNS_H_
#define PSTRAIN_TESTS_NETNS_H_

#include <string>
#include <vector>

namespace pstrain {
namespace testing {

extern const char kIp[];  // /usr/sbin/ip

class Netns {
 public:
  // Why namespaces cannot be made here, or an empty string.
  static std::string Unavailable();

  // Namespace `index` of this process (0..99). error() says what failed.
  explicit Netns(int index);
  ~Netns();  // removes the namespace and the pair
  Netns(const Netns&) = delete;
  Netns& operator=(const Netns&) = delete;

  // Sets the host end of the pair down (the namespace is cut off) or up.
  bool SetLink(bool up);
  // Shapes both ends to `mbit` Mbit/s (tbf); false on failure (error()).
  bool Shape(int mbit);
  // The command prefix that runs a program in the namespace.
  std::vector<std::string> Prefix() const { return {kIp, "netns", "exec", name_}; }

  const std::string& error() const { return error_; }
  const std::string& name() const { return name_; }
  const std::string& host_ip() const { return host_ip_; }
  const std::string& ns_ip() const { return ns_ip_; }

 private:
  bool Run(const std::vector<std::string>& argv);
  std::string name_, host_if_, ns_if_, host_ip_, ns_ip_, error_;
};

// Turns the host's IPv4 forwarding on while it lives (namespaces reach each
// other through the host), and back to what it was.
class HostForwarding {
 public:
  HostForwarding();
  ~HostForwarding();
  bool ok() const { return ok_; }

 private:
  std::string before_;
  bool ok_ = false;
};

}  // namespace testing
}  // namespace pstrain

#endif  // PSTRAIN_TESTS_NETNS_H_
