#include "client/slot_cache.h"

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

SlotCache::Entry* SlotCache::Lookup(const Id& id, Entry** set) const {
  *set = &entries_[(id.a & (sets_ - 1)) * kWays];
  for (size_t w = 0; w < kWays; ++w) {
    Entry& e = (*set)[w];
    if (e.slot.word != 0 && e.id.a == id.a && e.id.b == id.b) return &e;
  }
  return nullptr;
}

const CachedSlot* SlotCache::Find(absl::string_view key, uint64_t region) const {
  if (sets_ == 0) return nullptr;
  Entry* set;
  const Entry* e = Lookup(IdOf(key), &set);
  return e == nullptr || e->slot.region != region ? nullptr : &e->slot;
}

void SlotCache::Put(absl::string_view key, uint64_t region, CachedSlot slot) {
  if (sets_ == 0 || slot.word == 0) return;
  slot.region = region;
  const Id id = IdOf(key);
  Entry* set;
  Entry* e = Lookup(id, &set);
  if (e == nullptr) {
    // A free way, else the oldest.
    e = &set[0];
    for (size_t w = 0; w < kWays && e->slot.word != 0; ++w) {
      if (set[w].slot.word == 0 || set[w].stamp < e->stamp) e = &set[w];
    }
    if (e->slot.word == 0) size_++;
    e->id = id;
  }
  e->stamp = ++puts_;
  e->slot = slot;
}

void SlotCache::Erase(absl::string_view key) {
  if (sets_ == 0) return;
  Entry* set;
  if (Entry* e = Lookup(IdOf(key), &set); e != nullptr) {
    *e = Entry{};
    size_--;
  }
}

}  // namespace rkv::client_internal
