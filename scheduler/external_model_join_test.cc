// How the workers of an EXTERNAL model (a PyTorch script's) join a job
// and declare the model, in JobCoordinator with a fake clock: no sockets,
// no threads, no files.
#include <memory>
#include <string>
#include <tuple>
#include <utility>

#include "common/job_spec.h"
#include "gtest/gtest.h"
#include "scheduler/job_coordinator.h"

namespace pstrain {
namespace {

class NoCheckpoints : public CheckpointCatalog {
 public:
  int64_t NewestCompleteSet(const std::vector<int>&, int64_t) override { return 0; }
};

class ExternalModelJoinTest : public ::testing::Test {
 protected:
  void SetUp() override {
    JobSpec job;
    job.mutable_model()->set_kind(EXTERNAL);
    job.set_num_servers(2);
    job.set_num_workers(2);
    job.set_clocks(10);
    job.set_batch_size(8);
    job.set_chunk_bytes(64);
    ApplyJobDefaults(&job);
    ASSERT_TRUE(ValidateJobSpec(job).ok()) << ValidateJobSpec(job);
    coordinator_ = std::make_unique<JobCoordinator>(job, SchedulerPolicy(), &catalog_,
                                                    [](const TraceEvent&) {}, now_);
  }
  absl::StatusOr<RegisterResponse> Join(Role role, const std::string& address) {
    RegisterRequest req;
    req.set_role(role);
    req.set_address(address);
    req.set_incarnation(1);
    return coordinator_->Register(req, now_);
  }
  // A worker's declaration of a two-parameter model.
  static void Declare(RegisterRequest* req, int64_t rows) {
    for (auto [name, n] : {std::pair<const char*, int64_t>{"fc.weight", rows}, {"fc.bias", 10}}) {
      ParamSpec* p = req->add_params();
      p->set_name(name);
      p->add_shape(n);
    }
    req->set_train_size(1000);
  }
  static RegisterRequest Worker(const std::string& address, uint64_t incarnation) {
    RegisterRequest req;
    req.set_role(WORKER);
    req.set_address(address);
    req.set_incarnation(incarnation);
    return req;
  }

  // Two servers and worker 0 (declared) join; worker 1 joins, then fails
  // before it declares, saying `why`: its id.
  int JoinAndFailBeforeDeclaring(const std::string& why) {
    for (const char* server : {"s0", "s1"}) EXPECT_TRUE(Join(SERVER, server).ok());
    RegisterRequest first = Worker("w0", 7);
    Declare(&first, 40);
    EXPECT_TRUE(coordinator_->Register(first, now_).ok());
    RegisterRequest early = Worker("w1", 8);
    early.set_declare_later(true);
    absl::StatusOr<RegisterResponse> joined = coordinator_->Register(early, now_);
    EXPECT_TRUE(joined.ok()) << joined.status();
    if (!joined.ok()) return -1;
    HeartbeatRequest failed;
    failed.set_incarnation(8);
    failed.mutable_status()->set_role(WORKER);
    failed.mutable_status()->set_id(joined->id());
    failed.mutable_status()->set_state(FAILED);
    failed.mutable_status()->set_message(why);
    EXPECT_TRUE(coordinator_->Heartbeat(failed, now_).ok());
    return joined->id();
  }

