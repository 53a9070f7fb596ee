// SparseTables' standby copies (server/sparse_tables_standby.cc): a
// primary's parts shipped to a standby copy, which replays them into the
// very rows (admission and spilling included), the acknowledgement that
// waits for the copy, a change that does not follow the copy answered by
// the whole state, and a promoted copy taking pushes of rows the workers
// pulled from its primary.
#include <map>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "common/rows.h"
#include "gtest/gtest.h"
#include "server/sparse_tables.h"

namespace pstrain {
namespace {

JobSpec Job(const std::string& consistency, const std::string& table) {
  absl::StatusOr<JobSpec> job = ParseJobSpecText(
      absl::StrCat("num_servers: 2\nnum_workers: 2\nstandby_copies: 1\nseed: 5\nconsistency: ",
                   consistency, "\n", table),
      "job.pbtxt");
  EXPECT_TRUE(job.ok()) << job.status();
  ApplyJobDefaults(&*job);
  const absl::Status valid = ValidateJobSpec(*job);
  EXPECT_TRUE(valid.ok()) << valid;
  return *job;
}

constexpr char kAdmitted[] = R"pb(tables {
                                    name: "t"
                                    width: 3
                                    admit_after: 2
                                    memory_budget_bytes: 4196304
                                    optimizer { type: ADAM learning_rate: 0.1 }
                                  })pb";
constexpr char kPlain[] = R"pb(tables {
                                 name: "t"
                                 width: 3
                                 optimizer { type: ADAGRAD learning_rate: 0.5 }
                               })pb";

// Collects what a primary ships, by home.
class Collector : public SparseTables::TableSink {
 public:
  void ChangedTable(int home, TableUpdate update) override {
    changes.emplace_back(home, std::move(update));
  }
  void NeedWholeTable(int home, const std::string& table) override {
    whole.emplace_back(home, table);
  }
  std::vector<std::pair<int, TableUpdate>> changes;
  std::vector<std::pair<int, std::string>> whole;
};

// Server 0 serving its part with server 1 as its standby.
struct Pair {
  explicit Pair(const JobSpec& job) : primary(job, 0, 2), standby(job, 1, 2) {
    primary.SetSink(&sink);
    // Routes: each server serves its own rows; each ships to the other.
    primary.standby().SetRoles({true, false}, {true, false});
    standby.standby().SetRoles({false, true}, {false, false});
  }
  // Hands every change shipped so far to the standby; the changes it
  // could not follow are answered with the whole state. Confirms them.
  void Deliver() {
    for (int round = 0; round < 2 && !sink.changes.empty(); ++round) {
      std::vector<std::pair<int, TableUpdate>> changes;
      changes.swap(sink.changes);
      for (auto& [home, u] : changes) {
        bool need_full = false;
        ASSERT_TRUE(standby.Mirror(home, u, &need_full).ok());
        if (need_full) {
          absl::StatusOr<TableUpdate> full = primary.FullUpdate(home, u.table());
          ASSERT_TRUE(full.ok()) << full.status();
          sink.changes.emplace_back(home, *full);
          continue;
        }
        primary.Confirmed(home, u.table(), u.version(), {u.applied().begin(), u.applied().end()});
      }
    }
  }
  Collector sink;
  SparseTables primary, standby;
};

// Server 0's ids below `limit`.
std::vector<uint64_t> Mine(uint64_t limit, uint64_t from = 0) {
  std::vector<uint64_t> ids;
  for (uint64_t id = from; id < limit; ++id) {
    if (ServerOfRow(id, 2) == 0) ids.push_back(id);
  }
  return ids;
}

