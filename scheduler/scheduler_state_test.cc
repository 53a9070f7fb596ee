// SchedulerState as the one durable state of the scheduler. Every field is
// filled by reflection (so a field added later, at any depth, is covered
// without editing this test): a coordinator that takes it over snapshots
// it back unchanged, and a change of any field moves the durability key --
// but a change of a field the members resend (the clock table's clocks,
// the members' last reports). No sockets, no threads, no files.
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "common/params.h"
#include "common/partition.h"
#include "common/placement.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "scheduler/durable_key.h"
#include "scheduler/job_coordinator.h"

namespace pstrain {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::EnumDescriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

constexpr int kMaxDepth = 10;

class NoCheckpoints : public CheckpointCatalog {
 public:
  int64_t NewestCompleteSet(const std::vector<int>&, int64_t) override { return 0; }
};

// Two pipeline replicas of two stages, with checkpoints and standby
// copies: every part of the
// state has something to hold.
JobSpec PipelinedJob() {
  JobSpec job;
  job.mutable_data()->set_dataset(SYNTHETIC);
  job.set_num_servers(2);
  job.set_num_workers(4);
  job.set_pipeline_stages(2);
  job.set_batch_size(8);
  job.set_clocks(100);
  job.set_chunk_bytes(256);
  job.set_checkpoint_every(10);
  job.set_checkpoint_dir("/ckpt");
  job.set_standby_copies(1);
  ApplyJobDefaults(&job);
  return job;
}

// A non-default value of a scalar field: numbers 1, true, "x", the enum's
// first value after the default.
void SetScalar(Message* m, const FieldDescriptor* f) {
  const Reflection* r = m->GetReflection();
  const bool rep = f->is_repeated();
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      rep ? r->AddInt32(m, f, 1) : r->SetInt32(m, f, 1);
      break;
    case FieldDescriptor::CPPTYPE_INT64:
      rep ? r->AddInt64(m, f, 1) : r->SetInt64(m, f, 1);
      break;
    case FieldDescriptor::CPPTYPE_UINT32:
      rep ? r->AddUInt32(m, f, 1) : r->SetUInt32(m, f, 1);
      break;
    case FieldDescriptor::CPPTYPE_UINT64:
      rep ? r->AddUInt64(m, f, 1) : r->SetUInt64(m, f, 1);
      break;
    case FieldDescriptor::CPPTYPE_DOUBLE:
      rep ? r->AddDouble(m, f, 1) : r->SetDouble(m, f, 1);
      break;
    case FieldDescriptor::CPPTYPE_FLOAT:
      rep ? r->AddFloat(m, f, 1) : r->SetFloat(m, f, 1);
      break;
    case FieldDescriptor::CPPTYPE_BOOL:
      rep ? r->AddBool(m, f, true) : r->SetBool(m, f, true);
      break;
    case FieldDescriptor::CPPTYPE_STRING:
      rep ? r->AddString(m, f, "x") : r->SetString(m, f, "x");
      break;
    case FieldDescriptor::CPPTYPE_ENUM: {
      const EnumDescriptor* e = f->enum_type();
      const int v = e->value(e->value_count() > 1 ? 1 : 0)->number();
      rep ? r->AddEnumValue(m, f, v) : r->SetEnumValue(m, f, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_MESSAGE:
      break;
  }
}

// Every field of `m`, at every depth, set to a non-default value; one
// element in each repeated field. Deprecated fields stay unset: they are
// kept only so that old state files still parse, never read or written.
void Fill(Message* m, int depth = 0) {
  ASSERT_LT(depth, kMaxDepth) << m->GetDescriptor()->full_name() << " nests too deep";
  const Descriptor* d = m->GetDescriptor();
  const Reflection* r = m->GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    if (f->options().deprecated()) continue;
    if (f->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) {
      SetScalar(m, f);
    } else {
      Fill(f->is_repeated() ? r->AddMessage(m, f) : r->MutableMessage(m, f), depth + 1);
    }
  }
}

// Repeats the first element of `m`'s repeated field `name` up to `n`.
void RepeatFirst(Message* m, const std::string& name, int n) {
  const FieldDescriptor* f = m->GetDescriptor()->FindFieldByName(name);
  ASSERT_NE(f, nullptr) << name;
  const Reflection* r = m->GetReflection();
  ASSERT_GT(r->FieldSize(*m, f), 0) << name;
  while (r->FieldSize(*m, f) < n) {
    switch (f->cpp_type()) {
      case FieldDescriptor::CPPTYPE_MESSAGE:
        r->AddMessage(m, f)->CopyFrom(r->GetRepeatedMessage(*m, f, 0));
        break;
      case FieldDescriptor::CPPTYPE_INT64:
        r->AddInt64(m, f, r->GetRepeatedInt64(*m, f, 0));
        break;
      case FieldDescriptor::CPPTYPE_BOOL:
        r->AddBool(m, f, r->GetRepeatedBool(*m, f, 0));
        break;
      case FieldDescriptor::CPPTYPE_INT32:
        r->AddInt32(m, f, r->GetRepeatedInt32(*m, f, 0));
        break;
      case FieldDescriptor::CPPTYPE_STRING:
        r->AddString(m, f, r->GetRepeatedString(*m, f, 0));
        break;
      default:
        FAIL() << name << ": a type this test does not repeat";
    }
  }
}

// Every field filled, then what TakeOver checks against the job made to
// fit it: the job itself, members in id order under their role, one clock
// per worker and one link entry per replica.
SchedulerState FilledState(const JobSpec& job) {
  SchedulerState s;
  Fill(&s);
  s.set_format("pstrain scheduler state");
  *s.mutable_job() = job;
  s.set_on_worker_failure("wait");
  RepeatFirst(s.mutable_members(), "servers", job.num_servers());
  RepeatFirst(s.mutable_members(), "workers", job.num_workers());
  for (SchedulerMember& m : *s.mutable_members()->mutable_servers()) m.set_role(SERVER);
  for (SchedulerMember& m : *s.mutable_members()->mutable_workers()) m.set_role(WORKER);
  for (auto* list :
       {s.mutable_members()->mutable_servers(), s.mutable_members()->mutable_workers()}) {
    for (int i = 0; i < list->size(); ++i) list->Mutable(i)->set_id(i);
  }
  RepeatFirst(s.mutable_clocks(), "clocks", job.num_workers());
  RepeatFirst(s.mutable_clocks(), "removed", job.num_workers());
  RepeatFirst(s.mutable_clocks(), "pushed", job.num_workers());
  RepeatFirst(s.mutable_pipelines(), "replicas", job.num_workers() / job.pipeline_stages());
  for (const char* routes : {"serving", "addresses", "ready"}) {
    RepeatFirst(s.mutable_promotions()->mutable_routes(), routes, job.num_servers());
  }
  // Placements that fit the job's chunks.
  const int chunks = static_cast<int>(
      Partition::Make(ModelParams(job.model()), job.chunk_bytes(), job.num_servers())
          .value()
          .chunks()
          .size());
  for (Placement* p : {s.mutable_moves()->mutable_placement(),
                       s.mutable_moves()->mutable_move()->mutable_after()}) {
    RepeatFirst(p, "chunk_server", chunks);
    RepeatFirst(p, "bucket_server", kRowBuckets);
  }
  return s;
}

// A field on the way to a leaf: the field and its element (-1: singular).
struct Step {
  const FieldDescriptor* field;
  int index;
};

std::string PathName(const std::vector<Step>& path) {
  std::string out;
  for (const Step& s : path) {
    out += (out.empty() ? "" : ".") + s.field->name();
    if (s.index >= 0) out += "[" + std::to_string(s.index) + "]";
  }
  return out;
}

// Calls `visit` with the path of every scalar value set in `m`.
void ForEachLeaf(const Message& m, std::vector<Step>* path,
                 const std::function<void(const std::vector<Step>&)>& visit) {
  const Reflection* r = m.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  r->ListFields(m, &fields);
  for (const FieldDescriptor* f : fields) {
    const int n = f->is_repeated() ? r->FieldSize(m, f) : 1;
    for (int i = 0; i < n; ++i) {
      path->push_back({f, f->is_repeated() ? i : -1});
      if (f->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) {
        visit(*path);
      } else {
        ForEachLeaf(f->is_repeated() ? r->GetRepeatedMessage(m, f, i) : r->GetMessage(m, f), path,
                    visit);
      }
      path->pop_back();
    }
  }
}

// Changes the value at `path` in `root` (to another non-default one).
void Change(Message* root, const std::vector<Step>& path) {
  Message* m = root;
  for (size_t i = 0; i + 1 < path.size(); ++i) {
    const Reflection* r = m->GetReflection();
    m = path[i].index >= 0 ? r->MutableRepeatedMessage(m, path[i].field, path[i].index)
                           : r->MutableMessage(m, path[i].field);
  }
  const FieldDescriptor* f = path.back().field;
  const int i = path.back().index;
  const Reflection* r = m->GetReflection();
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      i >= 0 ? r->SetRepeatedInt32(m, f, i, r->GetRepeatedInt32(*m, f, i) + 1)
             : r->SetInt32(m, f, r->GetInt32(*m, f) + 1);
      break;
    case FieldDescriptor::CPPTYPE_INT64:
      i >= 0 ? r->SetRepeatedInt64(m, f, i, r->GetRepeatedInt64(*m, f, i) + 1)
             : r->SetInt64(m, f, r->GetInt64(*m, f) + 1);
      break;
    case FieldDescriptor::CPPTYPE_UINT32:
      i >= 0 ? r->SetRepeatedUInt32(m, f, i, r->GetRepeatedUInt32(*m, f, i) + 1)
             : r->SetUInt32(m, f, r->GetUInt32(*m, f) + 1);
      break;
    case FieldDescriptor::CPPTYPE_UINT64:
      i >= 0 ? r->SetRepeatedUInt64(m, f, i, r->GetRepeatedUInt64(*m, f, i) + 1)
             : r->SetUInt64(m, f, r->GetUInt64(*m, f) + 1);
      break;
    case FieldDescriptor::CPPTYPE_DOUBLE:
      i >= 0 ? r->SetRepeatedDouble(m, f, i, r->GetRepeatedDouble(*m, f, i) + 1)
             : r->SetDouble(m, f, r->GetDouble(*m, f) + 1);
      break;
    case FieldDescriptor::CPPTYPE_FLOAT:
      i >= 0 ? r->SetRepeatedFloat(m, f, i, r->GetRepeatedFloat(*m, f, i) + 1)
             : r->SetFloat(m, f, r->GetFloat(*m, f) + 1);
      break;
    case FieldDescriptor::CPPTYPE_BOOL:
      i >= 0 ? r->SetRepeatedBool(m, f, i, !r->GetRepeatedBool(*m, f, i))
             : r->SetBool(m, f, !r->GetBool(*m, f));
      break;
    case FieldDescriptor::CPPTYPE_STRING:
      i >= 0 ? r->SetRepeatedString(m, f, i, r->GetRepeatedString(*m, f, i) + "y")
             : r->SetString(m, f, r->GetString(*m, f) + "y");
      break;
    case FieldDescriptor::CPPTYPE_ENUM: {
      const int now = i >= 0 ? r->GetRepeatedEnumValue(*m, f, i) : r->GetEnumValue(*m, f);
      const EnumDescriptor* e = f->enum_type();
      int other = now;
      for (int k = 0; k < e->value_count() && other == now; ++k) other = e->value(k)->number();
      if (other == now) other = now + 1;  // a one-value enum: an unknown value still differs
      i >= 0 ? r->SetRepeatedEnumValue(m, f, i, other) : r->SetEnumValue(m, f, other);
      break;
    }
    case FieldDescriptor::CPPTYPE_MESSAGE:
      break;
  }
}

