#include "client/scratch_arena.h"

#include <iterator>
#include <utility>

#include "common/logging.h"

namespace rkv::client_internal {

ScratchArena::ScratchArena(uint8_t* base, uint64_t size) : base_(base), size_(size / 64 * 64) {
  free_[0] = size_;
}

void ScratchArena::Insert(Ranges& ranges, uint64_t offset, uint64_t length) {
  if (spare_.empty()) {
    ranges.emplace(offset, length);
    return;
  }
  Ranges::node_type node = std::move(spare_.back());
  spare_.pop_back();
  node.key() = offset;
  node.mapped() = length;
  ranges.insert(std::move(node));
}

ScratchArena::Ranges::iterator ScratchArena::Remove(Ranges& ranges, Ranges::iterator it) {
  Ranges::iterator next = std::next(it);
  spare_.push_back(ranges.extract(it));
  return next;
}

bool ScratchArena::empty() const {
  std::lock_guard<std::mutex> lock(mu_);
  return allocated_.empty();
}

uint8_t* ScratchArena::Allocate(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  bytes = (bytes + 63) / 64 * 64;
  if (bytes == 0) bytes = 64;
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < bytes) continue;
    const uint64_t off = it->first;
    const uint64_t rest = it->second - bytes;
    Remove(free_, it);
    if (rest > 0) Insert(free_, off + bytes, rest);
    Insert(allocated_, off, bytes);
    return base_ + off;
  }
  return nullptr;
}

void ScratchArena::Free(uint8_t* p) {
  if (p == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto a = allocated_.find(static_cast<uint64_t>(p - base_));
  RKV_CHECK(a != allocated_.end()) << "freeing scratch memory that was not allocated";
  uint64_t off = a->first, len = a->second;
  Remove(allocated_, a);
  // Merge with the free neighbours.
  auto next = free_.lower_bound(off);
  if (next != free_.end() && off + len == next->first) {
    len += next->second;
    next = Remove(free_, next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == off) {
      prev->second += len;
      return;
    }
  }
  Insert(free_, off, len);
}

}  // namespace rkv::client_internal
