// What a move of the placement (scheduler/placement_moves.h) hands one
// server: the whole state, at the move's switch clock, of the chunks and
// table rows the move's placement gives it that other servers held until
// then (server/move_intake.h takes it; server/handover_requests.h answers
// for the holders). At the switch the server's shard is made anew from
// it and from what the server keeps (Shard::Adopt). No gRPC.
#ifndef PSTRAIN_SERVER_HANDOVER_H_
#define PSTRAIN_SERVER_HANDOVER_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "proto/ps.pb.h"

namespace pstrain {

struct HandedOver {
  int64_t version = 0;       // the placement the move makes
  int64_t switch_clock = 0;  // the clock the state is of
  std::map<int32_t, ChunkUpdate> chunks;                  // full, by chunk id
  std::map<std::string, std::vector<TableUpdate>> rows;  // full, by table: one per holder
  int64_t bytes = 0;                                      // weights', state's and rows' bytes
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_HANDOVER_H_
