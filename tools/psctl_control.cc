#include "tools/psctl_control.h"

#include <cstdio>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "common/enum_names.h"

namespace pstrain {

int WaitForCheckpoint(const Endpoint& scheduler, int64_t clock, bool drain, int wait_s) {
  const absl::Time until = absl::Now() + absl::Seconds(wait_s);
  while (absl::Now() < until) {
    ClusterStatus st;
    const grpc::Status rpc = FetchStatus(scheduler, &st);
    if (!rpc.ok() && drain && rpc.error_code() == grpc::StatusCode::UNAVAILABLE) return 0;
    if (!rpc.ok()) return FailCall(scheduler.address, rpc);
    if (st.job_state() == ABORTED) {
      std::fprintf(stderr, "psctl: the job was aborted: %s\n", st.message().c_str());
      return 1;
    }
    if (st.manifest_clock() >= clock && (!drain || st.job_state() == DONE)) return 0;
    absl::SleepFor(absl::Milliseconds(200));
  }
  std::fprintf(stderr, "psctl: no complete checkpoint of clock %lld after %d s\n",
               static_cast<long long>(clock), wait_s);
  return 1;
}

int Control(const Endpoint& scheduler, ControlAction action, const ControlOptions& options) {
  ControlRequest req;
  req.set_action(action);
  int64_t clock = 0;
  if (const grpc::Status rpc = AskControl(scheduler, req, &clock); !rpc.ok()) {
    return FailCall(scheduler.address, rpc);
  }
  if (options.json) {
    std::printf("{\"action\": \"%s\", \"clock\": %lld}\n", ControlAction_Name(action).c_str(),
                static_cast<long long>(clock));
  } else if (action == STOP) {
    std::printf("stopped at clock %lld\n", static_cast<long long>(clock));
  } else {
    std::printf("checkpoint of clock %lld asked for%s\n", static_cast<long long>(clock),
                action == DRAIN ? "; the job ends there once the manifest names it" : "");
  }
  if (action == STOP || !options.wait) return 0;
  return WaitForCheckpoint(scheduler, clock, action == DRAIN, options.wait_s);
}

namespace {

// Waits up to `wait_s` seconds until the drain of `server` ended; 0
// switched, 1 abandoned, the job aborted, a call failed or the time ran out.
int WaitForDrain(const Endpoint& scheduler, int server, int wait_s) {
  const absl::Time until = absl::Now() + absl::Seconds(wait_s);
  while (absl::Now() < until) {
    ClusterStatus st;
    if (const grpc::Status rpc = FetchStatus(scheduler, &st); !rpc.ok()) {
      return FailCall(scheduler.address, rpc);
    }
    if (st.job_state() == ABORTED) {
      std::fprintf(stderr, "psctl: the job was aborted: %s\n", st.message().c_str());
      return 1;
    }
    const auto& history = st.placement().history();
    if (!st.placement().has_move() && !history.empty() &&
        history.rbegin()->kind() == DRAIN_SERVER && history.rbegin()->server() == server) {
      const MoveRecord& r = *history.rbegin();
      if (r.abandoned().empty()) return 0;
      std::fprintf(stderr, "psctl: the drain of server %d was abandoned: %s\n", server,
                   r.abandoned().c_str());
      return 1;
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
  std::fprintf(stderr, "psctl: the drain of server %d did not end within %d s\n", server, wait_s);
  return 1;
}

}  // namespace

int DrainServer(const Endpoint& scheduler, const std::string& server_arg,
                const ControlOptions& options) {
  int server = -1;
  if (!absl::SimpleAtoi(server_arg, &server) || server < 0) {
    std::fprintf(stderr, "psctl drain-server: '%s' is not a server id\n", server_arg.c_str());
    return 2;
  }
  ControlRequest req;
  req.set_action(MOVE);
  req.set_move(DRAIN_SERVER);
  req.set_server(server);
  int64_t clock = 0;
  if (const grpc::Status rpc = AskControl(scheduler, req, &clock); !rpc.ok()) {
    FailCall(scheduler.address, rpc);
    // The scheduler refused the drain (its reason printed): as a refused join.
    const grpc::StatusCode c = rpc.error_code();
    const bool refused = c == grpc::StatusCode::FAILED_PRECONDITION ||
                         c == grpc::StatusCode::NOT_FOUND ||
                         c == grpc::StatusCode::INVALID_ARGUMENT;
    return refused ? 2 : 1;
  }
  if (options.json) {
    std::printf(
        "{\"action\": \"MOVE\", \"move\": \"DRAIN_SERVER\", \"server\": %d, "
        "\"clock\": %lld}\n",
        server, static_cast<long long>(clock));
  } else {
    std::printf(
        "server %d drains at the checkpoint of clock %lld; it exits once its chunks are "
        "the others'\n",
        server, static_cast<long long>(clock));
  }
  return options.wait ? WaitForDrain(scheduler, server, options.wait_s) : 0;
}

int SetConsistency(const Endpoint& scheduler, const std::string& mode_flag,
                   std::optional<int> staleness, bool json) {
  const std::string mode = absl::AsciiStrToLower(mode_flag);
  ControlRequest req;
  req.set_action(SET_CONSISTENCY);
  const std::optional<Consistency> consistency = ParseEnumWord<Consistency>(mode);
  if (!consistency.has_value()) {
    std::fprintf(stderr, "psctl set-consistency: --mode=%s: expected bsp, ssp or asp\n",
                 mode.c_str());
    return 2;
  }
  if ((*consistency == SSP) != staleness.has_value() || (staleness.has_value() && *staleness < 0)) {
    std::fprintf(stderr,
                 "psctl set-consistency: --staleness=N (N >= 0) goes with --mode=ssp, and only "
                 "with it\n");
    return 2;
  }
  req.set_consistency(*consistency);
  req.set_staleness(staleness.value_or(0));
  int64_t clock = 0;
  if (const grpc::Status rpc = AskControl(scheduler, req, &clock); !rpc.ok()) {
    return FailCall(scheduler.address, rpc);
  }
  if (json) {
    std::printf("{\"consistency\": \"%s\", \"staleness\": %d, \"clock\": %lld}\n",
                Consistency_Name(req.consistency()).c_str(), req.staleness(),
                static_cast<long long>(clock));
  } else {
    std::printf("%s from clock %lld on\n", absl::AsciiStrToUpper(mode).c_str(),
                static_cast<long long>(clock));
  }
  return 0;
}

}  // namespace pstrain
