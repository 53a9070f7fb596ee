#include "scheduler/member_probe.h"

#include <memory>
#include <utility>

#include "common/rpc.h"
#include "grpcpp/generic/generic_stub.h"

namespace pstrain {
namespace {

// A method no pstrain service has.
constexpr char kPing[] = "/pstrain.MemberProbe/Ping";

// One probe's call: what gRPC needs alive until it completes.
struct ProbeCall {
  std::unique_ptr<grpc::GenericStub> stub;
  std::unique_ptr<grpc::ClientContext> context;
  grpc::ByteBuffer request, response;
};

}  // namespace

MemberProbe::~MemberProbe() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](int* in_flight) { return *in_flight == 0; }, &in_flight_));
}

void MemberProbe::Probe(const std::string& address, std::function<void(bool answered)> done) {
  auto call = std::make_shared<ProbeCall>();
  call->stub = std::make_unique<grpc::GenericStub>(MakeChannel(address));
  call->context = ContextWithTimeout(deadline_);
  grpc::Slice nothing;
  call->request = grpc::ByteBuffer(&nothing, 1);
  {
    absl::MutexLock lock(&mu_);
    ++in_flight_;
  }
  call->stub->UnaryCall(
      call->context.get(), kPing, grpc::StubOptions(), &call->request, &call->response,
      [this, call, done = std::move(done)](grpc::Status st) mutable {
        const grpc::StatusCode code = st.error_code();
        done(code != grpc::StatusCode::UNAVAILABLE &&
             code != grpc::StatusCode::DEADLINE_EXCEEDED &&
             code != grpc::StatusCode::CANCELLED);
        // Nothing of the probe's outlives the count: the destructor may go on.
        done = nullptr;
        call.reset();
        absl::MutexLock lock(&mu_);
        --in_flight_;
      });
}

}  // namespace pstrain
