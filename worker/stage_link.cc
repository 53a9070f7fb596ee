#include "worker/stage_link.h"

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/rpc.h"

namespace pstrain {

absl::Status StreamChannel::Send(StageTensor tensor) {
  StageMessage m;
  m.set_replica(me_.replica);
  m.set_stage(me_.stage);
  m.set_link_generation(link_generation());
  m.set_clock(tensor.clock);
  m.set_micro(tensor.micro);
  m.set_dtype(me_.wire_dtype);
  m.set_floats(static_cast<int64_t>(tensor.values.size()));
  std::string* data = m.mutable_data();
  data->resize(tensor.values.size() * DTypeSize(me_.wire_dtype));
  EncodeFloats(me_.wire_dtype, tensor.values.data(), m.floats(), data->data());
  absl::MutexLock lock(&write_mu_);
  if (!write_ || !write_(m)) {
    return absl::UnavailableError(absl::StrCat("the link to ", peer_, " is down"));
  }
  sent_ += static_cast<int64_t>(m.data().size());
  return absl::OkStatus();
}

absl::StatusOr<StageTensor> StreamChannel::Receive() {
  absl::MutexLock lock(&mu_);
  auto connected = [this]()
                       ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return attached_ || !closed_.ok(); };
  if (!mu_.AwaitWithTimeout(absl::Condition(&connected), me_.connect_timeout)) {
    return absl::DeadlineExceededError(
        absl::StrCat(peer_, " did not connect within ", absl::FormatDuration(me_.connect_timeout)));
  }
  auto ready = [this]()
                   ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !inbox_.empty() || !closed_.ok(); };
  mu_.Await(absl::Condition(&ready));
  if (inbox_.empty()) return closed_;
  if (inbox_.front().link_generation > link_generation_) {
    return absl::AbortedError(absl::StrCat(peer_, " restarted in link generation ",
                                           inbox_.front().link_generation, "; this stage is in ",
                                           link_generation_));
  }
  StageTensor t = std::move(inbox_.front().tensor);
  inbox_.pop_front();
  return t;
}

int StreamChannel::Attach(std::function<bool(const StageMessage&)> write,
                          std::function<void()> cancel, int64_t link_generation) {
  absl::MutexLock write_lock(&write_mu_);
  write_ = std::move(write);
  absl::MutexLock lock(&mu_);
  attached_ = true;
  stream_generation_ = link_generation;
  cancel_ = std::move(cancel);
  closed_ = absl::OkStatus();
  return ++token_;
}

void StreamChannel::Reset(int64_t link_generation) {
  {
    // A Send blocked in an older stream holds write_mu_: end that first.
    absl::MutexLock lock(&mu_);
    if ((!attached_ || stream_generation_ < link_generation) && cancel_) cancel_();
  }
  absl::MutexLock write_lock(&write_mu_);
  absl::MutexLock lock(&mu_);
  link_generation_ = link_generation;
  while (!inbox_.empty() && inbox_.front().link_generation < link_generation) inbox_.pop_front();
  closed_ = absl::OkStatus();
  if (attached_ && stream_generation_ >= link_generation) return;
  // The older stream ends (its peer restarts too) and its end is no
  // longer this link's.
  if (cancel_) cancel_();
  cancel_ = nullptr;
  write_ = nullptr;
  attached_ = false;
  ++token_;
}

int64_t StreamChannel::link_generation() const {
  absl::MutexLock lock(&mu_);
  return link_generation_;
}

absl::Status StreamChannel::Deliver(const StageMessage& m, int peer_replica, int peer_stage) {
  if (m.replica() != peer_replica || m.stage() != peer_stage) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a tensor from stage ", m.stage(), " of replica ", m.replica(), "; expected ", peer_));
  }
  if (!DType_IsValid(m.dtype()) || m.floats() < 0 ||
      m.data().size() != static_cast<size_t>(m.floats()) * DTypeSize(m.dtype())) {
    return absl::InvalidArgumentError(absl::StrCat("a malformed tensor from ", peer_));
  }
  if (m.link_generation() < link_generation()) return absl::OkStatus();  // of a link that restarted
  StageTensor t{m.clock(), m.micro(), std::vector<float>(m.floats())};
  DecodeFloats(m.dtype(), m.data().data(), m.floats(), t.values.data());
  absl::MutexLock lock(&mu_);
  auto room = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return static_cast<int>(inbox_.size()) < me_.inbox || !closed_.ok();
  };
  mu_.Await(absl::Condition(&room));
  // A closed link still keeps a newer link generation's tensors (its peer restarted
  // first) for Reset, while there is room.
  const bool newer =
      m.link_generation() > link_generation_ && static_cast<int>(inbox_.size()) < me_.inbox;
  if (!closed_.ok() && !newer) return closed_;
  if (m.link_generation() >= link_generation_)
    inbox_.push_back(Received{m.link_generation(), std::move(t)});
  return absl::OkStatus();
}

void StreamChannel::Detach(int token, absl::Status why) {
  absl::MutexLock write_lock(&write_mu_);
  absl::MutexLock lock(&mu_);
  if (token != token_) return;
  write_ = nullptr;
  cancel_ = nullptr;  // the stream has ended
  closed_ = why.ok() ? absl::UnavailableError(absl::StrCat(peer_, " closed the link")) : why;
}

