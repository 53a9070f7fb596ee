#include "worker/stage_link.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/rpc.h"

namespace pstrain {

absl::Status StreamChannel::Send(StageTensor tensor) {
  StageMessage m;
  m.set_replica(me_.replica);
  m.set_stage(me_.stage);
  m.set_generation(me_.generation);
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
  StageTensor t = std::move(inbox_.front());
  inbox_.pop_front();
  return t;
}

int StreamChannel::Attach(std::function<bool(const StageMessage&)> write) {
  absl::MutexLock write_lock(&write_mu_);
  write_ = std::move(write);
  absl::MutexLock lock(&mu_);
  attached_ = true;
  closed_ = absl::OkStatus();
  return ++token_;
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
  StageTensor t{m.clock(), m.micro(), std::vector<float>(m.floats())};
  DecodeFloats(m.dtype(), m.data().data(), m.floats(), t.values.data());
  absl::MutexLock lock(&mu_);
  auto room = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return static_cast<int>(inbox_.size()) < me_.inbox || !closed_.ok();
  };
  mu_.Await(absl::Condition(&room));
  if (!closed_.ok()) return closed_;
  inbox_.push_back(std::move(t));
  return absl::OkStatus();
}

void StreamChannel::Detach(int token, absl::Status why) {
  absl::MutexLock write_lock(&write_mu_);
  absl::MutexLock lock(&mu_);
  if (token != token_) return;
  write_ = nullptr;
  closed_ = why.ok() ? absl::UnavailableError(absl::StrCat(peer_, " closed the link")) : why;
}

void StreamChannel::Close(absl::Status why) {
  absl::MutexLock write_lock(&write_mu_);
  absl::MutexLock lock(&mu_);
  write_ = nullptr;
  inbox_.clear();
  attached_ = true;  // no wait for a connection either
  closed_ = why;
}

namespace {

std::string StageName(int stage, int replica) {
  return absl::StrCat("stage ", stage, " of replica ", replica);
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
  const int token = before->Attach([stream](const StageMessage& m) { return stream->Write(m); });
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
  stream_ = stub_->Exchange(&ctx_);
  token_ = after_.Attach([this](const StageMessage& m) { return stream_->Write(m); });
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
  after_.Close(std::move(why));
  ctx_.TryCancel();
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
