// The parameter server's push and pull requests as they arrive (raw bytes,
// cut into slices at an input-chosen point), through the same checks as
// the service's: decode, validate against the store, apply or refuse; a
// valid pull is answered and its reply decoded again.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "common/partition.h"
#include "common/tensor_wire.h"
#include "fuzz/sliced.h"
#include "server/chunk_store.h"
#include "server/chunk_requests.h"

namespace pstrain {
namespace {

// 2 workers under BSP; one server holding chunks 0-2 (a 4x2 weight cut in
// two, a bias of 2).
struct Server {
  Server() {
    job.mutable_data()->set_dataset(SYNTHETIC);
    job.mutable_data()->set_synthetic_dim(4);
    job.mutable_data()->set_synthetic_classes(2);
    LayerSpec* dense = job.mutable_model()->add_layers();
    dense->set_type(DENSE);
    dense->set_units(2);
    job.mutable_model()->add_layers()->set_type(SOFTMAX_XENT);
    job.mutable_optimizer()->set_type(ADAM);
    job.set_consistency(BSP);
    job.set_num_workers(2);
    job.set_batch_size(8);
    job.set_clocks(100);
    job.set_chunk_bytes(16);
    ApplyJobDefaults(&job);
    const Partition partition =
        Partition::Make(ModelParams(job.model()), job.chunk_bytes(), 1).value();
    store = std::make_shared<ChunkStore>(job, partition, 0, MakeOptimizer(job.optimizer()).value(),
                                         nullptr, nullptr);
    requests = std::make_unique<ChunkRequests>(store, TotalClocks(job),
                                               ShmLayout::OfServer(partition, 0), nullptr,
                                               &counters, nullptr);
  }
  JobSpec job;
  std::shared_ptr<ChunkStore> store;
  RequestCounters counters;
  std::unique_ptr<ChunkRequests> requests;
};

}  // namespace
}  // namespace pstrain

// First byte: 0-127 a push, 128-255 a pull; second: where the bytes are cut
// into two slices.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pstrain;
  static Server* server = new Server();
  if (size < 2) return 0;
  const bool push = data[0] < 128;
  const size_t body = size - 2;
  const grpc::ByteBuffer buf = Sliced(data + 2, body, body == 0 ? 0 : data[1] % (body + 1));
  if (push) {
    (void)server->requests->Push(buf);
    return 0;
  }
  PullRequest req;
  if (!server->requests->CheckPull(buf, &req).ok()) return 0;
  grpc::ByteBuffer reply;
  if (!server->requests->FillPull(req, &reply).ok()) return 0;  // refused: no reply to read
  SliceReader reader(reply);
  std::vector<PayloadRef> chunks;
  PulledClocks clocks;
  if (!DecodePullResponse(reader, &chunks, &clocks).ok()) __builtin_trap();  // our own reply
  return 0;
}
