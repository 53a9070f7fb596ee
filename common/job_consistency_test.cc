#include "common/job_consistency.h"

#include <vector>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

JobSpec Job(Consistency c, int staleness = 0) {
  JobSpec job;
  job.set_consistency(c);
  job.set_staleness(staleness);
  return job;
}

ConsistencyChange Change(int64_t clock, Consistency c, int staleness = 0) {
  ConsistencyChange change;
  change.set_clock(clock);
  change.set_consistency(c);
  change.set_staleness(staleness);
  return change;
}

TEST(JobConsistencyTest, TheBoundOfEachMode) {
  EXPECT_EQ(EffectiveStaleness(BSP, 3), 0);
  EXPECT_EQ(EffectiveStaleness(SSP, 3), 3);
  EXPECT_EQ(EffectiveStaleness(ASP, 3), -1);
  EXPECT_EQ(EffectiveStaleness(CONSISTENCY_UNSPECIFIED, 3), 0);
  EXPECT_EQ(EffectiveStaleness(Job(SSP, 2)), 2);
  EXPECT_EQ(EffectiveStaleness(Job(ASP)), -1);
}

TEST(JobConsistencyTest, TheReadGuarantee) {
  EXPECT_EQ(MinClockForRead(5, 0), 5);  // BSP: everything before c
  EXPECT_EQ(MinClockForRead(5, 2), 3);
  EXPECT_EQ(MinClockForRead(1, 2), 0);
  EXPECT_EQ(MinClockForRead(50, -1), 0);  // ASP: nothing
  // A job that never changes its mode reads as its spec says.
  EXPECT_EQ(ConsistencySchedule(Job(BSP)).MinClockForRead(5), 5);
  EXPECT_EQ(ConsistencySchedule(Job(SSP, 2)).MinClockForRead(5), 3);
  EXPECT_EQ(ConsistencySchedule(Job(SSP, 2)).MinClockForRead(1), 0);
  EXPECT_EQ(ConsistencySchedule(Job(ASP)).MinClockForRead(50), 0);
}

TEST(JobConsistencyTest, EachChangeHoldsFromItsClockOn) {
  ConsistencySchedule schedule(Job(BSP));
  schedule.Set({Change(10, SSP, 3), Change(20, ASP)});
  EXPECT_EQ(schedule.ConsistencyAt(9), BSP);
  EXPECT_EQ(schedule.StalenessAt(9), 0);
  EXPECT_EQ(schedule.MinClockForRead(9), 9);
  EXPECT_EQ(schedule.ConsistencyAt(10), SSP);
  EXPECT_EQ(schedule.StalenessAt(15), 3);
  EXPECT_EQ(schedule.MinClockForRead(15), 12);
  EXPECT_EQ(schedule.StalenessAt(20), -1);
  EXPECT_EQ(schedule.MinClockForRead(25), 0);
  EXPECT_EQ(schedule.Latest().consistency(), ASP);
  EXPECT_EQ(ConsistencySchedule(Job(SSP, 4)).Latest().staleness(), 4);
}

// A job's planned switches (JobSpec.consistency_plan) hold from the start,
// as psctl set-consistency's would: BSP for a warm-up, then SSP s = 1.
TEST(JobConsistencyTest, APlannedChangeHoldsFromItsClockOn) {
  JobSpec job = Job(BSP);
  *job.add_consistency_plan() = Change(100, SSP, 1);
  const ConsistencySchedule schedule(job);
  EXPECT_EQ(schedule.MinClockForRead(99), 99);
  EXPECT_EQ(schedule.ConsistencyAt(100), SSP);
  EXPECT_EQ(schedule.MinClockForRead(150), 149);
  EXPECT_TRUE(EverStale(job));
  EXPECT_FALSE(EverStale(Job(BSP)));
  EXPECT_TRUE(EverStale(Job(SSP, 1)));
  EXPECT_FALSE(EverStale(Job(SSP, 0)));
}

TEST(JobConsistencyTest, TablesKeepTheirOwnMode) {
  JobSpec job = Job(BSP);
  job.set_table_consistency(ASP);  // asynchronous tables beside synchronous dense training
  EXPECT_EQ(TableConsistency(job), ASP);
  EXPECT_EQ(TableMinClockForRead(job, 5), 0);
  EXPECT_EQ(ConsistencySchedule(job).MinClockForRead(5), 5);
  job.set_table_consistency(SSP);
  job.set_staleness(1);
  EXPECT_EQ(TableMinClockForRead(job, 5), 4);
  job.clear_table_consistency();  // the job's
  EXPECT_EQ(TableConsistency(job), BSP);
  EXPECT_EQ(TableMinClockForRead(job, 5), 5);
  EXPECT_EQ(TableConsistency(JobSpec()), BSP);
}

// The schedule and the tables decide through the same two functions: under
// one mode, all three say the same.
TEST(JobConsistencyTest, EveryPathAgrees) {
  for (Consistency c : {BSP, SSP, ASP}) {
    JobSpec job = Job(c, c == SSP ? 2 : 0);
    job.set_table_consistency(c);
    const ConsistencySchedule schedule(job);
    for (int64_t clock = 0; clock < 8; ++clock) {
      EXPECT_EQ(schedule.StalenessAt(clock), EffectiveStaleness(job));
      const int64_t min_clock = MinClockForRead(clock, EffectiveStaleness(job));
      EXPECT_EQ(schedule.MinClockForRead(clock), min_clock) << c << " " << clock;
      EXPECT_EQ(TableMinClockForRead(job, clock), min_clock) << c << " " << clock;
    }
  }
}

// The rules a change of mode meets, whether the job's plan or psctl asks.
TEST(JobConsistencyTest, ChangesAreToAModeWithItsStaleness) {
  EXPECT_TRUE(CheckConsistencyChange(SSP, 0).ok());
  EXPECT_TRUE(CheckConsistencyChange(SSP, 3).ok());
  EXPECT_TRUE(CheckConsistencyChange(BSP, 0).ok());
  EXPECT_TRUE(CheckConsistencyChange(ASP, 0).ok());
  EXPECT_EQ(CheckConsistencyChange(SSP, -1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckConsistencyChange(BSP, 2).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckConsistencyChange(ASP, 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckConsistencyChange(CONSISTENCY_UNSPECIFIED, 0).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(JobConsistencyTest, PipelinesAndClippedBspKeepTheirMode) {
  JobSpec job = Job(BSP, 0);
  EXPECT_FALSE(ConsistencyIsFixed(job));
  job.mutable_optimizer()->set_clip_norm(1.0);
  EXPECT_TRUE(ConsistencyIsFixed(job));
  job.set_consistency(SSP);  // SSP clips per push: its mode may change
  EXPECT_FALSE(ConsistencyIsFixed(job));
  job.set_pipeline_stages(2);
  EXPECT_TRUE(ConsistencyIsFixed(job));
}

}  // namespace
}  // namespace pstrain
