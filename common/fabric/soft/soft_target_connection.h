// One queue pair at the soft target over TCP: a non-blocking socket, its
// handshake, and the request frames it carries, executed against the node's
// MemoryTable in arrival order. Responses are buffered and sent with one
// send per batch; what the socket does not take waits for EPOLLOUT.
//
// A SoftTargetLoop drives it from one thread; it is not thread-safe.
#ifndef RKV_COMMON_FABRIC_SOFT_SOFT_TARGET_CONNECTION_H_
#define RKV_COMMON_FABRIC_SOFT_SOFT_TARGET_CONNECTION_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/fabric/byte_buffer.h"
#include "common/fabric/memory_table.h"
#include "common/fabric/peer_departures.h"
#include "common/fabric/remote_op.h"
#include "common/fabric/served_tally.h"
#include "common/socket.h"

namespace rkv::fabric {

// The peer ids a listener has fenced (Listener::Fence); its loops consult
// it at each handshake. Thread-safe.
class FencedPeers {
 public:
  void Add(uint64_t peer_id) {
    std::lock_guard<std::mutex> lock(mu_);
    ids_.insert(peer_id);
  }
  bool Contains(uint64_t peer_id) const {
    std::lock_guard<std::mutex> lock(mu_);
    return ids_.contains(peer_id);
  }

 private:
  mutable std::mutex mu_;
  absl::flat_hash_set<uint64_t> ids_ ABSL_GUARDED_BY(mu_);
};

// What every connection of one listener shares. Outlives them all.
struct SoftTargetContext {
  std::shared_ptr<const MemoryTable> table;
  std::string address;       // The listener's, for log lines.
  std::string token;         // Peers must present it; empty accepts any.
  absl::Duration busy_poll;  // An idle loop spins this long before it sleeps.
  FencedPeers fenced;
  // Counted by the connections (which see the context as const).
  mutable PeerDepartures departures;
};

class SoftTargetConnection {
 public:
  // Limits that bound a connection's memory; see the .cc for why each.
  static constexpr size_t kInputBytes = 64 << 10;
  static constexpr size_t kMaxBacklogBytes = 1 << 20;
  static constexpr size_t kReadBudgetBytes = 1 << 20;
  static constexpr absl::Duration kHandshakeTimeout = absl::Seconds(5);

  // `fd` is a non-blocking accepted socket. `served` is its loop's tally,
  // which outlives it; only the loop's thread writes it.
  SoftTargetConnection(const SoftTargetContext& context, ServedTally& served, Fd fd);
  // Shuts the socket down, so that the peer sees the connection end at once.
  ~SoftTargetConnection();
  SoftTargetConnection(const SoftTargetConnection&) = delete;
  SoftTargetConnection& operator=(const SoftTargetConnection&) = delete;

  int fd() const { return fd_.get(); }
  // Until then the connection is subject to kHandshakeTimeout.
  bool established() const { return state_ == State::kServing; }
  // The peer id its Hello named; meaningful once established.
  uint64_t peer_id() const { return peer_id_; }

  // Records edge-triggered readiness from epoll; it holds until a read or
  // send finds the socket drained or full.
  void NoteEvents(uint32_t epoll_events);

  enum class Progress {
    kIdle,  // Waiting for the socket (input, or room for output).
    kMore,  // Input remains but this turn's budget is spent: serve again soon.
    kDone,  // Finished: destroy it.
  };
  // Does what the socket allows now without blocking: executes buffered
  // frames, reads more, and sends the responses.
  Progress Service();

 private:
  enum class State { kHelloFixed, kHelloRest, kServing };
  enum class Stop { kNeedInput, kBacklogged, kClosing };

  Stop ExecuteBuffered();
  // Handles the handshake's bytes; false when they are not all here yet.
  bool Handshake();
  // Executes one request; `payload` is a WRITE's.
  void Execute(const RemoteRequest& req, const uint8_t* payload);
  // Reads what the socket has (into the input buffer, or into a large
  // WRITE's payload). Returns the bytes read; an error ends the connection.
  absl::StatusOr<size_t> ReadSome();
  // Sends buffered output until done or the socket is full; false on error.
  bool Flush();
  size_t Backlog() const { return out_.size() - out_sent_; }
  size_t Available() const { return in_.size() - in_read_; }

  const SoftTargetContext& context_;
  ServedTally& served_;
  Fd fd_;
  State state_ = State::kHelloFixed;
  size_t hello_rest_bytes_ = 0;
  uint16_t hello_version_ = 0;
  uint64_t peer_id_ = 0;
  // A fresh socket is assumed ready both ways; a recv or send says otherwise.
  bool readable_ = true;
  bool writable_ = true;
  bool eof_ = false;
  // epoll reported the peer's FIN (or an error): read on until recv says so.
  bool peer_shut_ = false;
  // No more requests execute: after an error completion, a malformed frame,
  // a refused handshake or the peer's EOF. The output is sent, then done.
  bool closing_ = false;

  ByteBuffer in_;
  size_t in_read_ = 0;  // Consumed prefix of in_.
  // A WRITE too large for in_ gathers its payload here, read straight from
  // the socket; it executes once whole, as before.
  std::optional<RemoteRequest> large_write_;
  ByteBuffer payload_;
  ByteBuffer out_;
  size_t out_sent_ = 0;  // Sent prefix of out_.
};

}  // namespace rkv::fabric

#endif  // RKV_COMMON_FABRIC_SOFT_SOFT_TARGET_CONNECTION_H_
