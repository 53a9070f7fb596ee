#include "common/daemon.h"

#include <malloc.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>

#include "absl/strings/str_cat.h"

namespace pstrain {
namespace {

std::atomic<bool> g_shutdown{false};

void OnSignal(int) { g_shutdown = true; }

}  // namespace

std::string AdvertisedAddress(const std::string& bound) {
  const size_t colon = bound.rfind(':');
  const std::string host = bound.substr(0, colon);
  if (host != "0.0.0.0" && host != "[::]" && host != "") return bound;
  char name[256] = {0};
  if (gethostname(name, sizeof(name) - 1) != 0) return bound;
  return std::string(name) + bound.substr(colon);
}

absl::Status WriteFileAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot write"));
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !written || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::DataLossError(absl::StrCat(path, ": cannot write"));
  }
  return absl::OkStatus();
}

absl::Status WritePortFile(const std::string& path, const std::string& address) {
  return WriteFileAtomically(path, address + "\n");
}

void InstallShutdownHandlers() {
  struct sigaction sa = {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

bool ShutdownRequested() { return g_shutdown.load(); }

void TuneMallocForBulkTraffic() {
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
}

}  // namespace pstrain
