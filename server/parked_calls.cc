#include "server/parked_calls.h"

#include "absl/strings/str_cat.h"

namespace pstrain {

absl::StatusOr<bool> ParkedCalls::Park(PsCall* call, int64_t limit,
                                       absl::FunctionRef<bool()> ready) {
  absl::MutexLock lock(&mu_);
  if (ready()) return false;
  const int worker = worker_of_(*call);
  int64_t mine = 0;
  for (const PsCall* p : calls_) {
    mine += !p->claimed() && !p->abandoned() && worker_of_(*p) == worker;
  }
  if (mine >= limit) {
    return absl::ResourceExhaustedError(
        absl::StrCat("worker ", worker, " already has ", mine, " pulls waiting here"));
  }
  call->parked_at = absl::Now();
  calls_.push_back(call);  // keeps the handling reference
  return true;
}

void ParkedCalls::Wake(const std::function<bool(PsCall&)>& ready,
                       const std::function<void(PsCall&)>& answer,
                       const std::function<void(PsCall&)>& lost) {
  for (PsCall* call : Release(ready)) {
    if (call->Claim()) {
      answer(*call);
    } else {
      lost(*call);
    }
    call->Unref();
  }
}

std::vector<PsCall*> ParkedCalls::Release(const std::function<bool(PsCall&)>& ready) {
  std::vector<PsCall*> going, dropped;
  {
    absl::MutexLock lock(&mu_);
    std::vector<PsCall*> kept;
    for (PsCall* call : calls_) {
      if (call->abandoned()) call->Claim();  // its worker left
      if (call->claimed()) {                 // cancelled while parked
        dropped.push_back(call);
      } else if (ready(*call)) {
        going.push_back(call);
      } else {
        kept.push_back(call);
      }
    }
    calls_ = std::move(kept);
  }
  for (PsCall* call : dropped) call->Unref();
  return going;
}

void ParkedCalls::Cancel(const absl::Status& status,
                         const std::function<bool(const PsCall&)>& which) {
  absl::MutexLock lock(&mu_);
  std::vector<PsCall*> kept;
  for (PsCall* call : calls_) {
    if (!which(*call) && !call->claimed()) {
      kept.push_back(call);
      continue;
    }
    if (call->Claim()) call->Answer(status);
    call->Unref();
  }
  calls_ = std::move(kept);
}

void ParkedCalls::ForEachWaiting(const std::function<void(const PsCall&)>& fn) const {
  absl::MutexLock lock(&mu_);
  for (const PsCall* call : calls_) {
    if (!call->claimed() && !call->abandoned()) fn(*call);
  }
}

}  // namespace pstrain
