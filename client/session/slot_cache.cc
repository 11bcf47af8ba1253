#include "client/session/slot_cache.h"

#include "common/hash.h"

namespace rkv::client_internal {

SlotCache::SlotCache(size_t capacity) {
  if (capacity == 0) return;
  sets_ = 1;
  while (sets_ * kWays < capacity) sets_ *= 2;
  entries_.resize(sets_ * kWays);
}

SlotCache::Id SlotCache::IdOf(absl::string_view key) {
  // Seeds of no other use, so that the id is independent of placement.
  return {XXH64(key, 0x736c6f7463616368), XXH64(key, 0x9e3779b97f4a7c15)};
}

SlotCache::Entry* SlotCache::Lookup(const Id& id, Entry* sets[2]) const {
  sets[0] = &entries_[(id.a & (sets_ - 1)) * kWays];
  sets[1] = &entries_[(id.b & (sets_ - 1)) * kWays];
  for (int k = 0; k < 2; ++k) {
    for (size_t w = 0; w < kWays; ++w) {
      Entry& e = sets[k][w];
      if (e.slot.word != 0 && e.id.a == id.a && e.id.b == id.b) return &e;
    }
  }
  return nullptr;
}

const CachedSlot* SlotCache::Find(absl::string_view key, uint64_t region) const {
  if (sets_ == 0) return nullptr;
  Entry* sets[2];
  const Entry* e = Lookup(IdOf(key), sets);
  return e == nullptr || e->slot.region != region ? nullptr : &e->slot;
}

void SlotCache::Put(absl::string_view key, uint64_t region, CachedSlot slot) {
  if (sets_ == 0 || slot.word == 0) return;
  slot.region = region;
  const Id id = IdOf(key);
  Entry* sets[2];
  Entry* e = Lookup(id, sets);
  if (e == nullptr) {
    // A free way of either set, else the oldest of the two.
    e = &sets[0][0];
    for (int k = 0; k < 2 && e->slot.word != 0; ++k) {
      for (size_t w = 0; w < kWays && e->slot.word != 0; ++w) {
        Entry& c = sets[k][w];
        if (c.slot.word == 0 || c.stamp < e->stamp) e = &c;
      }
    }
    if (e->slot.word == 0) size_++;
    e->id = id;
  }
  e->stamp = ++puts_;
  e->slot = slot;
}

void SlotCache::Erase(absl::string_view key) {
  if (sets_ == 0) return;
  Entry* sets[2];
  if (Entry* e = Lookup(IdOf(key), sets); e != nullptr) {
    *e = Entry{};
    size_--;
  }
}

}  // namespace rkv::client_internal