// A part's rows by id (weights then state), its update count and clock.
struct Rows {
  std::map<uint64_t, std::string> rows;
  int64_t updates = 0, clock = 0;
  std::string seen;
};
Rows RowsOf(SparseTables& tables) {
  absl::StatusOr<TableUpdate> full = tables.FullUpdate(0, "t");
  EXPECT_TRUE(full.ok()) << full.status();
  Rows out;
  const size_t row = full->ids_size() == 0 ? 0 : full->values().size() / full->ids_size();
  for (int i = 0; i < full->ids_size(); ++i) {
    out.rows[full->ids(i)] = full->values().substr(i * row, row);
  }
  out.updates = full->updates();
  out.clock = full->clock();
  out.seen = full->seen();
  return out;
}

void ExpectSame(SparseTables& a, SparseTables& b) {
  const Rows x = RowsOf(a), y = RowsOf(b);
  EXPECT_EQ(x.updates, y.updates);
  EXPECT_EQ(x.clock, y.clock);
  EXPECT_EQ(x.seen, y.seen);
  ASSERT_EQ(x.rows.size(), y.rows.size());
  for (const auto& [id, bytes] : x.rows) {
    auto it = y.rows.find(id);
    ASSERT_NE(it, y.rows.end()) << "row " << id;
    EXPECT_EQ(bytes, it->second) << "row " << id << " differs";
  }
}

std::vector<float> Grads(size_t n, int64_t clock, int worker) {
  std::vector<float> g(n * 3);
  for (size_t i = 0; i < g.size(); ++i) g[i] = 0.01f * i - 0.1f * clock + worker;
  return g;
}

// Both workers pull then push server 0's rows for `clocks` clocks; the
// standby gets each change.
void Train(Pair& p, int64_t from, int64_t to) {
  for (int64_t clock = from; clock < to; ++clock) {
    for (int w = 0; w < 2; ++w) {
      const std::vector<uint64_t> ids = Mine(40 + 10 * clock, 10 * clock + w);
      std::vector<float> rows;
      ASSERT_TRUE(p.primary.Pull(w, 0, "t", 0, ids, &rows).ok());
      ASSERT_TRUE(
          p.primary.Push(w, 0, "t", 0, clock, 2 + w, ids, Grads(ids.size(), clock, w)).ok());
    }
    p.Deliver();
  }
}

TEST(SparseTablesStandbyTest, TheStandbyReplaysEveryChangeIntoTheSameRows) {
  for (const char* consistency : {"BSP", "SSP"}) {
    for (const char* table : {kAdmitted, kPlain}) {
      SCOPED_TRACE(absl::StrCat(consistency, " ", table));
      Pair p(Job(consistency, table));
      EXPECT_FALSE(p.standby.standby().Filled());  // filled by its primary
      Train(p, 0, 12);
      EXPECT_TRUE(p.standby.standby().Filled());
      EXPECT_EQ(p.primary.standby().Lag(), 0);
      if (table == kAdmitted) {  // admission and spilling were exercised
        EXPECT_GT(p.primary.Status()[0].rows_on_disk(), 0);
        EXPECT_GT(p.primary.Status()[0].rows_dropped(), 0);
      }
      // Promoted (server 0 died): the copy serves, and holds the same rows.
      p.standby.standby().SetRoles({true, true}, {false, false});
      ExpectSame(p.primary, p.standby);
      EXPECT_GT(RowsOf(p.standby).rows.size(), 10u);
    }
  }
}