bool Resent(const std::vector<Step>& path) {
  for (const Step& s : path) {
    if (s.field->options().GetExtension(resent_by_members)) return true;
  }
  return false;
}

class SchedulerStateTest : public ::testing::Test {
 protected:
  SchedulerStateTest() : job_(PipelinedJob()), filled_(FilledState(job_)) {
    policy_.on_worker_failure = WorkerFailure::kWait;
  }

  const JobSpec job_;
  const SchedulerState filled_;
  SchedulerPolicy policy_;
  NoCheckpoints catalog_;
  const absl::Time now_ = absl::FromUnixSeconds(5000);
};

// Every scalar field declared in SchedulerState, at any depth, but the
// job's: the state's job is the coordinator's own (a valid job the test
// builds; the runtime refuses a state of another job).
void DeclaredLeaves(const Descriptor* d, int depth, std::set<const FieldDescriptor*>* out) {
  for (int i = 0; i < d->field_count() && depth < kMaxDepth; ++i) {
    const FieldDescriptor* f = d->field(i);
    if (f == SchedulerState::descriptor()->FindFieldByName("job")) continue;
    if (f->options().deprecated()) continue;  // (Fill's)
    if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      DeclaredLeaves(f->message_type(), depth + 1, out);
    } else {
      out->insert(f);
    }
  }
}

