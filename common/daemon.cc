#include "common/daemon.h"

#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"

ABSL_FLAG(std::string, advertise_host, "",
          "the host name or address the others reach this daemon by when --listen's host is "
          "0.0.0.0 or [::] (default: this machine's host name), e.g. a Slurm node's NodeAddr");

namespace pstrain {
namespace {

std::atomic<bool> g_shutdown{false};

void OnSignal(int) { g_shutdown = true; }

}  // namespace

std::string AdvertisedAddress(const std::string& bound) {
  const size_t colon = bound.rfind(':');
  const std::string host = bound.substr(0, colon);
  if (host != "0.0.0.0" && host != "[::]" && host != "") return bound;
  const std::string advertise = absl::GetFlag(FLAGS_advertise_host);
  if (!advertise.empty()) {
    const bool ipv6 = advertise.find(':') != std::string::npos && advertise[0] != '[';
    return (ipv6 ? absl::StrCat("[", advertise, "]") : advertise) + bound.substr(colon);
  }
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

absl::Status WriteFileDurably(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp";
  auto error = [](const std::string& what, const std::string& file) {
    return absl::InternalError(absl::StrCat(what, " ", file, ": ", std::strerror(errno)));
  };
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return error("cannot create", tmp);
  absl::Status st;
  if (write(fd, bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size())) {
    st = error("cannot write", tmp);
  }
  if (st.ok() && fsync(fd) != 0) st = error("cannot fsync", tmp);
  close(fd);
  if (st.ok() && std::rename(tmp.c_str(), path.c_str()) != 0) st = error("cannot rename", tmp);
  if (!st.ok()) {
    std::remove(tmp.c_str());
    return st;
  }
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  const int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
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

namespace {

std::terminate_handler g_previous_terminate = nullptr;
// SetOutOfMemoryReport's; read once, by the first thread to fail, which
// sets g_reporting while it runs it.
std::atomic<std::function<void()>*> g_out_of_memory_report{nullptr};
std::atomic<bool> g_reporting{false};

[[noreturn]] void OnTerminate() {
  if (const std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::bad_alloc&) {
      // Nothing allocated before the line is out: the heap may be what ran out.
      static const char kMessage[] = "out of memory: an allocation failed; exiting\n";
      [[maybe_unused]] const ssize_t n = write(2, kMessage, sizeof(kMessage) - 1);
      // The report may allocate (the failed request often was large); a
      // second failure while it runs ends here, in the exchange. Should it
      // hang, SIGALRM ends the process within 3 s.
      g_reporting = true;
      if (std::function<void()>* report = g_out_of_memory_report.exchange(nullptr)) {
        alarm(3);
        try {
          (*report)();
        } catch (...) {
        }
      }
      _exit(1);
    } catch (...) {
    }
  }
  if (g_previous_terminate != nullptr) g_previous_terminate();
  std::abort();
}

}  // namespace

void SetOutOfMemoryReport(std::function<void()> report) {
  delete g_out_of_memory_report.exchange(
      report ? new std::function<void()>(std::move(report)) : nullptr);
  // A report under way uses what its setter owns: the process ends with it.
  while (g_reporting) std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

void InstallOutOfMemoryExit() {
  std::terminate_handler previous = std::set_terminate(OnTerminate);
  if (previous != OnTerminate) g_previous_terminate = previous;
}

void TuneMallocForBulkTraffic() {
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
}

void TuneMallocForBoundedMemory() {
  mallopt(M_ARENA_MAX, 1);
  mallopt(M_TRIM_THRESHOLD, 1 << 20);
}

MemoryGiveBack::MemoryGiveBack(std::function<int64_t()> refused)
    : thread_([this, refused = std::move(refused)] {
        int64_t seen = refused();
        bool moved = false;  // in the last second (a flood's tail is freed after it)
        while (!stop_.WaitForNotificationWithTimeout(absl::Seconds(1))) {
          const int64_t now = refused();
          if (now != seen || moved) malloc_trim(0);
          moved = now != seen;
          seen = now;
        }
      }) {}

MemoryGiveBack::~MemoryGiveBack() {
  stop_.Notify();
  thread_.join();
}

}  // namespace pstrain
