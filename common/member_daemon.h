// The start and the end every member (server or worker) shares: security
// from the flags, the listening gRPC server, the port file, registration
// with the scheduler, heartbeats, the final report. A member's *_main.cc
// parses its own flags, starts a MemberDaemon and puts its logic between
// Register and Finish.
//
// Exit codes (docs/running.md): 2 for a bad command line or a failed start (listen,
// port file), 3 when the scheduler cannot be reached or refuses us.
#ifndef PSTRAIN_COMMON_MEMBER_DAEMON_H_
#define PSTRAIN_COMMON_MEMBER_DAEMON_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <optional>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/http_server.h"
#include "common/rpc.h"
#include "common/scheduler_client.h"
#include "proto/cluster.pb.h"

namespace pstrain {

// The flags every member takes (defined in member_daemon.cc).
struct MemberConfig {
  Role role = ROLE_UNSPECIFIED;
  std::string scheduler;              // --scheduler
  std::string listen;                 // --listen
  std::string port_file;              // --port_file
  absl::Duration connect_timeout;     // --connect_timeout_s
  absl::Duration heartbeat_interval;  // --heartbeat_interval_ms
  absl::Duration scheduler_timeout = absl::Seconds(30);  // --scheduler_timeout_ms
  int id = -1;                         // --id
  bool replace_live = false;           // --replace_live
  std::optional<int> metrics_port;    // --metrics_port: serve /metrics (0: the OS picks)
  ServerOptions server;               // the gRPC server's limits and queues
};

// The member flags of a process of `role`; a value out of range is exit 2
// naming the flag (common/flags.h).
MemberConfig MemberConfigFromFlags(Role role);
// The same, INVALID_ARGUMENT naming the flag instead of an exit (a library
// in another program's process: worker/external).
absl::StatusOr<MemberConfig> CheckedMemberConfigFromFlags(Role role);

class MemberDaemon {
 public:
  // Configures security, starts serving `services`, writes the port file;
  // logs and returns the exit code (2) when it cannot.
  static absl::StatusOr<std::unique_ptr<MemberDaemon>> Start(
      const MemberConfig& config, const std::vector<grpc::Service*>& services, int* exit_code);
  // Takes back the out-of-memory report Register set.
  ~MemberDaemon();

  const std::string& address() const { return address_; }
  grpc::Server* server() { return server_.get(); }
  SchedulerClient& client() { return *client_; }

  // Registers with the scheduler (retrying for --connect_timeout_s); logs
  // and sets *exit_code (3) when it cannot. `declared`: an EXTERNAL
  // model's worker's declaration (SchedulerClient::Register). From then on
  // a failed allocation that ends the process is reported to the
  // scheduler as this member's failure, out of memory
  // (SetOutOfMemoryReport).
  absl::StatusOr<RegisterResponse> Register(int* exit_code, RegisterRequest declared = {});
  // Heartbeats with `status` from now on; /metrics reports it too.
  void StartHeartbeats(std::function<MemberStatus()> status);
  // Where /metrics is served ("" without --metrics_port).
  const std::string& metrics_address() const { return metrics_address_; }
  // The member's end, told to the scheduler (state FINISHED or FAILED,
  // with `message`).
  void ReportFinal(MemberStatus status, MemberState state, const std::string& message);
  // Ends the gRPC server; calls still running after `grace` are cancelled.
  void Shutdown(absl::Duration grace);

 private:
  MemberDaemon(MemberConfig config, std::unique_ptr<grpc::Server> server, std::string address);
  absl::Status ServeMetrics(int port);
  // The status as heartbeats and /metrics report it.
  MemberStatus CurrentStatus();

  const MemberConfig config_;
  std::unique_ptr<grpc::Server> server_;
  const std::string address_;
  std::unique_ptr<SchedulerClient> client_;
  bool shut_down_ = false;
  absl::Mutex status_mu_;
  std::function<MemberStatus()> status_ ABSL_GUARDED_BY(status_mu_);
  std::unique_ptr<HttpServer> metrics_;
  std::string metrics_address_;
};

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_MEMBER_DAEMON_H_