TEST_F(SchedulerStateTest, TheFillerLeavesNoFieldAtItsDefault) {
  // ListFields skips a field at its default: one left anywhere would hide
  // that field from the tests below.
  std::set<const FieldDescriptor*> set;
  std::vector<Step> path;
  ForEachLeaf(filled_, &path, [&](const std::vector<Step>& at) { set.insert(at.back().field); });
  std::set<const FieldDescriptor*> declared;
  DeclaredLeaves(SchedulerState::descriptor(), 0, &declared);
  for (const FieldDescriptor* f : declared) {
    EXPECT_EQ(set.count(f), 1u) << f->full_name() << " is never set to a non-default value";
  }
  EXPECT_GT(declared.size(), 100u);
}

TEST_F(SchedulerStateTest, ATakeoverSnapshotsEveryFieldBackUnchanged) {
  JobCoordinator coordinator(job_, policy_, &catalog_, {}, now_);
  ASSERT_TRUE(coordinator.TakeOver(filled_, now_).ok()) << coordinator.TakeOver(filled_, now_);
  SchedulerState expected = filled_;
  // The takeover itself is recorded.
  expected.set_scheduler_takeovers(filled_.scheduler_takeovers() + 1);
  expected.set_taken_over_unix_ms(absl::ToUnixMillis(now_));
  google::protobuf::util::MessageDifferencer differ;
  std::string differences;
  differ.ReportDifferencesToString(&differences);
  EXPECT_TRUE(differ.Compare(expected, coordinator.Snapshot())) << differences;
  EXPECT_EQ(coordinator.DurableKey(), DurableKeyOf(expected));
}

