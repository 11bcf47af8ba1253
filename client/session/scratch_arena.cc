#include "client/session/scratch_arena.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "common/logging.h"

namespace rkv::client_internal {

ScratchArena::ScratchArena(uint8_t* base, uint64_t size)
    : base_(base), size_(size / 64 * 64), allocated_units_(size_ / 64), listed_(kListedUnits + 1) {
  free_[0] = size_;
}

void ScratchArena::Insert(uint64_t offset, uint64_t length) {
  if (spare_.empty()) {
    free_.emplace(offset, length);
    return;
  }
  Ranges::node_type node = std::move(spare_.back());
  spare_.pop_back();
  node.key() = offset;
  node.mapped() = length;
  free_.insert(std::move(node));
}

ScratchArena::Ranges::iterator ScratchArena::Remove(Ranges::iterator it) {
  Ranges::iterator next = std::next(it);
  spare_.push_back(free_.extract(it));
  return next;
}

bool ScratchArena::empty() const {
  std::lock_guard<std::mutex> lock(mu_);
  return allocated_count_ == 0;
}

uint8_t* ScratchArena::TakeRange(uint64_t bytes) {
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < bytes) continue;
    const uint64_t off = it->first;
    const uint64_t rest = it->second - bytes;
    Remove(it);
    if (rest > 0) Insert(off + bytes, rest);
    return base_ + off;
  }
  return nullptr;
}

void ScratchArena::ReturnRange(uint64_t off, uint64_t len) {
  auto next = free_.lower_bound(off);
  if (next != free_.end() && off + len == next->first) {
    len += next->second;
    next = Remove(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == off) {
      prev->second += len;
      return;
    }
  }
  Insert(off, len);
}

void ScratchArena::ReturnListed() {
  for (uint64_t units = 1; units <= kListedUnits; ++units) {
    for (uint64_t off : listed_[units]) ReturnRange(off, units * 64);
    listed_[units].clear();
  }
}

uint8_t* ScratchArena::Allocate(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t units = std::max<uint64_t>(1, (bytes + 63) / 64);
  uint8_t* p = nullptr;
  if (units <= kListedUnits && !listed_[units].empty()) {
    p = base_ + listed_[units].back();
    listed_[units].pop_back();
  } else {
    p = TakeRange(units * 64);
    if (p == nullptr) {
      ReturnListed();
      p = TakeRange(units * 64);
    }
    if (p == nullptr) return nullptr;
  }
  allocated_units_[static_cast<uint64_t>(p - base_) / 64] = static_cast<uint32_t>(units);
  allocated_count_++;
  return p;
}

void ScratchArena::Free(uint8_t* p) {
  if (p == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t off = static_cast<uint64_t>(p - base_);
  RKV_CHECK(p >= base_ && off < size_ && off % 64 == 0 && allocated_units_[off / 64] != 0)
      << "freeing scratch memory that was not allocated";
  const uint64_t units = std::exchange(allocated_units_[off / 64], 0);
  allocated_count_--;
  if (units <= kListedUnits) {
    listed_[units].push_back(off);
  } else {
    ReturnRange(off, units * 64);
  }
}

}  // namespace rkv::client_internal
