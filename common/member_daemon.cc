#include "common/member_daemon.h"

#include <chrono>
#include <utility>

#include "absl/flags/flag.h"
#include "common/daemon.h"
#include "common/flags.h"
#include "common/listen.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/security.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, scheduler, "", "the scheduler's HOST:PORT (required)");
ABSL_FLAG(std::string, listen, "127.0.0.1:0", "HOST:PORT to serve on; port 0 lets the OS choose");
ABSL_FLAG(std::string, port_file, "", "write the bound HOST:PORT to this file");
ABSL_FLAG(int64_t, connect_timeout_s, 60,
          "seconds to keep retrying an unreachable scheduler at start-up (1..86400)");
ABSL_FLAG(int64_t, heartbeat_interval_ms, 500, "milliseconds between heartbeats (10..60000)");
ABSL_FLAG(int64_t, scheduler_timeout_ms, 30000,
          "how long a member keeps retrying a scheduler it lost (heartbeats, the gate) before "
          "it exits (1); a restarted scheduler has this long to be back (100..86400000)");
ABSL_FLAG(int64_t, id, 0,
          "take over this id from a failed member of the same role (a server: its checkpoint "
          "is loaded and the cluster rolls back to it; a worker: under "
          "--on_worker_failure=wait); not given: the next free id, or a dead member's");
ABSL_FLAG(bool, replace_live, false,
          "with --id: take that id even from a member that is live and answering (it is "
          "evicted; for a server the cluster rolls back); without it such a registration is "
          "refused, exit 3");
ABSL_FLAG(std::optional<int>, metrics_port, std::nullopt,
          "serve Prometheus metrics on http://HOST:PORT/metrics, HOST being --listen's (0: the "
          "OS picks a port, shown in Status as metrics_address); not given: no metrics");

namespace pstrain {

MemberConfig MemberConfigFromFlags(Role role) {
  absl::StatusOr<MemberConfig> c = CheckedMemberConfigFromFlags(role);
  ExitOnBadFlag(c.status());
  return *std::move(c);
}

absl::StatusOr<MemberConfig> CheckedMemberConfigFromFlags(Role role) {
  MemberConfig c;
  c.role = role;
  c.scheduler = absl::GetFlag(FLAGS_scheduler);
  c.listen = absl::GetFlag(FLAGS_listen);
  c.port_file = absl::GetFlag(FLAGS_port_file);
  const std::optional<int64_t> id = GivenFlag(FLAGS_id);
  c.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  RETURN_IF_ERROR(CheckFlagRanges({
      {"connect_timeout_s", absl::GetFlag(FLAGS_connect_timeout_s), 1, 86400},
      {"heartbeat_interval_ms", absl::GetFlag(FLAGS_heartbeat_interval_ms), 10, 60000},
      {"scheduler_timeout_ms", absl::GetFlag(FLAGS_scheduler_timeout_ms), 100, 86400000},
      {"id", id, 0, 65535},
      {"metrics_port", c.metrics_port, 0, 65535},
  }));
  c.connect_timeout = absl::Seconds(absl::GetFlag(FLAGS_connect_timeout_s));
  c.heartbeat_interval = absl::Milliseconds(absl::GetFlag(FLAGS_heartbeat_interval_ms));
  c.scheduler_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_scheduler_timeout_ms));
  c.id = id.has_value() ? static_cast<int>(*id) : -1;
  c.replace_live = absl::GetFlag(FLAGS_replace_live);
  if (c.replace_live && c.id < 0) {
    return absl::InvalidArgumentError("--replace_live takes the place of --id's member: give --id");
  }
  return c;
}

