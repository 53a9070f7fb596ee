// The threads that serve a PsService (server/ps_service.h), one per
// completion queue of the daemon's gRPC server.
#ifndef PSTRAIN_SERVER_PS_SERVING_H_
#define PSTRAIN_SERVER_PS_SERVING_H_

#include <chrono>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "server/ps_service.h"

namespace pstrain {

// Stop (or the destructor) ends the server's calls, its queues and then
// the threads.
class Serving {
 public:
  Serving(PsService* service, grpc::Server* server,
          std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> queues)
      : service_(service), server_(server), queues_(std::move(queues)) {
    for (auto& q : queues_) {
      threads_.emplace_back([service, cq = q.get()] { service->Serve(cq); });
    }
  }
  ~Serving() { Stop(); }

  // Calls still running after `grace` are cancelled.
  void Stop(absl::Duration grace = absl::ZeroDuration()) {
    if (stopped_) return;
    stopped_ = true;
    service_->StopServing();
    server_->Shutdown(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(grace));
    for (auto& q : queues_) q->Shutdown();
    for (std::thread& t : threads_) t.join();
  }

 private:
  PsService* service_;
  grpc::Server* server_;
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> queues_;
  std::vector<std::thread> threads_;
  bool stopped_ = false;
};

}  // namespace pstrain

#endif  // PSTRAIN_SERVER_PS_SERVING_H_
