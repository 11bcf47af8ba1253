// The rounds of one operation, as its parts see them. A part adds the
// requests of its next step to the round being built; the client posts the
// round (sharing the doorbell with other operations' rounds) and steps the
// operation when it has completed. Here too is what the rounds cost, and
// the operation's retry budget, which its parts spend together.
#ifndef RKV_CLIENT_PROTOCOL_OP_ROUNDS_H_
#define RKV_CLIENT_PROTOCOL_OP_ROUNDS_H_

#include <cstdint>
#include <vector>

#include "absl/time/time.h"
#include "client/session/session.h"
#include "common/fabric/types.h"
#include "rkv/client.h"

namespace rkv::client_internal {

class OpRounds {
 public:
  // Restarts (torn or reused blocks, lost races) before an operation gives up.
  static constexpr int kMaxRetries = 200;

  explicit OpRounds(Session& session) : s_(session) {}

  // Starts afresh for another operation; the request list keeps its capacity.
  void Reset();

  // Request builders, to the primary unless `replica` says otherwise;
  // `local` must lie in scratch memory.
  void AddRead(uint64_t region_offset, void* local, uint32_t len, int replica = 0);
  void AddWrite(uint64_t region_offset, const void* local, uint32_t len, int replica = 0);
  void AddCas(uint64_t region_offset, uint64_t* result, uint64_t expected, uint64_t desired,
              int replica = 0);
  void AddFaa(uint64_t region_offset, uint64_t* result, uint64_t add, int replica = 0);
  // A WRITE to other memory of the replica's server than the region (its
  // session table).
  void AddWriteTo(uint64_t remote_addr, uint32_t rkey, const void* local, uint32_t len,
                  int replica);
  void AddReadFrom(uint64_t remote_addr, uint32_t rkey, void* local, uint32_t len, int replica);
  void AddFaaTo(uint64_t remote_addr, uint32_t rkey, uint64_t* result, uint64_t add, int replica);

  // The requests of the round being built, and the replica each goes to;
  // the client posts and clears them (Clear()).
  const std::vector<fabric::WorkRequest>& requests() const { return requests_; }
  const std::vector<uint8_t>& targets() const { return targets_; }
  bool empty() const { return requests_.empty(); }
  void Clear() {
    requests_.clear();
    targets_.clear();
  }
  // Room for `n` requests, so that building a round allocates nothing.
  void Reserve(size_t n) {
    requests_.reserve(n);
    targets_.reserve(n);
  }
  // The round being built was posted at `at`.
  void OnPosted(absl::Time at);
  // When the last round was posted: what it read is at least this old.
  absl::Time posted_at() const { return posted_at_; }

  // A CAS was posted: should the operation fail now, its outcome is unknown.
  bool posted_cas() const { return posted_cas_; }
  const OpCosts& costs() const { return costs_; }
  // Counts a retry; false once the operation has retried kMaxRetries times.
  bool Retry() { return ++costs_.retries <= kMaxRetries; }

 private:
  Session& s_;
  void Add(const fabric::WorkRequest& wr, int replica);

  std::vector<fabric::WorkRequest> requests_;
  std::vector<uint8_t> targets_;
  absl::Time posted_at_;
  bool posted_cas_ = false;
  OpCosts costs_;
};

}  // namespace rkv::client_internal

#endif  // RKV_CLIENT_PROTOCOL_OP_ROUNDS_H_