void StreamChannel::Close(absl::Status why) {
  {
    // A Send blocked in the stream holds write_mu_: end that first.
    absl::MutexLock lock(&mu_);
    if ((!attached_ || stream_generation_ <= link_generation_) && cancel_) cancel_();
  }
  absl::MutexLock write_lock(&write_mu_);
  absl::MutexLock lock(&mu_);
  // What is of this link generation goes; a stream and tensors of a newer one (the
  // peer restarted first) stay for Reset.
  while (!inbox_.empty() && inbox_.front().link_generation <= link_generation_) inbox_.pop_front();
  if (!attached_ || stream_generation_ <= link_generation_) {
    if (cancel_) cancel_();
    cancel_ = nullptr;
    write_ = nullptr;
  }
  attached_ = true;  // no wait for a connection either
  closed_ = why;
}

namespace {

std::string StageName(int stage, int replica) {
  return absl::StrCat("stage ", stage, " of replica ", replica);
}

constexpr char kLinkGenerationKey[] = "pstrain-link-generation";

int64_t LinkGenerationOf(const grpc::ServerContext& ctx) {
  const auto it = ctx.client_metadata().find(kLinkGenerationKey);
  int64_t link_generation = 0;
  if (it == ctx.client_metadata().end() ||
      !absl::SimpleAtoi(absl::string_view(it->second.data(), it->second.size()),
                        &link_generation)) {
    return -1;
  }
  return link_generation;
}

}  // namespace

void StageLinkService::Configure(StageEndpoint me) {
  absl::MutexLock lock(&mu_);
  me_ = me;
  before_ = std::make_unique<StreamChannel>(me, StageName(me.stage - 1, me.replica));
}

StreamChannel* StageLinkService::before() {
  absl::MutexLock lock(&mu_);
  return before_.get();
}

grpc::Status StageLinkService::Exchange(
    grpc::ServerContext* ctx, grpc::ServerReaderWriter<StageMessage, StageMessage>* stream) {
  StreamChannel* before;
  StageEndpoint me;
  {
    absl::MutexLock lock(&mu_);
    auto configured = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return before_ != nullptr; };
    if (!mu_.AwaitWithTimeout(absl::Condition(&configured), absl::Seconds(60))) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "this worker is not a pipeline stage yet");
    }
    before = before_.get();
    me = me_;
  }
  const int64_t link_generation = LinkGenerationOf(*ctx);
  if (link_generation < before->link_generation()) {
    return grpc::Status(grpc::StatusCode::ABORTED,
                        absl::StrCat("a link of link generation ", link_generation,
                                     "; this stage is in link generation ",
                                     before->link_generation(), " (its pipeline restarted)"));
  }
  const int token = before->Attach([stream](const StageMessage& m) { return stream->Write(m); },
                                   [ctx] { ctx->TryCancel(); }, link_generation);
  StageMessage m;
  absl::Status st;
  while (st.ok() && stream->Read(&m)) st = before->Deliver(m, me.replica, me.stage - 1);
  if (st.ok()) {
    st = absl::UnavailableError(
        absl::StrCat(StageName(me.stage - 1, me.replica), " went away (", ctx->peer(), ")"));
  }
  before->Detach(token, st);
  return ToGrpc(st);
}

StageLinkClient::StageLinkClient(StageEndpoint me, const std::string& address)
    : me_(me),
      after_(me, absl::StrCat(StageName(me.stage + 1, me.replica), " at ", address)),
      stub_(StageLink::NewStub(MakeBulkChannel(address))) {
  ctx_.AddMetadata(kLinkGenerationKey, absl::StrCat(me.link_generation));
  stream_ = stub_->Exchange(&ctx_);
  token_ = after_.Attach([this](const StageMessage& m) { return stream_->Write(m); },
                         [this] { ctx_.TryCancel(); }, me.link_generation);
  reader_ = std::thread([this] {
    StageMessage m;
    absl::Status st;
    while (st.ok() && stream_->Read(&m)) st = after_.Deliver(m, me_.replica, me_.stage + 1);
    if (!st.ok()) ctx_.TryCancel();
    while (stream_->Read(&m)) {
    }
    const absl::Status finished = FromGrpc(stream_->Finish());
    if (st.ok()) st = finished.ok() ? absl::UnavailableError("the stream ended") : finished;
    after_.Detach(token_, st);
    reader_done_.Notify();
  });
}

void StageLinkClient::Abort(absl::Status why) {
  ctx_.TryCancel();  // first: a Send blocked in the stream returns
  after_.Close(std::move(why));
}

StageLinkClient::~StageLinkClient() {
  // No more writes; the ones made are delivered before the end of the
  // stream, which the stage after answers by ending its side.
  after_.Detach(token_, absl::CancelledError("the link was closed"));
  stream_->WritesDone();
  if (!reader_done_.WaitForNotificationWithTimeout(me_.close_grace)) ctx_.TryCancel();
  reader_.join();
}

}  // namespace pstrain
