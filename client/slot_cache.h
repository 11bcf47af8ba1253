// The client's cache of key -> (slot, slot value): where a key was last
// seen and what its slot held. A hit lets GET read the slot and the block
// in one doorbell, and UPDATE/DELETE CAS the slot without a lookup. Bounded
// by entry count; the oldest entries go first. One cache serves every
// server of a cluster client: an entry belongs to the server region whose
// slot it names, and is found only for that region (a slot word of one
// region says nothing about another's).
#ifndef RKV_CLIENT_SLOT_CACHE_H_
#define RKV_CLIENT_SLOT_CACHE_H_

#include <cstdint>
#include <list>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace rkv::client_internal {

struct CachedSlot {
  uint64_t slot_offset = 0;
  uint64_t word = 0;           // Committed slot value seen.
  absl::Time seen_at;          // When the read that saw it was posted.
  uint64_t region = 0;         // The region (session) of the slot.
};

class SlotCache {
 public:
  explicit SlotCache(size_t capacity) : capacity_(capacity) {}
  // The entry of `key` in `region`, if there is one.
  const CachedSlot* Find(absl::string_view key, uint64_t region) const;
  void Put(absl::string_view key, uint64_t region, CachedSlot slot);
  void Erase(absl::string_view key);
  size_t size() const { return map_.size(); }

 private:
  struct Entry {
    CachedSlot slot;
    std::list<std::string>::iterator order;
  };
  const size_t capacity_;
  std::list<std::string> order_;  // Insertion order, oldest first.
  absl::flat_hash_map<std::string, Entry> map_;
};

}  // namespace rkv::client_internal

#endif  // RKV_CLIENT_SLOT_CACHE_H_
