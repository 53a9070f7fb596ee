// ps_server: holds the chunks of the model the partition gives it.
//
//   ps_server --scheduler=HOST:PORT [--listen=HOST:PORT] [--port_file=F]
//             [--id=ID] [--server_threads=N] [--rpc_threads=N] [--trace_file=F]
//             [--offload_dir=DIR --memory_budget=BYTES [--nooffload_direct]
//              [--offload_io_depth=8] [--offload_request_kb=4096]]
#include <cstdint>
#include <optional>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "common/flags.h"
#include "server/server_runtime.h"

// The member flags (--scheduler, --listen, --port_file, --id,
// --connect_timeout_s, --heartbeat_interval_ms) are common/member_daemon's.
ABSL_FLAG(std::string, trace_file, "", "write every apply and pull as JSON lines here");
ABSL_FLAG(int64_t, server_threads, static_cast<int>(std::thread::hardware_concurrency()),
          "threads one large optimizer update is split over (1..1024; default: the cores)");
ABSL_FLAG(int64_t, rpc_threads, 1,
          "threads serving pushes and pulls, each on its own completion queue (each one "
          "reads, applies and answers its calls; concurrent pushes of different chunks run "
          "in parallel over them; 1..64)");

ABSL_FLAG(bool, shm, true,
          "give workers on this host shared memory for their pushes and pulls (anonymous "
          "segments passed over an abstract Unix socket to workers that asked over their "
          "authenticated gRPC connection); --noshm: payloads always in gRPC messages. Off "
          "with --offload_dir (segments would lie outside --memory_budget)");
ABSL_FLAG(std::string, offload_dir, "",
          "keep the chunks' weights and optimizer state in a file in this directory, with at "
          "most --memory_budget bytes of them in memory (empty: all in memory)");
ABSL_FLAG(bool, offload_direct, true,
          "with --offload_dir: read and write the file with O_DIRECT, to and from the device "
          "rather than through the page cache (where a page cannot be written and read back "
          "that way, the page cache is used; Status says which)");
ABSL_FLAG(int64_t, offload_io_depth, 8,
          "with --offload_dir: file requests in flight at once (threads issuing them); "
          "reads ahead and writes behind share them");
ABSL_FLAG(int64_t, offload_request_kb, 4096,
          "with --offload_dir: the largest file request, KiB (a multiple of 4)");
ABSL_FLAG(bool, join, false,
          "join a running job as a server it did not start with: the scheduler moves its "
          "share of the chunks to it at a checkpoint a few clocks ahead (the job needs "
          "checkpoints); refused, exit 2, with the reason when the job cannot take it");
ABSL_FLAG(std::string, table_spill_dir, "",
          "where sparse tables with a memory budget (TableSpec.memory_budget_bytes) keep the "
          "rows they hold beyond it, a file per table removed as it is made (empty: $TMPDIR, "
          "else /tmp)");
ABSL_FLAG(int64_t, memory_budget, 0,
          "with --offload_dir: bytes of memory for the chunk state held at once (3/4) and the "
          "push requests and pull replies in flight (1/8 each), so that the process holds this "
          "plus a fixed overhead (the server says the least budget that works when it is less)");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("ps_server --scheduler=HOST:PORT [--listen=HOST:PORT]");
  pstrain::ParseFlagsOrExit(argc, argv);
  pstrain::ServerConfig config;
  config.member = pstrain::MemberConfigFromFlags(pstrain::SERVER);
  const std::optional<int64_t> budget = pstrain::GivenFlag(FLAGS_memory_budget);
  pstrain::ExitOnBadFlag(pstrain::CheckFlagRanges({
      {"server_threads", absl::GetFlag(FLAGS_server_threads), 1, 1024},
      {"rpc_threads", absl::GetFlag(FLAGS_rpc_threads), 1, 64},
      {"memory_budget", budget, 1},
      {"offload_io_depth", absl::GetFlag(FLAGS_offload_io_depth), 1, 256},
      {"offload_request_kb", absl::GetFlag(FLAGS_offload_request_kb), 4, 1 << 20},
  }));
  if (absl::GetFlag(FLAGS_offload_request_kb) % 4 != 0) {
    pstrain::ExitOnBadFlag(absl::InvalidArgumentError(
        "--offload_request_kb must be a multiple of 4 (whole pages, as O_DIRECT moves)"));
  }
  pstrain::ExitOnBadFlag(pstrain::CheckFlagNotEmpty(
      "offload_dir", pstrain::GivenFlag(FLAGS_offload_dir), "a directory"));
  config.trace_file = absl::GetFlag(FLAGS_trace_file);
  config.server_threads = static_cast<int>(absl::GetFlag(FLAGS_server_threads));
  config.rpc_threads = static_cast<int>(absl::GetFlag(FLAGS_rpc_threads));
  pstrain::ExitOnBadFlag(pstrain::CheckFlagNotEmpty(
      "table_spill_dir", pstrain::GivenFlag(FLAGS_table_spill_dir), "a directory"));
  config.table_spill_dir = absl::GetFlag(FLAGS_table_spill_dir);
  config.offload_dir = absl::GetFlag(FLAGS_offload_dir);
  config.offload_direct = absl::GetFlag(FLAGS_offload_direct);
  config.offload_io.depth = static_cast<int>(absl::GetFlag(FLAGS_offload_io_depth));
  config.offload_io.request_bytes = absl::GetFlag(FLAGS_offload_request_kb) << 10;
  config.shm = absl::GetFlag(FLAGS_shm);
  config.join = absl::GetFlag(FLAGS_join);
  config.memory_budget = absl::GetFlag(FLAGS_memory_budget);
  if (config.offload_dir.empty() != !budget.has_value()) {
    pstrain::ExitOnBadFlag(absl::InvalidArgumentError(
        "--offload_dir and --memory_budget=BYTES go together"));
  }
  return pstrain::RunServer(config);
}
