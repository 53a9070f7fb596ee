// A parameter server from start to end: the member-daemon skeleton
// (common/member_daemon.h), the chunk store the partition gives it, the
// restore of a checkpoint when it joins a job under way, and the member
// loop (server/member_loop.h) until the job ends. ps_server's main only
// parses flags into a ServerConfig.
#ifndef PSTRAIN_SERVER_SERVER_RUNTIME_H_
#define PSTRAIN_SERVER_SERVER_RUNTIME_H_

#include <cstdint>
#include <string>

#include "common/member_daemon.h"
#include "server/io_queue.h"

namespace pstrain {

struct ServerConfig {
  MemberConfig member;
  std::string trace_file;  // every apply and pull as JSON lines ("" for none)
  int server_threads = 1;  // threads one large optimizer update is split over
  int rpc_threads = 1;     // threads serving pushes and pulls, a completion queue each
  // --offload_dir and --memory_budget: the chunks' state in a file there;
  // the budget shared among the state in memory (server/chunk_memory.h) and
  // the requests and replies in flight (server/memory_plan.h).
  bool shm = true;  // --shm: workers on this host may attach shared memory
  std::string offload_dir;
  int64_t memory_budget = 0;
  bool offload_direct = true;  // O_DIRECT for the file, where it can be had
  IoQueueOptions offload_io;   // requests in flight to the file, their size
  std::string table_spill_dir;  // sparse tables' rows beyond their budgets ("": $TMPDIR)
  // --join: a server added to the running job (a move gives it its share
  // of the chunks at a checkpoint; RegisterRequest.join).
  bool join = false;
};

// Runs the server to the job's end; returns the process's exit code (0 the
// job finished, 1 it was aborted or this server failed, 2 a bad start, 3 no
// scheduler).
int RunServer(const ServerConfig& config);

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_SERVER_RUNTIME_H_