absl::StatusOr<std::unique_ptr<MemberDaemon>> MemberDaemon::Start(
    const MemberConfig& config, const std::vector<grpc::Service*>& services, int* exit_code) {
  *exit_code = 2;
  auto fail = [](const absl::Status& st) {
    spdlog::error("{}", st.message());
    return st;
  };
  if (absl::Status st = ConfigureSecurityFromFlags(); !st.ok()) return fail(st);
  if (config.scheduler.empty()) {
    return fail(absl::InvalidArgumentError("--scheduler=HOST:PORT is required"));
  }
  absl::StatusOr<Listening> listening =
      ListenAndAnnounce(config.listen, config.port_file, services, config.server);
  if (!listening.ok()) return fail(listening.status());
  spdlog::info("listening on {}", listening->address);
  std::unique_ptr<MemberDaemon> daemon(
      new MemberDaemon(config, std::move(listening->server), listening->address));
  if (config.metrics_port.has_value()) {
    if (absl::Status st = daemon->ServeMetrics(*config.metrics_port); !st.ok()) return fail(st);
  }
  *exit_code = 0;
  return daemon;
}

absl::Status MemberDaemon::ServeMetrics(int port) {
  const HttpStart start = [this](const std::string& host, int on) {
    return HttpServer::Start(host, on, {{"/metrics", [this] {
                                           PrometheusText out;
                                           WriteDaemonMetrics(CurrentStatus(), ProcessLatencies(),
                                                              &out);
                                           return HttpResponse{200, kPrometheusContentType,
                                                               out.text()};
                                         }}});
  };
  absl::StatusOr<std::unique_ptr<HttpServer>> http =
      ServeMetricsPort(config_.listen, port, start, &metrics_address_);
  if (!http.ok()) return http.status();
  metrics_ = std::move(*http);
  spdlog::info("metrics on http://{}/metrics", metrics_address_);
  return absl::OkStatus();
}

MemberStatus MemberDaemon::CurrentStatus() {
  std::function<MemberStatus()> status;
  {
    absl::MutexLock lock(&status_mu_);
    status = status_;
  }
  MemberStatus s;
  if (status) {
    s = status();
  } else {
    s.set_role(config_.role);
    s.set_address(address_);
  }
  s.set_metrics_address(metrics_address_);
  return s;
}

MemberDaemon::MemberDaemon(MemberConfig config, std::unique_ptr<grpc::Server> server,
                           std::string address)
    : config_(std::move(config)), server_(std::move(server)), address_(std::move(address)) {
  SchedulerClientOptions options;
  options.scheduler = config_.scheduler;
  options.role = config_.role;
  options.address = address_;
  options.connect_timeout = config_.connect_timeout;
  options.heartbeat_interval = config_.heartbeat_interval;
  options.scheduler_timeout = config_.scheduler_timeout;
  options.id = config_.id;
  options.replace_live = config_.replace_live;
  client_ = std::make_unique<SchedulerClient>(options);
}

MemberDaemon::~MemberDaemon() { SetOutOfMemoryReport({}); }

absl::StatusOr<RegisterResponse> MemberDaemon::Register(int* exit_code,
                                                        RegisterRequest declared) {
  absl::StatusOr<RegisterResponse> reg = client_->Register(std::move(declared));
  if (!reg.ok()) {
    spdlog::error("{}", reg.status().message());
    *exit_code = 3;
    return reg.status();
  }
  SetLogIdentity(config_.role == SERVER ? "server" : "worker", reg->id());
  // Should an allocation fail anywhere in this process, the scheduler hears
  // why (the job's reason then says so, not a missed heartbeat).
  SetOutOfMemoryReport([this, id = reg->id()] {
    MemberStatus st;
    st.set_role(config_.role);
    st.set_id(id);
    st.set_address(address_);
    st.set_state(FAILED);
    st.set_message("out of memory: an allocation failed");
    (void)client_->SendLastWords(st);
  });
  return reg;
}

void MemberDaemon::StartHeartbeats(std::function<MemberStatus()> status) {
  {
    absl::MutexLock lock(&status_mu_);
    status_ = std::move(status);
  }
  client_->StartHeartbeats([this] { return CurrentStatus(); });
}

void MemberDaemon::ReportFinal(MemberStatus status, MemberState state, const std::string& message) {
  status.set_state(state);
  status.set_message(message);
  (void)client_->ReportFinal(status);
}

void MemberDaemon::Shutdown(absl::Duration grace) {
  if (shut_down_) return;
  shut_down_ = true;
  server_->Shutdown(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(grace));
}

}  // namespace pstrain
