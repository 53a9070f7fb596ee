// One counter of what a server refused, labelled by what was refused: the
// Status field ServerStatus.refused (a map keyed by the words below) and
// the metric pstrain_requests_refused_total{what="..."} (common/metrics.cc).
// The words are defined here once; a server reports every one of them (0
// when nothing of that kind was refused).
//   chunks: pushes and pulls of the dense chunks refused as malformed
//           (INVALID_ARGUMENT), the server's other calls (OpenShm, Status,
//           a ring frame of an unknown method) included;
//   rows:   sparse table pulls and pushes refused (a table the job does not
//           declare, a worker not of the job, an id out of range or not this
//           server's, a wrong width, too many pulls parked, ...);
//           TableStatus.refused breaks those that reached a table down per
//           table (and also counts a BSP round whose update failed there);
//   shm:    connections to the shared-memory socket refused (another user's,
//           too many waiting for their tickets, no valid ticket).
#ifndef PSTRAIN_COMMON_REFUSED_H_
#define PSTRAIN_COMMON_REFUSED_H_

#include <array>
#include <cstdint>
#include <string>

#include "proto/status.pb.h"

namespace pstrain {

inline constexpr char kRefusedChunks[] = "chunks";
inline constexpr char kRefusedRows[] = "rows";
inline constexpr char kRefusedShm[] = "shm";
// Every label, in the order psctl and the metrics list them.
inline constexpr std::array<const char*, 3> kRefusedWhat = {kRefusedChunks, kRefusedRows,
                                                            kRefusedShm};

// The count of `what` in `s` (0 when it has none).
inline int64_t Refused(const MemberStatus& s, const std::string& what) {
  const auto& refused = s.server().refused();
  const auto it = refused.find(what);
  return it == refused.end() ? 0 : it->second;
}

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_REFUSED_H_
