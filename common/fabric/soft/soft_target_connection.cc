#include "common/fabric/soft/soft_target_connection.h"

#include <sys/epoll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/string_view.h"
#include "common/fabric/soft/soft_wire.h"
#include "common/logging.h"
#include "common/status.h"

namespace rkv::fabric {
namespace {

// Why the limits in the header are what they are:
// - kInputBytes: a batch of small requests is read in one recv; a WRITE
//   frame larger than this gathers its payload in a buffer of its own.
// - kMaxBacklogBytes: past this much unsent output the connection stops
//   executing and reading (backpressure: its peer's sends block) instead of
//   buffering without bound. One response may overshoot it by up to a
//   READ's size (16 MiB).
// - kReadBudgetBytes: a connection reads at most this much per turn, so
//   that one busy peer cannot keep the loop from the others on it.
//
// Memory given back after a transfer larger than this: a few big WRITEs or
// READs must not leave every idle connection holding megabytes.
constexpr size_t kKeepBytes = 256 << 10;

bool TokensEqual(absl::string_view a, absl::string_view b) {
  // Length leaks, contents do not.
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

absl::string_view View(const uint8_t* p, size_t n) { return {reinterpret_cast<const char*>(p), n}; }

}  // namespace

SoftTargetConnection::SoftTargetConnection(const SoftTargetContext& context, ServedTally& served,
                                           Fd fd)
    : context_(context), served_(served), fd_(std::move(fd)) {
  in_.Reserve(kInputBytes);
}

SoftTargetConnection::~SoftTargetConnection() {
  ::shutdown(fd_.get(), SHUT_RDWR);
  if (state_ == State::kServing) {
    context_.departures.Closed(peer_id_);
    served_.Closed();
  }
}

void SoftTargetConnection::NoteEvents(uint32_t epoll_events) {
  // Errors and hang-ups are found by the next recv or send.
  if (epoll_events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) readable_ = true;
  if (epoll_events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) peer_shut_ = true;
  if (epoll_events & (EPOLLOUT | EPOLLHUP | EPOLLERR)) writable_ = true;
}

SoftTargetConnection::Progress SoftTargetConnection::Service() {
  size_t budget = kReadBudgetBytes;
  for (;;) {
    Stop stop = closing_ ? Stop::kClosing : ExecuteBuffered();
    if (stop == Stop::kNeedInput && eof_) {
      // Whole requests that came before the EOF have executed; a partial
      // one never will.
      closing_ = true;
      stop = Stop::kClosing;
    }
    if (stop == Stop::kNeedInput && readable_ && budget > 0) {
      absl::StatusOr<size_t> n = ReadSome();
      if (!n.ok()) return Progress::kDone;
      budget -= std::min(*n, budget);
      continue;
    }
    // Everything this turn could execute has: answer it with one send.
    if (!Flush()) return Progress::kDone;
    if (closing_) return Backlog() == 0 ? Progress::kDone : Progress::kIdle;
    if (Backlog() >= kMaxBacklogBytes) return Progress::kIdle;  // EPOLLOUT resumes it.
    if (stop == Stop::kBacklogged) continue;                    // The send made room.
    return readable_ ? Progress::kMore : Progress::kIdle;
  }
}

SoftTargetConnection::Stop SoftTargetConnection::ExecuteBuffered() {
  if (state_ != State::kServing && !Handshake()) {
    return closing_ ? Stop::kClosing : Stop::kNeedInput;
  }
  for (;;) {
    if (closing_) return Stop::kClosing;
    if (large_write_.has_value()) return Stop::kNeedInput;
    if (Backlog() >= kMaxBacklogBytes) return Stop::kBacklogged;
    if (Available() < wire::kRequestHeaderBytes) return Stop::kNeedInput;
    const uint8_t* frame = in_.data() + in_read_;
    absl::StatusOr<wire::RequestHeader> h =
        wire::DecodeRequestHeader(View(frame, wire::kRequestHeaderBytes));
    if (!h.ok()) {
      RKV_LOG(WARNING) << "soft fabric " << context_.address
                       << ": closing connection: " << h.status();
      closing_ = true;
      return Stop::kClosing;
    }
    const RemoteRequest& req = h->request;
    if (req.opcode != Opcode::kWrite) {
      in_read_ += wire::kRequestHeaderBytes;
      Execute(req, nullptr);
      continue;
    }
    const size_t frame_bytes = wire::kRequestHeaderBytes + req.length;
    if (Available() >= frame_bytes) {
      in_read_ += frame_bytes;
      Execute(req, frame + wire::kRequestHeaderBytes);
      continue;
    }
    if (frame_bytes <= kInputBytes) return Stop::kNeedInput;  // It will fit in in_.
    // Too large for in_: the payload so far moves to a buffer of its own
    // and the rest is read straight into it.
    const size_t have = Available() - wire::kRequestHeaderBytes;
    payload_.Clear(kKeepBytes);
    std::memcpy(payload_.Append(req.length), frame + wire::kRequestHeaderBytes, have);
    payload_.Truncate(have);
    in_read_ = in_.size();
    large_write_ = req;
    return Stop::kNeedInput;
  }
}

bool SoftTargetConnection::Handshake() {
  wire::Hello hello;
  if (state_ == State::kHelloFixed) {
    if (Available() < wire::kHelloFixedBytes) return false;
    absl::StatusOr<size_t> rest_bytes =
        wire::DecodeHelloFixed(View(in_.data() + in_read_, wire::kHelloFixedBytes), &hello);
    if (!rest_bytes.ok()) {
      RKV_LOG(WARNING) << "soft fabric " << context_.address
                       << ": rejected peer: " << rest_bytes.status();
      closing_ = true;  // No reply: it is not an rkv peer.
      return false;
    }
    in_read_ += wire::kHelloFixedBytes;
    hello_version_ = hello.version;
    hello_rest_bytes_ = *rest_bytes;
    state_ = State::kHelloRest;
  }
  // The whole Hello is read, whatever its version, before it is answered:
  // closing with unread input would reset the connection, and the peer
  // might lose the reply that says why.
  if (Available() < hello_rest_bytes_) return false;
  const absl::string_view rest = View(in_.data() + in_read_, hello_rest_bytes_);
  in_read_ += hello_rest_bytes_;
  wire::HelloStatus status = wire::HelloStatus::kOk;
  if (hello_version_ != wire::kVersion) {
    status = wire::HelloStatus::kBadVersion;
    RKV_LOG(WARNING) << "soft fabric " << context_.address << ": rejected peer speaking version "
                     << hello_version_ << " (this is " << wire::kVersion << ")";
  } else if (absl::Status s = wire::DecodeHelloRest(rest, &hello); !s.ok()) {
    RKV_LOG(WARNING) << "soft fabric " << context_.address << ": rejected peer: " << s;
    closing_ = true;  // Malformed: no reply, as for bad magic.
    return false;
  } else if (!context_.token.empty() && !TokensEqual(hello.token, context_.token)) {
    status = wire::HelloStatus::kBadToken;
    RKV_LOG(WARNING) << "soft fabric " << context_.address << ": rejected peer with a wrong token";
  } else if (hello.peer_id != 0 && context_.fenced.Contains(hello.peer_id)) {
    // Checked on the loop's thread, as the fence's sweep of established
    // connections runs (SoftTargetLoop::Fence): a handshake either comes
    // after the fence and is refused here, or before and is swept.
    status = wire::HelloStatus::kFenced;
    RKV_LOG(INFO) << "soft fabric " << context_.address << ": refused fenced peer "
                  << hello.peer_id;
  }
  const std::string reply = wire::EncodeHelloReply(status);
  std::memcpy(out_.Append(reply.size()), reply.data(), reply.size());
  if (status != wire::HelloStatus::kOk) {
    closing_ = true;  // Answered, then closed.
    return false;
  }
  peer_id_ = hello.peer_id;
  state_ = State::kServing;
  context_.departures.Opened(peer_id_);
  served_.Accepted();
  return true;
}

void SoftTargetConnection::Execute(const RemoteRequest& req, const uint8_t* payload) {
  const size_t at = out_.size();
  wire::ResponseHeader resp;
  switch (req.opcode) {
    case Opcode::kRead: {
      uint8_t* dst = out_.Append(wire::kResponseHeaderBytes + req.length);
      resp.status =
          ExecuteRead(*context_.table, req, 0, req.length, dst + wire::kResponseHeaderBytes);
      if (resp.status == CompletionStatus::kSuccess) {
        resp.length = req.length;
      } else {
        out_.Truncate(at + wire::kResponseHeaderBytes);
      }
      break;
    }
    case Opcode::kWrite:
      out_.Append(wire::kResponseHeaderBytes);
      resp.status = ExecuteWrite(*context_.table, req, 0, req.length, payload);
      break;
    case Opcode::kCas64:
    case Opcode::kFaa64:
      out_.Append(wire::kResponseHeaderBytes);
      resp.status = ExecuteAtomic(*context_.table, req, &resp.value);
      break;
  }
  wire::EncodeResponseHeader(resp, out_.data() + at);
  // An error completion moves the responder to the error state: it
  // executes nothing more for this queue pair.
  if (resp.status != CompletionStatus::kSuccess) {
    closing_ = true;
  } else {
    served_.Served(req.opcode, req.length);
  }
}

absl::StatusOr<size_t> SoftTargetConnection::ReadSome() {
  uint8_t* dst;
  size_t want;
  if (large_write_.has_value()) {
    dst = payload_.data() + payload_.size();
    want = large_write_->length - payload_.size();
  } else {
    // Keep the unconsumed tail (at most one partial frame) at the front.
    in_.Consume(in_read_);
    in_read_ = 0;
    dst = in_.data() + in_.size();
    want = kInputBytes - in_.size();
  }
  ssize_t n;
  do {
    n = ::recv(fd_.get(), dst, want, MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      readable_ = false;
      return 0;
    }
    return ErrnoToStatus(errno, "recv");
  }
  if (n == 0) {
    eof_ = true;
    readable_ = false;
    return 0;
  }
  const size_t got = static_cast<size_t>(n);
  // A short read drained the socket; data arriving later is a new edge.
  // Not so an EOF that came with the data: no edge will announce it again.
  if (got < want && !peer_shut_) readable_ = false;
  if (large_write_.has_value()) {
    payload_.Truncate(payload_.size() + got);
    if (payload_.size() == large_write_->length) {
      const RemoteRequest req = *large_write_;
      large_write_.reset();
      Execute(req, payload_.data());
      payload_.Clear(kKeepBytes);
    }
  } else {
    in_.Truncate(in_.size() + got);
  }
  return got;
}

bool SoftTargetConnection::Flush() {
  while (writable_ && Backlog() > 0) {
    const ssize_t n =
        ::send(fd_.get(), out_.data() + out_sent_, Backlog(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        writable_ = false;
        break;
      }
      return false;  // The peer is gone.
    }
    out_sent_ += static_cast<size_t>(n);
  }
  if (Backlog() == 0) {
    out_.Clear(kKeepBytes);
    out_sent_ = 0;
  } else if (out_sent_ >= kMaxBacklogBytes) {
    // Keep the sent prefix from growing without bound under a slow reader.
    out_.Consume(out_sent_);
    out_sent_ = 0;
  }
  return true;
}

}  // namespace rkv::fabric