TEST(SparseTablesStandbyTest, APushIsReplicatedOnlyOnceTheStandbyConfirmedIt) {
  Pair p(Job("SSP", kPlain));
  const std::vector<uint64_t> ids = Mine(20);
  std::vector<float> rows;
  ASSERT_TRUE(p.primary.Pull(0, 0, "t", 0, ids, &rows).ok());
  ASSERT_TRUE(p.primary.Push(0, 0, "t", 0, 0, 1, ids, Grads(ids.size(), 0, 0)).ok());
  EXPECT_FALSE(p.primary.Replicated(0, "t", 0, 0));
  EXPECT_EQ(p.primary.standby().Lag(), 1);
  p.Deliver();
  EXPECT_TRUE(p.primary.Replicated(0, "t", 0, 0));
  EXPECT_FALSE(p.primary.Replicated(0, "t", 0, 1));
  EXPECT_EQ(p.primary.standby().Lag(), 0);
  // A copy is not served: its pulls and pushes are UNAVAILABLE (retried
  // where the routes say), a row of no held home INVALID_ARGUMENT.
  EXPECT_EQ(p.standby.Pull(0, 0, "t", 0, ids, &rows).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(p.standby.Push(1, 0, "t", 0, 0, 1, ids, Grads(ids.size(), 0, 1)).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(p.primary.Pull(0, 0, "t", 3, ids, &rows).code(), absl::StatusCode::kInvalidArgument);
}

TEST(SparseTablesStandbyTest, AChangeThatDoesNotFollowTheCopyAsksForTheWholeState) {
  Pair p(Job("SSP", kAdmitted));
  Train(p, 0, 3);
  p.standby.standby().ForgetCopies();  // stale, as a server back from a freeze
  EXPECT_FALSE(p.standby.standby().Filled());
  Train(p, 3, 5);  // the next change asks for the whole state, which follows
  EXPECT_TRUE(p.standby.standby().Filled());
  // A late change already held changes nothing; a malformed one is refused.
  absl::StatusOr<TableUpdate> old = p.primary.FullUpdate(0, "t");
  ASSERT_TRUE(old.ok());
  TableUpdate stale = *old;
  stale.set_full(false);
  stale.set_version(1);
  stale.clear_ids();
  stale.clear_values();
  stale.clear_touched();
  bool need_full = false;
  EXPECT_TRUE(p.standby.Mirror(0, stale, &need_full).ok());
  EXPECT_FALSE(need_full);
  TableUpdate bad = *old;
  bad.set_values(bad.values() + "xyz");
  EXPECT_EQ(p.standby.Mirror(0, bad, &need_full).code(), absl::StatusCode::kInvalidArgument);
  bad = *old;
  bad.mutable_applied()->Add(3);
  EXPECT_EQ(p.standby.Mirror(0, bad, &need_full).code(), absl::StatusCode::kInvalidArgument);
  // A primary is no copy.
  EXPECT_EQ(p.primary.Mirror(0, *old, &need_full).code(), absl::StatusCode::kFailedPrecondition);
  // A whole state the copy cannot take (a row twice) leaves it stale, never
  // counted as holding it; the next change fills it again.
  bad = *old;
  bad.set_version(old->version() + 100);
  bad.add_ids(bad.ids(0));
  bad.add_touched(0);
  bad.set_values(old->values() + old->values().substr(0, old->values().size() / old->ids_size()));
  EXPECT_EQ(p.standby.Mirror(0, bad, &need_full).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(p.standby.standby().Filled());
  Train(p, 5, 6);
  EXPECT_TRUE(p.standby.standby().Filled());
  p.standby.standby().SetRoles({true, true}, {false, false});
  ExpectSame(p.primary, p.standby);
}

TEST(SparseTablesStandbyTest, APromotedCopyTakesPushesOfRowsPulledFromItsPrimary) {
  Pair p(Job("BSP", kPlain));
  Train(p, 0, 2);
  // Both workers pull new rows from the primary, which then dies: their
  // pushes go to the promoted copy, which never saw those pulls.
  const std::vector<uint64_t> fresh = Mine(400, 300);
  std::vector<float> pulled, again;
  ASSERT_TRUE(p.primary.Pull(0, 0, "t", 0, fresh, &pulled).ok());
  p.standby.standby().SetRoles({true, true}, {false, false});
  for (int w = 0; w < 2; ++w) {
    ASSERT_TRUE(p.standby.Push(w, 0, "t", 0, 2, 1, fresh, Grads(fresh.size(), 2, w)).ok());
    ASSERT_TRUE(p.primary.Push(w, 0, "t", 0, 2, 1, fresh, Grads(fresh.size(), 2, w)).ok());
  }
  ExpectSame(p.primary, p.standby);
}

}  // namespace
}  // namespace pstrain
