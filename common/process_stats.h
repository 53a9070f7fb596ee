// Facts about this process for Status replies.
#ifndef PSTRAIN_COMMON_PROCESS_STATS_H_
#define PSTRAIN_COMMON_PROCESS_STATS_H_

#include <cstdint>

namespace pstrain {

// Resident set size in bytes (from /proc/self/statm), 0 if unknown.
int64_t ResidentBytes();

// A random 64-bit id for this process (Register's incarnation).
uint64_t NewIncarnation();

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_PROCESS_STATS_H_