  NoCheckpoints catalog_;
  absl::Time now_ = absl::FromUnixSeconds(1000);
  std::unique_ptr<JobCoordinator> coordinator_;
};

// An EXTERNAL model: the first worker's parameters become the job's, which
// every later member receives and the durable state holds; a worker that
// declares another list is refused and takes no id.
TEST_F(ExternalModelJoinTest, TheFirstWorkerDeclaresAnExternalModel) {
  absl::StatusOr<RegisterResponse> server = Join(SERVER, "s0");
  ASSERT_TRUE(server.ok());
  EXPECT_EQ(server->job().model().params_size(), 0);  // not declared yet
  const std::string key_before = coordinator_->DurableKey();

  RegisterRequest first;
  first.set_role(WORKER);
  first.set_address("w0");
  first.set_incarnation(1);
  Declare(&first, 40);
  absl::StatusOr<RegisterResponse> w0 = coordinator_->Register(first, now_);
  ASSERT_TRUE(w0.ok()) << w0.status();
  EXPECT_EQ(w0->job().model().params_size(), 2);
  EXPECT_EQ(w0->job().data().train_size(), 1000);
  EXPECT_NE(coordinator_->DurableKey(), key_before);
  EXPECT_EQ(coordinator_->Snapshot().job().model().params(0).name(), "fc.weight");

  RegisterRequest other = first;
  other.set_address("w1");
  other.set_incarnation(2);
  other.clear_params();
  Declare(&other, 41);
  const absl::StatusOr<RegisterResponse> refused = coordinator_->Register(other, now_);
  EXPECT_TRUE(absl::IsFailedPrecondition(refused.status())) << refused.status();
  RegisterRequest builtin = other;
  builtin.clear_params();  // ps_worker
  EXPECT_TRUE(absl::IsFailedPrecondition(coordinator_->Register(builtin, now_).status()));

  RegisterRequest same = first;
  same.set_address("w1");
  same.set_incarnation(3);
  absl::StatusOr<RegisterResponse> w1 = coordinator_->Register(same, now_);
  ASSERT_TRUE(w1.ok()) << w1.status();
  EXPECT_EQ(w1->id(), 1);  // the refused ones took no id
  absl::StatusOr<RegisterResponse> s1 = Join(SERVER, "s1");
  ASSERT_TRUE(s1.ok());
  EXPECT_EQ(s1->job().model().params_size(), 2);
  EXPECT_EQ(coordinator_->state(), RUNNING_JOB);
}

// pstrain.torch.init(): a worker joins before it declares (declare_later)
// and gets its id and the job at once; the job waits for every worker's
// declaration, which is a second Register of the same incarnation with its
// id. A job of a built-in model refuses such a join.
TEST_F(ExternalModelJoinTest, AWorkerJoinsFirstAndDeclaresLater) {
  for (const char* server : {"s0", "s1"}) ASSERT_TRUE(Join(SERVER, server).ok());
  RegisterRequest early = Worker("w0", 7);
  early.set_declare_later(true);
  absl::StatusOr<RegisterResponse> joined = coordinator_->Register(early, now_);
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_EQ(joined->id(), 0);
  EXPECT_EQ(joined->job().num_workers(), 2);
  EXPECT_EQ(joined->job().model().params_size(), 0);

  RegisterRequest other = Worker("w1", 8);
  Declare(&other, 40);
  absl::StatusOr<RegisterResponse> w1 = coordinator_->Register(other, now_);
  ASSERT_TRUE(w1.ok()) << w1.status();
  EXPECT_EQ(w1->id(), 1);
  EXPECT_EQ(coordinator_->state(), WAITING);  // worker 0 has not declared

  // The durable state keeps the join undeclared: a scheduler that takes
  // the job over does not start it without worker 0's model either.
  const SchedulerState saved = coordinator_->Snapshot();
  EXPECT_TRUE(saved.members().workers(0).undeclared());
  EXPECT_FALSE(saved.members().workers(1).undeclared());

  RegisterRequest declared = Worker("w0", 7);
  declared.set_id(0);
  Declare(&declared, 41);
  EXPECT_TRUE(absl::IsFailedPrecondition(coordinator_->Register(declared, now_).status()));
  EXPECT_EQ(coordinator_->state(), WAITING);
  declared.clear_params();
  Declare(&declared, 40);
  absl::StatusOr<RegisterResponse> w0 = coordinator_->Register(declared, now_);
  ASSERT_TRUE(w0.ok()) << w0.status();
  EXPECT_EQ(w0->id(), 0);
  EXPECT_EQ(w0->job().model().params_size(), 2);
  EXPECT_EQ(coordinator_->state(), RUNNING_JOB);
}

// A worker that fails before it declares (the script's error before its
// first batch) gives its place back: the job goes on waiting, and another
// worker takes the place.
TEST_F(ExternalModelJoinTest, AWorkerThatFailsBeforeDeclaringGivesItsPlaceBack) {
  const int left = JoinAndFailBeforeDeclaring("a data error");
  ASSERT_GE(left, 0);
  EXPECT_EQ(coordinator_->state(), WAITING);

  RegisterRequest next = Worker("w2", 9);
  Declare(&next, 40);
  absl::StatusOr<RegisterResponse> taken = coordinator_->Register(next, now_);
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ(taken->id(), left);
  EXPECT_EQ(coordinator_->state(), RUNNING_JOB);
}

// ...but when nobody takes it within the replacement timeout the job,
// which can never start, ends ABORTED saying why (a launcher that started
// every worker it will start would otherwise wait for good).
TEST_F(ExternalModelJoinTest, APlaceLeftBeforeTheStartAndNotTakenEndsTheJob) {
  ASSERT_EQ(JoinAndFailBeforeDeclaring("UnsupportedDtype: parameter 'fc.weight' is torch.bfloat16"),
            1);
  const absl::Time left = now_;
  auto beat_the_others = [&] {
    for (auto [role, id, incarnation] :
         {std::tuple<Role, int, uint64_t>{SERVER, 0, 1}, {SERVER, 1, 1}, {WORKER, 0, 7}}) {
      HeartbeatRequest beat;
      beat.set_incarnation(incarnation);
      beat.mutable_status()->set_role(role);
      beat.mutable_status()->set_id(id);
      beat.mutable_status()->set_state(RUNNING);
      ASSERT_TRUE(coordinator_->Heartbeat(beat, now_).ok());
    }
  };
  const absl::Duration timeout = SchedulerPolicy().replacement_timeout;
  for (now_ = left; now_ <= left + timeout; now_ += absl::Seconds(2)) {
    beat_the_others();
    coordinator_->Tick(now_);
    ASSERT_EQ(coordinator_->state(), WAITING) << "at " << (now_ - left);
  }
  now_ = left + timeout + absl::Seconds(1);
  beat_the_others();
  coordinator_->Tick(now_);
  std::string message;
  EXPECT_EQ(coordinator_->state(&message), ABORTED);
  EXPECT_NE(message.find("could not start: worker 1 left before it"), std::string::npos)
      << message;
  EXPECT_NE(message.find("UnsupportedDtype"), std::string::npos) << message;
}

TEST_F(ExternalModelJoinTest, ABuiltInModelsJobRefusesAJoinThatDeclaresLater) {
  JobSpec job;
  job.mutable_data()->set_dataset(SYNTHETIC);
  job.set_num_servers(1);
  job.set_num_workers(1);
  job.set_clocks(10);
  job.set_batch_size(8);
  ApplyJobDefaults(&job);
  coordinator_ = std::make_unique<JobCoordinator>(job, SchedulerPolicy(), &catalog_,
                                                  [](const TraceEvent&) {}, now_);
  RegisterRequest early = Worker("w0", 7);
  early.set_declare_later(true);
  EXPECT_TRUE(absl::IsFailedPrecondition(coordinator_->Register(early, now_).status()));
}

}  // namespace
}  // namespace pstrain
