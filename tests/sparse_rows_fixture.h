// The fixture of the sparse-table tests against real daemons on loopback
// (sparse_rows_test.cc, sparse_rows_state_test.cc): the job with a table,
// clients of its rows, and a cluster of 2 servers and a training worker.
#ifndef PSTRAIN_TESTS_SPARSE_ROWS_FIXTURE_H_
#define PSTRAIN_TESTS_SPARSE_ROWS_FIXTURE_H_

#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/checkpoint_names.h"
#include "common/job_sizes.h"
#include "common/job_spec.h"
#include "common/refused.h"
#include "common/rpc.h"
#include "gtest/gtest.h"
#include "proto/ps.grpc.pb.h"
#include "scheduler/manifest.h"
#include "server/sparse_table.h"
#include "server/sparse_tables.h"
#include "server/table_checkpoint.h"
#include "tests/cluster.h"
#include "tests/test_jobs.h"
#include "tests/wait.h"
#include "tools/export.h"
#include "worker/row_client.h"

namespace pstrain {
namespace testing {
namespace sparse_rows {

constexpr char kTable[] = R"pb(
  tables {
    name: "words"
    width: 8
    num_ids: 100000
    optimizer { type: ADAM learning_rate: 0.05 }
  }
)pb";

// The job as the daemons run it (defaults applied).
inline JobSpec TheJob(const std::string& text) {
  absl::StatusOr<JobSpec> job = ParseJobSpecText(text, "job");
  EXPECT_TRUE(job.ok()) << job.status();
  ApplyJobDefaults(&*job);
  EXPECT_TRUE(ValidateJobSpec(*job).ok());
  return *job;
}

// A row client of the servers at `servers` for worker `worker`: a pull
// waits up to 2 minutes for its read guarantee; a server that cannot be
// reached is retried for 30 s.
inline RowClient Client(JobSpec job, std::vector<std::string> servers, int worker) {
  job.set_num_servers(static_cast<int>(servers.size()));  // as the cluster runs it
  RowClientOptions options;
  options.call_timeout = absl::Minutes(2);
  options.retry_window = absl::Seconds(30);
  return RowClient(
      job, [servers] { return servers; }, worker, options);
}

// A row call of iteration `clock` in generation `generation`.
inline RowCall At(int64_t clock, int64_t generation = 0) {
  RowCall call;
  call.clock = clock;
  call.generation = generation;
  return call;
}

class SparseRowsTest : public ::testing::Test {
 protected:
  // The job with `workers` training workers (their dense MLP; the test
  // pulls and pushes the table as those workers).
  void StartJob(int workers, const char* tables = kTable) {
    job_text_ = SixteenClassJob(absl::StrCat("clocks: 100000\nseed: 11\n", tables));
    ClusterOptions options;
    options.job_text = job_text_;
    options.servers = 2;
    options.workers = workers;
    options.worker_flags.assign(workers, {"--straggler=fixed:5"});
    ASSERT_TRUE(cluster_.Start(options).ok()) << cluster_.Logs();
    // Once the worker trains, both servers serve the job (and its tables).
    ASSERT_TRUE(WaitForStatus(
        cluster_.scheduler_address(), [](const ClusterStatus& st) { return SlowestClock(st) >= 2; },
        absl::Seconds(60)))
        << cluster_.Logs();
    absl::StatusOr<ClusterStatus> st = SchedulerStatus(cluster_.scheduler_address());
    ASSERT_TRUE(st.ok());
    for (int id = 0; id < 2; ++id) servers_.push_back(MemberOf(*st, SERVER, id).address());
  }

  // The job of kTable checkpointing every 2 clocks into a fresh directory
  // under TEST_TMPDIR (checkpoint_dir_).
  void StartCheckpointingJob() {
    const char* tmp = std::getenv("TEST_TMPDIR");
    checkpoint_dir_ = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/sparse_checkpoints");
    std::filesystem::remove_all(checkpoint_dir_);
    StartJob(
        1, absl::StrCat("checkpoint_every: 2\ncheckpoint_dir: \"", checkpoint_dir_, "\"\n", kTable)
               .c_str());
  }

  // The table trained for 4 clocks as worker 0 (300 ids a clock,
  // overlapping) and beside it `reference`, until the scheduler's manifest
  // names clock 4 (the table's clock: the manifest can go no further).
  void TrainAndCheckpoint(SparseTable* reference, std::vector<uint64_t>* touched) {
    RowClient client = Client(TheJob(job_text_), servers_, 0);
    for (int c = 0; c < 4; ++c) {
      std::vector<uint64_t> ids;
      for (uint64_t i = 0; i < 300; ++i) ids.push_back((c * 200 + i * 13) % 100000);
      touched->insert(touched->end(), ids.begin(), ids.end());
      std::vector<float> rows, scratch(ids.size() * 8);
      ASSERT_TRUE(client.Pull("words", At(c), ids, &rows).ok()) << cluster_.Logs();
      std::vector<float> grads(ids.size() * 8);
      for (size_t i = 0; i < grads.size(); ++i) grads[i] = std::sin(0.3f * c + 0.01f * i);
      ASSERT_TRUE(client.Push("words", At(c), 1, ids, grads).ok());
      ASSERT_TRUE(reference->Pull(ids, scratch.data()).ok());
      ASSERT_TRUE(reference->Push(ids, grads).ok());
    }
    absl::StatusOr<std::optional<Manifest>> manifest;
    for (const absl::Time end = absl::Now() + absl::Seconds(60); absl::Now() < end;
         absl::SleepFor(absl::Milliseconds(100))) {
      manifest = ReadManifest(checkpoint_dir_);
      if (manifest.ok() && manifest->has_value() && (*manifest)->clock >= 4) break;
    }
    ASSERT_TRUE(manifest.ok() && manifest->has_value()) << cluster_.Logs();
    ASSERT_EQ((*manifest)->clock, 4) << "the table reached clock 4, not beyond";
  }

  static TableConfig ReferenceConfig(const JobSpec& job) {
    return TableConfig{"words", 8, job.tables(0).init_scale(), job.seed(),
                       RowOptimizerOf(job.tables(0).optimizer())};
  }

  Cluster cluster_{"sparse_rows"};
  std::string checkpoint_dir_;
  std::string job_text_;
  std::vector<std::string> servers_;  // by id
};

}  // namespace sparse_rows
}  // namespace testing
}  // namespace pstrain

#endif  // PSTRAIN_TESTS_SPARSE_ROWS_FIXTURE_H_
