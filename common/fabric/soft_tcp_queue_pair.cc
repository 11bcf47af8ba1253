// Initiator side of the soft fabric over TCP.
#include <sys/socket.h>

#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/fabric/soft_queue_pair.h"
#include "common/fabric/soft_tcp.h"
#include "common/fabric/soft_wire.h"
#include "common/logging.h"
#include "common/socket.h"
#include "common/status.h"

namespace rkv::fabric {
namespace {

class SoftTcpQueuePair final : public SoftQueuePair {
 public:
  SoftTcpQueuePair(std::shared_ptr<const MemoryTable> local, const QueuePairOptions& options,
                   Fd fd)
      : SoftQueuePair(std::move(local), options), fd_(std::move(fd)) {
    receiver_ = std::thread([this] { ReceiveLoop(); });
  }

  ~SoftTcpQueuePair() override {
    ::shutdown(fd_.get(), SHUT_RDWR);
    receiver_.join();
  }

 private:
  absl::Status Submit(std::vector<Pending> batch) override;
  void ReceiveLoop();
  // Handles one response; false when the connection is finished.
  bool ReceiveOne();

  Fd fd_;
  // Held across admission and sending so that the wire order of requests
  // is the send-queue order. Never held by the receiver: a blocked send
  // must not stop responses from draining.
  std::mutex send_mu_;
  std::thread receiver_;
};

absl::Status SoftTcpQueuePair::Submit(std::vector<Pending> batch) {
  std::lock_guard<std::mutex> send_lock(send_mu_);
  std::string frames;
  bool drop = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const size_t before = outstanding_.size();
    RKV_RETURN_IF_ERROR(AdmitLocked(batch));
    // Admission either completed everything (error state) or appended the
    // new requests behind the `before` already outstanding.
    const size_t first_new = outstanding_.empty() ? 0 : before;
    for (size_t i = first_new; i < outstanding_.size(); ++i) {
      const Pending& p = outstanding_[i];
      if (p.refused != CompletionStatus::kSuccess) break;  // Later ones flush behind it.
      wire::RequestHeader h{p.remote()};
      uint8_t header[wire::kRequestHeaderBytes];
      wire::EncodeRequestHeader(h, header);
      frames.append(reinterpret_cast<const char*>(header), sizeof(header));
      if (p.wr.opcode == Opcode::kWrite) {
        frames.append(reinterpret_cast<const char*>(p.write_source()), p.wr.length);
      }
    }
  }
  if (!frames.empty() && !WriteFull(fd_.get(), frames.data(), frames.size()).ok()) {
    drop = true;  // The receiver sees the broken connection and fails what is outstanding.
  }
  if (drop) ::shutdown(fd_.get(), SHUT_RDWR);
  return absl::OkStatus();
}

bool SoftTcpQueuePair::ReceiveOne() {
  uint8_t raw[wire::kResponseHeaderBytes];
  if (!ReadFull(fd_.get(), raw, sizeof(raw)).ok()) return false;
  absl::StatusOr<wire::ResponseHeader> h =
      wire::DecodeResponseHeader({reinterpret_cast<const char*>(raw), sizeof(raw)});
  Pending* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!outstanding_.empty() && outstanding_.front().refused == CompletionStatus::kSuccess) {
      // Only this thread pops sent requests, so the pointer stays valid.
      p = &outstanding_.front();
    }
  }
  if (!h.ok() || p == nullptr) {
    RKV_LOG(WARNING) << "soft fabric: protocol error from target: "
                     << (h.ok() ? "response without a request" : h.status().ToString());
    return false;
  }
  const bool read_ok = p->wr.opcode == Opcode::kRead && h->status == CompletionStatus::kSuccess;
  if (read_ok) {
    if (h->length != p->wr.length) return false;
    if (!ReadFull(fd_.get(), p->wr.local, h->length).ok()) return false;
  } else if (h->length != 0) {
    return false;
  }
  if (h->status == CompletionStatus::kSuccess &&
      (p->wr.opcode == Opcode::kCas64 || p->wr.opcode == Opcode::kFaa64)) {
    std::memcpy(p->wr.local, &h->value, 8);
  }
  std::lock_guard<std::mutex> lock(mu_);
  CompleteFrontLocked(h->status, p->wr.length);
  // After an error the target closes the connection; so do we.
  return h->status == CompletionStatus::kSuccess;
}

void SoftTcpQueuePair::ReceiveLoop() {
  while (ReceiveOne()) {
  }
  ::shutdown(fd_.get(), SHUT_RDWR);
  std::lock_guard<std::mutex> lock(mu_);
  ConnectionLostLocked();
}

}  // namespace

absl::StatusOr<std::unique_ptr<QueuePair>> ConnectSoftTcp(
    std::shared_ptr<const MemoryTable> local, const Endpoint& endpoint,
    const QueuePairOptions& options) {
  RKV_ASSIGN_OR_RETURN(HostPort where, ParseHostPort(endpoint.address));
  RKV_ASSIGN_OR_RETURN(Fd fd, ConnectTcp(where, options.connect_timeout));
  const std::string what = absl::StrCat("soft fabric handshake with ", endpoint.address);
  if (endpoint.token.size() > wire::kMaxTokenBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("connection token longer than ", wire::kMaxTokenBytes, " bytes"));
  }
  const std::string hello = wire::EncodeHello({wire::kVersion, endpoint.token});
  RKV_RETURN_IF_ERROR(WriteFull(fd.get(), hello.data(), hello.size()));
  RKV_RETURN_IF_ERROR(SetReceiveTimeout(fd.get(), options.connect_timeout));
  std::string reply(wire::kHelloReplyBytes, '\0');
  if (absl::Status s = ReadFull(fd.get(), reply.data(), reply.size()); !s.ok()) {
    return absl::UnavailableError(absl::StrCat(what, ": ", s.message()));
  }
  RKV_RETURN_IF_ERROR(SetReceiveTimeout(fd.get(), absl::ZeroDuration()));
  RKV_ASSIGN_OR_RETURN(wire::HelloStatus status, wire::DecodeHelloReply(reply));
  switch (status) {
    case wire::HelloStatus::kOk:
      break;
    case wire::HelloStatus::kBadVersion:
      return absl::FailedPreconditionError(absl::StrCat(what, ": protocol version mismatch"));
    case wire::HelloStatus::kBadToken:
      return absl::PermissionDeniedError(absl::StrCat(what, ": connection token rejected"));
  }
  return std::unique_ptr<QueuePair>(std::make_unique<SoftTcpQueuePair>(
      std::move(local), options, std::move(fd)));
}

}  // namespace rkv::fabric
