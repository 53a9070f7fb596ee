// The scheduler's requests (Register, Heartbeat, AdvanceClock, ReduceNorm)
// as protobuf bytes from anyone, through the membership, clock table and
// norm rounds that validate them. First byte: which request.
#include <cstdint>
#include <string>

#include "absl/time/clock.h"
#include "proto/cluster.pb.h"
#include "scheduler/clock_table.h"
#include "scheduler/membership.h"
#include "scheduler/norm_rounds.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pstrain;
  if (size < 1) return 0;
  static Membership* members = new Membership(2, 3);
  static ClockTable* clocks = new ClockTable(3, 1);
  static NormRounds* norms = new NormRounds({true, false}, 1000);
  const std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 4) {
    case 0: {
      RegisterRequest req;
      if (!req.ParseFromString(body)) return 0;
      absl::StatusOr<int> id =
          members->Register(req.role(), req.address(), req.incarnation(), absl::Now());
      if (id.ok() && req.has_id()) {
        (void)members->Replace(req.role(), req.id(), req.address() + "r", req.incarnation(),
                               absl::Now());
      }
      break;
    }
    case 1: {
      HeartbeatRequest req;
      if (!req.ParseFromString(body)) return 0;
      (void)members->Find(req.status().role(), req.status().id(), req.incarnation());
      break;
    }
    case 2: {
      AdvanceClockRequest req;
      if (!req.ParseFromString(body)) return 0;
      if (clocks->Advance(req.worker_id(), req.clock()).ok()) (void)clocks->MayStart(req.clock());
      if (req.generation() % 97 == 1) clocks->Reset(req.clock() & 1023);
      break;
    }
    case 3: {
      ReduceNormRequest req;
      if (!req.ParseFromString(body)) return 0;
      if (norms->Add(req.server_id(), req.clock(), req.sum_squares()).ok()) {
        (void)norms->Total(req.clock());
      }
      break;
    }
  }
  if (clocks->SlowestClock() < 0) __builtin_trap();
  return 0;
}
