// Memory's pages faulted in before the path that needs them: on a loaded
// host -- a VM above all -- the first touch of a fresh page costs more than
// copying into it (docs/performance.md, "A server added mid-run"), so
// memory a pause will write (a move's new shard, a holder's answers) is
// touched while training goes on instead.
#ifndef PSTRAIN_COMMON_FAULT_IN_H_
#define PSTRAIN_COMMON_FAULT_IN_H_

#include <cstddef>

namespace pstrain {

// Faults in the pages of [data, data + bytes), a private anonymous mapping
// (zeroed: writing a zero leaves each page as it was).
// MADV_POPULATE_WRITE (Linux 5.14) does it in one call; an older kernel
// refuses it with EINVAL, and a byte of each page is written instead.
void FaultIn(void* data, size_t bytes);

}  // namespace pstrain

#endif  // PSTRAIN_COMMON_FAULT_IN_H_
