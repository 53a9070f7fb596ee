// ReadPlan: where each clock's weights come from (the cache, the prefetch,
// a pull with the gate call or after it) and whether the clock waits for
// its gate, per consistency model.
#include "worker/read_plan.h"

#include "gtest/gtest.h"

namespace pstrain {
namespace {

JobSpec Job(Consistency consistency, int64_t staleness = 0) {
  JobSpec job;
  job.set_consistency(consistency);
  job.set_staleness(staleness);
  return job;
}

TEST(ReadPlanTest, SspServesFromTheCacheWhileTheWeightsHoldTheReadGuarantee) {
  const ConsistencySchedule schedule(Job(SSP, 2));
  ReadPlan plan(&schedule, /*overlap=*/false, /*stages=*/1);
  EXPECT_FALSE(plan.CacheServes(2));  // nothing read yet
  // Clock 0's read held every update before clock 0 of workers 0 and 1.
  plan.Note({0, 0}, {0, 1});
  // A read for c needs the updates before c - 2: clocks 0..2 are served.
  EXPECT_EQ(plan.Source(1, /*connected=*/true, /*prefetched=*/false), WeightSource::kCache);
  EXPECT_EQ(plan.Source(2, true, false), WeightSource::kCache);
  EXPECT_EQ(plan.Source(3, true, false), WeightSource::kPullAfterGate);
  EXPECT_FALSE(plan.Prefetches(2));
  EXPECT_TRUE(plan.Prefetches(3));
  // The least over the live workers counts; a worker the read knows
  // nothing of empties the cache.
  plan.Note({5, 3}, {0, 1});
  EXPECT_TRUE(plan.CacheServes(5));
  EXPECT_FALSE(plan.CacheServes(6));
  plan.Note({5, 3}, {0});  // worker 1 is dead: only worker 0's count
  EXPECT_TRUE(plan.CacheServes(7));
  plan.Note({5, 3}, {0, 1, 2});
  EXPECT_FALSE(plan.CacheServes(1));
  plan.Note({5, 5}, {0, 1});
  plan.Forget();  // a rollback: weights of another generation
  EXPECT_FALSE(plan.CacheServes(1));
}

TEST(ReadPlanTest, BspAndAspNeverUseTheCache) {
  for (const Consistency c : {BSP, ASP}) {
    const ConsistencySchedule schedule(Job(c));
    ReadPlan plan(&schedule, /*overlap=*/false, 1);
    plan.Note({100}, {0});
    EXPECT_FALSE(plan.CacheServes(1)) << Consistency_Name(c);
    EXPECT_EQ(plan.Source(1, true, false), WeightSource::kPullAfterGate);
  }
}

TEST(ReadPlanTest, APrefetchWinsAndOverlapPullsWithTheGate) {
  const ConsistencySchedule schedule(Job(SSP, 1));
  ReadPlan plan(&schedule, /*overlap=*/true, 1);
  EXPECT_EQ(plan.Source(4, true, /*prefetched=*/true), WeightSource::kPrefetch);
  EXPECT_EQ(plan.Source(4, true, false), WeightSource::kPullWithGate);
  // Not connected yet: no clients, no cache, no prefetch -- a pull once the
  // gate answered with the cluster.
  EXPECT_EQ(plan.Source(0, /*connected=*/false, false), WeightSource::kPullAfterGate);
}

TEST(ReadPlanTest, AConnectedWorkerWithoutStagesGoesOnWithoutTheGateUnderEveryConsistency) {
  const ConsistencySchedule bsp(Job(BSP)), ssp(Job(SSP, 1)), asp(Job(ASP));
  EXPECT_FALSE(ReadPlan(&bsp, false, 1).AwaitsGate(/*connected=*/true));
  EXPECT_FALSE(ReadPlan(&ssp, false, 1).AwaitsGate(true));
  EXPECT_FALSE(ReadPlan(&asp, false, 1).AwaitsGate(true));
  EXPECT_TRUE(ReadPlan(&bsp, false, 1).AwaitsGate(/*connected=*/false));
  EXPECT_TRUE(ReadPlan(&bsp, false, /*stages=*/2).AwaitsGate(true));
  EXPECT_TRUE(ReadPlan(&ssp, false, /*stages=*/2).AwaitsGate(true));
}

}  // namespace
}  // namespace pstrain
