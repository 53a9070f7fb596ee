// ps_server: holds the chunks of the model the partition gives it.
//
//   ps_server --scheduler=HOST:PORT [--listen=HOST:PORT] [--port_file=F]
//             [--rank=ID] [--server_threads=N] [--rpc_threads=N] [--trace_file=F]
//             [--offload_dir=DIR --memory_budget=BYTES]
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "server/server_runtime.h"

// The member flags (--scheduler, --listen, --port_file, --rank,
// --connect_timeout_s, --heartbeat_interval_ms) are common/member_daemon's.
ABSL_FLAG(std::string, trace_file, "", "write every apply and pull as JSON lines here");
ABSL_FLAG(int, server_threads, static_cast<int>(std::thread::hardware_concurrency()),
          "threads one large optimizer update is split over");
ABSL_FLAG(int, rpc_threads, 1,
          "threads serving pushes and pulls, each on its own completion queue (each one "
          "reads, applies and answers its calls; concurrent pushes of different chunks run "
          "in parallel over them)");

ABSL_FLAG(std::string, offload_dir, "",
          "keep the chunks' weights and optimizer state in a file in this directory, with at "
          "most --memory_budget bytes of them in memory (empty: all in memory)");
ABSL_FLAG(int64_t, memory_budget, 0,
          "with --offload_dir: bytes of chunk state held in memory at once (at least the "
          "largest chunk's; the server says how much when it is less)");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("ps_server --scheduler=HOST:PORT [--listen=HOST:PORT]");
  absl::ParseCommandLine(argc, argv);
  pstrain::ServerConfig config;
  config.member = pstrain::MemberConfigFromFlags(pstrain::SERVER);
  config.trace_file = absl::GetFlag(FLAGS_trace_file);
  config.server_threads = absl::GetFlag(FLAGS_server_threads);
  config.rpc_threads = absl::GetFlag(FLAGS_rpc_threads);
  config.offload_dir = absl::GetFlag(FLAGS_offload_dir);
  config.memory_budget = absl::GetFlag(FLAGS_memory_budget);
  if (!config.offload_dir.empty() && config.memory_budget <= 0) {
    std::fprintf(stderr, "ps_server: --offload_dir needs --memory_budget=BYTES\n");
    return 2;
  }
  return pstrain::RunServer(config);
}
