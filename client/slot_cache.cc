#include "client/slot_cache.h"

namespace rkv::client_internal {

const CachedSlot* SlotCache::Find(absl::string_view key, uint64_t region) const {
  auto it = map_.find(key);
  return it == map_.end() || it->second.slot.region != region ? nullptr : &it->second.slot;
}

void SlotCache::Put(absl::string_view key, uint64_t region, CachedSlot slot) {
  if (capacity_ == 0) return;
  slot.region = region;
  auto it = map_.find(key);
  if (it != map_.end()) {
    it->second.slot = slot;
    return;
  }
  if (map_.size() >= capacity_) {
    map_.erase(order_.front());
    order_.pop_front();
  }
  order_.emplace_back(key);
  map_.emplace(std::string(key), Entry{slot, std::prev(order_.end())});
}

void SlotCache::Erase(absl::string_view key) {
  auto it = map_.find(key);
  if (it == map_.end()) return;
  order_.erase(it->second.order);
  map_.erase(it);
}

}  // namespace rkv::client_internal
