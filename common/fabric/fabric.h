// The one-sided fabric: the layer everything in rkv stands on.
//
// A Fabric is one node's NIC: it registers memory (so that peers may READ,
// WRITE and CAS it without this node's CPU) and opens reliable-connected
// queue pairs to other nodes. Two backends implement it: `verbs` (rdma-core
// with librdmacm, on RDMA hardware) and `soft` (a virtual NIC over TCP, or
// in-process under a deterministic scheduler). Code above this header never
// learns which one it runs on.
//
// Lifetimes: a MemoryRegion, Listener or QueuePair may outlive the Fabric
// that made it; each keeps what it needs alive.
#ifndef RKV_COMMON_FABRIC_FABRIC_H_
#define RKV_COMMON_FABRIC_FABRIC_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/fabric/types.h"

namespace rkv::fabric {

// Registered memory. Destroying it deregisters: afterwards remote requests
// naming its rkey fail with kRemoteAccessError.
class MemoryRegion {
 public:
  virtual ~MemoryRegion() = default;
  MemoryRegion(const MemoryRegion&) = delete;
  MemoryRegion& operator=(const MemoryRegion&) = delete;

  void* addr() const { return addr_; }
  size_t length() const { return length_; }
  uint32_t lkey() const { return lkey_; }
  uint32_t rkey() const { return rkey_; }
  uint32_t access() const { return access_; }
  // The address remote peers use for byte 0 of the region.
  uint64_t remote_base() const { return reinterpret_cast<uintptr_t>(addr_); }

 protected:
  MemoryRegion(void* addr, size_t length, uint32_t lkey, uint32_t rkey, uint32_t access)
      : addr_(addr), length_(length), lkey_(lkey), rkey_(rkey), access_(access) {}

 private:
  void* addr_;
  size_t length_;
  uint32_t lkey_;
  uint32_t rkey_;
  uint32_t access_;
};

// A reliable-connected queue pair to one remote node. Thread-safe.
class QueuePair {
 public:
  virtual ~QueuePair() = default;

  // Posts a batch of work requests with one doorbell. Requests execute at
  // the target in order; nothing is ordered across queue pairs. A returned
  // error means nothing was posted: InvalidArgument for a malformed request,
  // ResourceExhausted when the send queue lacks room for the whole batch.
  // In the error state posts succeed and every request completes kFlushed.
  virtual absl::Status Post(absl::Span<const WorkRequest> batch) = 0;

  // Moves up to out.size() completions into `out` without blocking. A
  // successful completion vouches for its request and every unsignaled one
  // before it: their READ bytes and atomic old values are in their buffers.
  virtual size_t Poll(absl::Span<Completion> out) = 0;

  // Like Poll, but waits up to `timeout` for at least one completion.
  virtual size_t Wait(absl::Span<Completion> out, absl::Duration timeout) = 0;

  // True once an error completion has been generated; the queue pair never
  // leaves that state (open a new one).
  virtual bool in_error() const = 0;

  virtual QueuePairCounters counters() const = 0;
  virtual QueuePairLimits limits() const = 0;
};

// Wakes a thread that waits for completions on any of many queue pairs: the
// queue pairs connected with it (QueuePairOptions::channel) notify it, as
// the CQs of a verbs completion channel do. A client with a queue pair per
// server waits on one channel instead of visiting each in turn.
class CompletionChannel {
 public:
  virtual ~CompletionChannel() = default;
  // Returns once an attached queue pair has had a new completion since the
  // previous Wait returned, or after `timeout`. It may return early too:
  // callers poll their queue pairs afterwards either way.
  virtual void Wait(absl::Duration timeout) = 0;
};

// Accepts queue pairs from remote nodes. Destroying it closes the
// connections it accepted: their peers see kRetryExceeded. Thread-safe.
class Listener {
 public:
  virtual ~Listener() = default;
  // The address peers connect to (the bound port when 0 was asked for).
  virtual Endpoint endpoint() const = 0;

