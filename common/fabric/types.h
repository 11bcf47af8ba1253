// The vocabulary of the one-sided fabric: work requests, completions and
// counters. These mirror ibverbs' RC subset that rkv uses and nothing more;
// no ibverbs type appears above the fabric.
#ifndef RKV_COMMON_FABRIC_TYPES_H_
#define RKV_COMMON_FABRIC_TYPES_H_

#include <cstdint>
#include <string>

namespace rkv::fabric {

// Access rights of a registered region (ibv_access_flags), or-ed together.
// As with verbs, kRemoteWrite and kRemoteAtomic require kLocalWrite.
inline constexpr uint32_t kLocalWrite = 1u << 0;
inline constexpr uint32_t kRemoteRead = 1u << 1;
inline constexpr uint32_t kRemoteWrite = 1u << 2;
inline constexpr uint32_t kRemoteAtomic = 1u << 3;
inline constexpr uint32_t kAllAccess = kLocalWrite | kRemoteRead | kRemoteWrite | kRemoteAtomic;

enum class Opcode : uint8_t { kRead = 0, kWrite = 1, kCas64 = 2, kFaa64 = 3 };
const char* OpcodeName(Opcode op);

// Send flags of a work request (ibv_send_flags), or-ed together.
// kSignaled: produce a completion on success (errors always produce one).
inline constexpr uint32_t kSignaled = 1u << 0;
// kFenced: wait for earlier READs and atomics of the queue pair first.
inline constexpr uint32_t kFenced = 1u << 1;
// kInline: copy a WRITE's payload at Post time, so the buffer may be reused
// at once and needs no lkey. At most QueuePairLimits::max_inline_data bytes.
inline constexpr uint32_t kInline = 1u << 2;

// Largest single READ or WRITE either backend accepts.
inline constexpr uint32_t kMaxMessageBytes = 16u << 20;

struct WorkRequest {
  uint64_t wr_id = 0;
  Opcode opcode = Opcode::kRead;
  uint32_t flags = kSignaled;
  // READ: destination; WRITE: source; CAS64/FAA64: where the old value of
  // the remote word is stored (8 bytes).
  void* local = nullptr;
  uint32_t length = 0;  // Atomics: always 8.
  uint32_t lkey = 0;
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  uint64_t compare_add = 0;  // CAS64: expected value; FAA64: addend.
  uint64_t swap = 0;         // CAS64: new value.

  static WorkRequest Read(uint64_t wr_id, void* local, uint32_t length, uint32_t lkey,
                          uint64_t remote_addr, uint32_t rkey);
  static WorkRequest Write(uint64_t wr_id, const void* local, uint32_t length, uint32_t lkey,
                           uint64_t remote_addr, uint32_t rkey);
  static WorkRequest Cas(uint64_t wr_id, uint64_t* old_value, uint32_t lkey, uint64_t remote_addr,
                         uint32_t rkey, uint64_t expected, uint64_t desired);
  static WorkRequest Faa(uint64_t wr_id, uint64_t* old_value, uint32_t lkey, uint64_t remote_addr,
                         uint32_t rkey, uint64_t add);
};

// A subset of ibv_wc_status.
enum class CompletionStatus : uint8_t {
  kSuccess = 0,
  kLocalProtectionError = 1,  // Local buffer not covered by its lkey.
  kRemoteAccessError = 2,     // Bad rkey, out of bounds, or missing right.
  kRemoteInvalidRequest = 3,  // E.g. a misaligned atomic.
  kFlushed = 4,               // Posted or outstanding while in the error state.
  kRetryExceeded = 5,         // Transport failure: peer gone or unreachable.
  // The transport completed a READ or an atomic without delivering its
  // result (Soft-RoCE does so under packet loss). The request executed at
  // the target or not; the queue pair fails, as after kRetryExceeded.
  kResponseLost = 6,
};
const char* CompletionStatusName(CompletionStatus status);

struct Completion {
  uint64_t wr_id = 0;
  Opcode opcode = Opcode::kRead;
  CompletionStatus status = CompletionStatus::kSuccess;
  uint32_t byte_len = 0;
};

// Per-queue-pair counters. A doorbell is one Post: the unit of a round trip.
struct QueuePairCounters {
  uint64_t doorbells = 0;
  uint64_t requests = 0;
  uint64_t bytes = 0;  // READ/WRITE payload plus 8 per atomic.
  uint64_t error_completions = 0;

  // Sums counters of several queue pairs (a client's, over reconnects).
  QueuePairCounters& operator+=(const QueuePairCounters& o) {
    doorbells += o.doorbells;
    requests += o.requests;
    bytes += o.bytes;
    error_completions += o.error_completions;
    return *this;
  }
};

// What a listener's target served its peers, since the listener began:
// the queue pairs it accepted, and the one-sided requests it executed for
// them. Requests count once they executed successfully; one refused (a bad
// rkey, out of bounds, a missing right) changed nothing and is not counted.
// On verbs the NIC executes requests without the target's CPU, which never
// sees them: there every request and byte figure stays 0.
struct ListenerCounters {
  uint64_t connections = 0;           // Queue pairs open now.
  uint64_t connections_accepted = 0;  // Queue pairs ever accepted.
  uint64_t reads = 0;
  uint64_t writes = 0;
  uint64_t compare_and_swaps = 0;
  uint64_t fetch_and_adds = 0;
  uint64_t read_bytes = 0;   // READ payload sent back to peers.
  uint64_t write_bytes = 0;  // WRITE payload landed in this node's memory.

  ListenerCounters& operator+=(const ListenerCounters& o) {
    connections += o.connections;
    connections_accepted += o.connections_accepted;
    reads += o.reads;
    writes += o.writes;
    compare_and_swaps += o.compare_and_swaps;
    fetch_and_adds += o.fetch_and_adds;
    read_bytes += o.read_bytes;
    write_bytes += o.write_bytes;
    return *this;
  }
};

// Limits of one queue pair, taken from the device where there is one.
struct QueuePairLimits {
  uint32_t max_send_wr = 0;      // Requests outstanding at once.
  uint32_t max_inline_data = 0;  // Largest kInline WRITE.
  uint32_t max_rd_atomic = 0;    // READs and atomics in flight at once.
};

// Where a target listens: "host:port" for tcp and verbs, "sim:NAME" in the
// deterministic simulation. `token` is checked by the target's listener.
struct Endpoint {
  std::string address;
  std::string token;
};

// A registered region as remote peers see it: where to connect, and the
// address range and rkey that open it.
struct RemoteRegion {
  Endpoint endpoint;
  uint64_t base = 0;
  uint64_t length = 0;
  uint32_t rkey = 0;
};

}  // namespace rkv::fabric

#endif  // RKV_COMMON_FABRIC_TYPES_H_
