// The client's cache of key -> (slot, slot value): where a key was last
// seen and what its slot held. A hit lets GET read the slot and the block
// in one doorbell, and UPDATE/DELETE CAS the slot without a lookup. Bounded
// by entry count: a fixed table of 4-way sets where a key may sit in either
// of two sets (so that a full set rarely forces out a live entry), and a
// new key replaces the oldest entry of the two. One cache serves every
// server of a cluster client: an entry belongs to the server region whose
// slot it names, and is found only for that region (a slot word of one
// region says nothing about another's).
#ifndef RKV_CLIENT_SESSION_SLOT_CACHE_H_
#define RKV_CLIENT_SESSION_SLOT_CACHE_H_

#include <cstdint>
#include <list>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace rkv::client_internal {

struct CachedSlot {
  uint64_t slot_offset = 0;
  uint64_t word = 0;    // Committed slot value seen.
  absl::Time seen_at;   // When the read that saw it was posted.
  uint64_t region = 0;  // The region (session) of the slot.
};

// Entries are named by a 128-bit hash of the key (XXH64 under two seeds),
// not by the key: the table then holds no strings, so a lookup costs two
// short hashes and one cache line, and nothing is allocated after the
// table. A wrong hit needs two keys that agree on all 128 bits.
class SlotCache {
 public:
  static constexpr size_t kWays = 4;

  // Room for at least `capacity` entries (0 disables the cache).
  explicit SlotCache(size_t capacity);
  // The entry of `key` in `region`, if there is one.
  const CachedSlot* Find(absl::string_view key, uint64_t region) const;
  void Put(absl::string_view key, uint64_t region, CachedSlot slot);
  void Erase(absl::string_view key);
  size_t size() const { return size_; }

 private:
  struct Id {
    uint64_t a, b;
  };
  struct Entry {
    Id id{0, 0};
    uint64_t stamp = 0;  // When it was put, in puts: the smallest goes first.
    CachedSlot slot;     // slot.word == 0: the entry is free.
  };
  static Id IdOf(absl::string_view key);
  // The entry of `id`, or nullptr; `sets` are its two sets' first entries.
  Entry* Lookup(const Id& id, Entry* sets[2]) const;

  mutable std::vector<Entry> entries_;
  size_t sets_ = 0;  // A power of two.
  size_t size_ = 0;
  uint64_t puts_ = 0;
};

}  // namespace rkv::client_internal

#endif  // RKV_CLIENT_SESSION_SLOT_CACHE_H_
