// In-process fakes of the clock loop's collaborators (worker/clock_loop.h):
// a gate and parameter clients that answer at once and log every call, for
// tests of the protocol's sequence of calls without daemons.
#ifndef PSTRAIN_WORKER_TESTING_FAKES_H_
#define PSTRAIN_WORKER_TESTING_FAKES_H_

#include <functional>
#include <future>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "worker/clock_loop.h"

namespace pstrain {
namespace testing {

// Every call of the fakes, in order, e.g. "gate 3 g0", "g0 pull 3 min 2",
// "g0 push 3 [0,1]" or "g0 push 3 all", "g1 fp32 pull 10 min 10".
using CallLog = std::vector<std::string>;

// A parameter client whose operations complete at once: a pull fills every
// weight with the clock it reads; `fail` may fail an operation by its log
// line.
class FakeParamClient : public ParamClient {
 public:
  FakeParamClient(CallLog* log, int64_t generation, bool fp32,
                  std::function<absl::Status(const std::string&)> fail = nullptr, int workers = 1)
      : workers_(workers),
        log_(log),
        prefix_(absl::StrCat("g", generation, fp32 ? " fp32" : "")),
        fail_(std::move(fail)) {}

  // A pull's weights hold every update before its clock (the freshest a
  // server can have then), of `workers` workers.
  ParamTicket Pull(int64_t clock, int64_t min_clock, ParamBuffers* into,
                   PulledClocks* clocks, WeightArrivals* arrivals = nullptr) override {
    const int64_t number = arrivals != nullptr ? arrivals->Begin() : 0;
    for (auto& w : *into) w.assign(w.size(), static_cast<float>(clock));
    if (clocks != nullptr) {
      clocks->applied.assign(workers_, clock);
      clocks->own_applied_most = clocks->own_held_least = clock;
    }
    bytes_in_ += 4;
    const ParamTicket ticket = Done(absl::StrCat(prefix_, " pull ", clock, " min ", min_clock));
    if (arrivals != nullptr) arrivals->Finish(number, results_.at(ticket));
    return ticket;
  }
  ParamTicket Push(int64_t clock, int, const ParamBuffers*, float, std::vector<int> params,
                   std::vector<bool>, std::vector<const float*>) override {
    bytes_out_ += 4;
    return Done(
        absl::StrCat(prefix_, " push ", clock, " ",
                     params.empty() ? "all" : absl::StrCat("[", absl::StrJoin(params, ","), "]")));
  }
  ParamTicket PushInitialValues(const ParamBuffers*) override {
    return Done(absl::StrCat(prefix_, " initial values"));
  }
  absl::Status Wait(ParamTicket ticket) override {
    const absl::Status st = results_.at(ticket);
    results_.erase(ticket);
    return st;
  }
  int64_t bytes_in() const override { return bytes_in_; }
  int64_t bytes_out() const override { return bytes_out_; }
  int64_t rpcs() const override { return rpcs_; }

 private:
  ParamTicket Done(const std::string& line) {
    log_->push_back(line);
    ++rpcs_;  // one call per operation
    results_[++next_] = fail_ ? fail_(line) : absl::OkStatus();
    return next_;
  }
  const int workers_;
  CallLog* log_;
  const std::string prefix_;
  std::function<absl::Status(const std::string&)> fail_;
  std::map<ParamTicket, absl::Status> results_;
  ParamTicket next_ = 0;
  int64_t bytes_in_ = 0, bytes_out_ = 0, rpcs_ = 0;
};

// A gate that opens at once for `workers` workers and `servers` servers;
// `script` may change the answer (a rollback: a newer generation and the
// clock to resume at).
class FakeGate : public GateClient {
 public:
  FakeGate(CallLog* log, int servers, int workers)
      : log_(log), servers_(servers), workers_(workers) {}
  std::function<void(int64_t clock, AdvanceClockResponse*)> script;

  absl::StatusOr<AdvanceClockResponse> AdvanceClock(const AdvanceClockRequest& req) override {
    const int64_t clock = req.clock();
    log_->push_back(absl::StrCat("gate ", clock, " g", req.generation()));
    AdvanceClockResponse r;
    for (int s = 0; s < servers_; ++s) {
      r.mutable_cluster()->add_servers()->set_address(absl::StrCat("server", s));
    }
    for (int w = 0; w < workers_; ++w) r.add_live_workers(w);
    r.set_generation(generation_);
    r.set_resume_clock(clock);
    r.set_job_state(RUNNING_JOB);
    if (script) script(clock, &r);
    generation_ = r.generation();
    return r;
  }
  int64_t generation() const override { return generation_; }
  // Answered at once, so the log's order is the calls' order.
  std::future<absl::StatusOr<AdvanceClockResponse>> AdvanceClockAsync(
      AdvanceClockRequest req) override {
    std::promise<absl::StatusOr<AdvanceClockResponse>> answer;
    answer.set_value(AdvanceClock(req));
    return answer.get_future();
  }

 private:
  CallLog* log_;
  const int servers_, workers_;
  int64_t generation_ = 0;
};

}  // namespace testing
}  // namespace pstrain

#endif  // PSTRAIN_WORKER_TESTING_FAKES_H_
