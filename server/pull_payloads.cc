#include "server/pull_payloads.h"

#include <utility>

#include "common/dtype.h"
#include "common/status_macros.h"

namespace pstrain {
namespace {

// The weights as they are, in the pull's dtype.
class DensePayloads : public PullPayloads {
 public:
  DensePayloads(const PullRequest& req, const ChunkStore& store) : req_(req), store_(store) {}

  void Plan(std::vector<int64_t>* bytes, PullResponse*) override {
    bytes->clear();
    for (int32_t chunk : req_.chunks()) {
      bytes->push_back(DensePayloadBytes(store_, chunk, req_.dtype()));
    }
  }
  absl::Status Write(size_t i, char* out, PulledClocks* clocks) override {
    return store_.Read(req_.worker_id(), req_.clock(), req_.min_clock(), req_.chunks(i),
                       req_.dtype(), out, clocks);
  }
  const PulledViews* views() const override { return nullptr; }

 private:
  const PullRequest& req_;
  const ChunkStore& store_;
};

// The change from the view the worker holds (PullRequest.held) to the
// weights now, in the job's codec; from no view, the values whole.
class ViewPayloads : public PullPayloads {
 public:
  ViewPayloads(const PullRequest& req, const ChunkStore& store, PullViews* views)
      : req_(req), store_(store), views_(views), bases_(req.chunks_size()) {}

  void Plan(std::vector<int64_t>* bytes, PullResponse* unknown) override {
    bytes->assign(req_.chunks_size(), 0);
    for (int i = 0; i < req_.chunks_size(); ++i) {
      const int32_t chunk = req_.chunks(i);
      absl::StatusOr<int64_t> planned =
          views_->Plan(chunk, req_.held(i), store_.ChunkNumel(chunk), &bases_[i]);
      if (planned.ok()) {
        (*bytes)[i] = *planned;
      } else {  // NOT_FOUND, Plan's only error
        unknown->add_views_unknown(chunk);
      }
    }
  }
  absl::Status Write(size_t i, char* out, PulledClocks* clocks) override {
    const int32_t chunk = req_.chunks(static_cast<int>(i));
    thread_local std::vector<float> current;
    current.resize(store_.ChunkNumel(chunk));
    RETURN_IF_ERROR(store_.Read(req_.worker_id(), req_.clock(), req_.min_clock(), chunk, FP32,
                                reinterpret_cast<char*>(current.data()), clocks));
    const PullViews::View* base = bases_[i].get();
    pulled_.bases.push_back(base == nullptr ? 0 : base->id);
    pulled_.views.push_back(views_->Answer(chunk, req_.worker_id(), base, current.data(),
                                           static_cast<int64_t>(current.size()), out));
    return absl::OkStatus();
  }
  const PulledViews* views() const override { return &pulled_; }

 private:
  const PullRequest& req_;
  const ChunkStore& store_;
  PullViews* const views_;
  // The views each change is from, held until the reply is answered.
  std::vector<std::shared_ptr<const PullViews::View>> bases_;
  PulledViews pulled_;
};

}  // namespace

int64_t DensePayloadBytes(const ChunkStore& store, int32_t chunk, DType dtype) {
  return store.ChunkNumel(chunk) * DTypeSize(dtype);
}

std::unique_ptr<PullPayloads> PayloadsOf(const PullRequest& req, const ChunkStore& store,
                                         PullViews* views) {
  if (req.held_size() > 0) return std::make_unique<ViewPayloads>(req, store, views);
  return std::make_unique<DensePayloads>(req, store);
}

}  // namespace pstrain
