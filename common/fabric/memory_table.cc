#include "common/fabric/memory_table.h"

namespace rkv::fabric {

uint32_t MemoryTable::FreshKeyLocked() {
  for (;;) {
    uint32_t key = static_cast<uint32_t>(rng_.Next());
    if (key != 0 && !by_rkey_.contains(key) && !by_lkey_.contains(key)) return key;
  }
}

std::pair<uint32_t, uint32_t> MemoryTable::Add(void* addr, uint64_t length, uint32_t access) {
  std::unique_lock<std::shared_mutex> lock(mu_);
  RegisteredRange range{static_cast<uint8_t*>(addr), length, access};
  uint32_t lkey = FreshKeyLocked();
  by_lkey_[lkey] = range;
  uint32_t rkey = FreshKeyLocked();
  by_rkey_[rkey] = range;
  return {lkey, rkey};
}

void MemoryTable::Remove(uint32_t lkey, uint32_t rkey) {
  std::unique_lock<std::shared_mutex> lock(mu_);
  by_lkey_.erase(lkey);
  by_rkey_.erase(rkey);
}

uint8_t* MemoryTable::Check(const RegisteredRange& r, uint64_t addr, uint64_t len,
                            uint32_t required) {
  if ((r.access & required) != required) return nullptr;
  const uint64_t base = reinterpret_cast<uintptr_t>(r.base);
  if (addr < base) return nullptr;
  const uint64_t offset = addr - base;
  if (offset > r.length || len > r.length - offset) return nullptr;
  return r.base + offset;
}

bool MemoryTable::CheckLocal(uint32_t lkey, const void* addr, uint64_t len,
                             uint32_t required) const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  auto it = by_lkey_.find(lkey);
  if (it == by_lkey_.end()) return false;
  return Check(it->second, reinterpret_cast<uintptr_t>(addr), len, required) != nullptr;
}

}  // namespace rkv::fabric