TEST_F(SchedulerStateTest, EveryFieldButWhatMembersResendMovesTheDurableKey) {
  const std::string key = DurableKeyOf(filled_);
  int durable = 0, resent = 0;
  std::vector<Step> path;
  ForEachLeaf(filled_, &path, [&](const std::vector<Step>& at) {
    SchedulerState changed = filled_;
    Change(&changed, at);
    ASSERT_FALSE(google::protobuf::util::MessageDifferencer::Equals(changed, filled_))
        << PathName(at);
    const bool moved = DurableKeyOf(changed) != key;
    if (Resent(at)) {
      EXPECT_FALSE(moved) << PathName(at) << " is resent by the members: not in the key";
      ++resent;
    } else {
      EXPECT_TRUE(moved) << PathName(at) << " is durable: the key must move";
      ++durable;
    }
  });
  EXPECT_GT(durable, 30);
  EXPECT_GT(resent, 30);  // the members' reports and the clocks
}

TEST_F(SchedulerStateTest, TheClockTableAndTheMembersReportsAreWhatMembersResend) {
  SchedulerState s = filled_;
  s.mutable_clocks()->set_clocks(0, 0);
  s.mutable_members()->mutable_workers(0)->mutable_status()->set_clock(77);
  EXPECT_EQ(DurableKeyOf(s), DurableKeyOf(filled_));
  s.mutable_clocks()->set_removed(0, false);  // leaving the gate is not resent
  EXPECT_NE(DurableKeyOf(s), DurableKeyOf(filled_));
  s = filled_;
  s.mutable_members()->mutable_workers(0)->set_state(DEAD);  // the verdict is not either
  EXPECT_NE(DurableKeyOf(s), DurableKeyOf(filled_));
}

}  // namespace
}  // namespace pstrain
