// The soft NIC's memory translation table: which ranges are registered,
// under which keys, with which rights. One per soft Fabric (one per "node").
#ifndef RKV_COMMON_FABRIC_MEMORY_TABLE_H_
#define RKV_COMMON_FABRIC_MEMORY_TABLE_H_

#include <cstdint>
#include <mutex>
#include <shared_mutex>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "common/fabric/types.h"
#include "common/random.h"

namespace rkv::fabric {

struct RegisteredRange {
  uint8_t* base = nullptr;
  uint64_t length = 0;
  uint32_t access = 0;
};

class MemoryTable {
 public:
  explicit MemoryTable(uint64_t key_seed) : rng_(key_seed) {}

  // Returns {lkey, rkey}, both fresh: a key is never handed out twice, so a
  // peer holding a stale rkey after re-registration is refused.
  std::pair<uint32_t, uint32_t> Add(void* addr, uint64_t length, uint32_t access);
  void Remove(uint32_t lkey, uint32_t rkey);

  // Runs fn(uint8_t* host_address) while the range stays registered, if
  // [addr, addr+len) lies inside the region `rkey` names and the region
  // grants `required` rights; otherwise returns kRemoteAccessError without
  // calling fn. `addr` is the remote (virtual) address.
  template <typename Fn>
  CompletionStatus WithRemote(uint32_t rkey, uint64_t addr, uint64_t len, uint32_t required,
                              Fn&& fn) const {
    std::shared_lock<std::shared_mutex> lock(mu_);
    auto it = by_rkey_.find(rkey);
    if (it == by_rkey_.end()) return CompletionStatus::kRemoteAccessError;
    uint8_t* p = Check(it->second, addr, len, required);
    if (p == nullptr) return CompletionStatus::kRemoteAccessError;
    fn(p);
    return CompletionStatus::kSuccess;
  }

  // Whether [addr, addr+len) lies inside the region `lkey` names with
  // `required` rights: the check a NIC makes of a local buffer.
  bool CheckLocal(uint32_t lkey, const void* addr, uint64_t len, uint32_t required) const;

 private:
  static uint8_t* Check(const RegisteredRange& r, uint64_t addr, uint64_t len, uint32_t required);
  uint32_t FreshKeyLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable std::shared_mutex mu_;
  Rng rng_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint32_t, RegisteredRange> by_rkey_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint32_t, RegisteredRange> by_lkey_ ABSL_GUARDED_BY(mu_);
};

}  // namespace rkv::fabric

#endif  // RKV_COMMON_FABRIC_MEMORY_TABLE_H_
