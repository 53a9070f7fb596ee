#include "common/fault_in.h"

#include <sys/mman.h>

#include <cerrno>

namespace pstrain {

void FaultIn(void* data, size_t bytes) {
  constexpr int kPopulateWrite = 23;  // MADV_POPULATE_WRITE, where the headers lack it
  constexpr size_t kPage = 4096;
  if (madvise(data, bytes, kPopulateWrite) == 0 || errno != EINVAL) return;
  volatile char* p = static_cast<char*>(data);
  for (size_t i = 0; i < bytes; i += kPage) p[i] = 0;
}

}  // namespace pstrain