  // Closes every queue pair accepted from `peer_id` (QueuePairOptions) and
  // refuses that id from now on: a later Connect naming it fails with
  // FailedPrecondition, whose message says the target fenced it. Once Fence
  // returns, no request of those queue pairs executes here any more: each
  // ran before, or never runs (a multi-packet WRITE cut short may have
  // landed in part). Their initiator's outstanding and later requests
  // complete in error (kRetryExceeded or kFlushed, as when the target is
  // lost). Other peers' queue pairs are untouched. Fencing an id that never
  // connected still refuses it later. 0 names no peer: InvalidArgument.
  //
  // This is how a server stops a client it has given up on (crashed, or
  // paused past its lease) from writing its memory, without the cost of
  // re-registering the region, which would cut off every client.
  virtual absl::Status Fence(uint64_t peer_id) = 0;

  // The peer ids whose last queue pair accepted here closed since the
  // last call (or since the listener began) and that have none open now,
  // oldest first: their initiator closed them or is gone — an exiting
  // process's connections close with it, at once — or the target closed
  // them (a fence, a peer that stopped answering). Id 0 is never among
  // them. A server fences such a client session at once instead of
  // waiting out its lease.
  virtual std::vector<uint64_t> TakeDeparted() = 0;

  // What this listener has served (ListenerCounters), for a server's
  // metrics. Cheap: it sums a few counters, and the threads that execute
  // requests never wait for it.
  virtual ListenerCounters counters() const = 0;
};

enum class FabricKind { kAuto, kVerbs, kSoft };
const char* FabricKindName(FabricKind kind);
// Parses "auto", "verbs" or "soft".
absl::StatusOr<FabricKind> ParseFabricKind(absl::string_view text);

struct FabricOptions {
  FabricKind kind = FabricKind::kAuto;
  // verbs: the device to open (ibv_devices lists them); empty: the first.
  std::string rdma_device;
  // soft over TCP: how long a wait for work spins before it sleeps — an
  // initiator's Wait and completion channel, a target's event loops — as
  // an RDMA application busy-polls its completion queue. A round trip then
  // costs no wake-up, but each waiting thread keeps a core busy: worth it
  // only with a core to spare for every such thread. Zero: sleep at once.
  absl::Duration soft_busy_poll = absl::ZeroDuration();
};

struct ListenOptions {
  // host:port for tcp and verbs (port 0 picks a free one); a name for sim.
  std::string address = "127.0.0.1:0";
  // Peers must present this token to connect (empty accepts any).
  std::string token;
  // soft over TCP: the target's event-loop threads, which execute requests
  // for all queue pairs (0: min(hardware threads, 4)). Others ignore it.
  uint32_t soft_threads = 0;
};

struct QueuePairOptions {
  uint32_t max_send_wr = 512;
  uint32_t max_inline_data = 128;
  absl::Duration connect_timeout = absl::Seconds(5);
  // Notified of this queue pair's completions; made by the same fabric.
  std::shared_ptr<CompletionChannel> channel;
  // Names the initiator to the target, which can cut off every queue pair
  // that names it (Listener::Fence): an rkv client session. 0: none, and
  // never fenced.
  uint64_t peer_id = 0;
};

class Fabric {
 public:
  virtual ~Fabric() = default;

  virtual FabricKind kind() const = 0;

  // Registers [addr, addr + length) with the given Access bits.
  virtual absl::StatusOr<std::unique_ptr<MemoryRegion>> RegisterMemory(void* addr, size_t length,
                                                                       uint32_t access) = 0;

  // Starts accepting queue pairs; peers reach this node's registered memory
  // through them.
  virtual absl::StatusOr<std::unique_ptr<Listener>> Listen(const ListenOptions& options) = 0;

  // A channel that queue pairs of this fabric may be connected with.
  virtual absl::StatusOr<std::shared_ptr<CompletionChannel>> NewCompletionChannel() = 0;

  // Connects a queue pair to a listening node. Unavailable when the node
  // cannot be reached or nobody listens there; PermissionDenied when it
  // refuses the token; FailedPrecondition when it has fenced
  // `options.peer_id` or speaks another version of the protocol.
  virtual absl::StatusOr<std::unique_ptr<QueuePair>> Connect(
      const Endpoint& endpoint, const QueuePairOptions& options = {}) = 0;
};

// Opens the fabric that `options.kind` names. kAuto picks verbs when an RDMA
// device exists and soft otherwise. kVerbs without a device is
// FailedPrecondition with a message that names --fabric=soft.
absl::StatusOr<std::unique_ptr<Fabric>> OpenFabric(const FabricOptions& options);

}  // namespace rkv::fabric

#endif  // RKV_COMMON_FABRIC_FABRIC_H_
