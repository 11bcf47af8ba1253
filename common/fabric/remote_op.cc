#include "common/fabric/remote_op.h"

#include <atomic>
#include <cstring>

namespace rkv::fabric {
namespace {

constexpr bool Aligned8(uintptr_t p) { return (p & 7) == 0; }

}  // namespace

void CopyFromShared(uint8_t* dst, const uint8_t* shared, size_t n) {
  size_t i = 0;
  auto byte = [&](size_t k) {
    dst[k] =
        std::atomic_ref<uint8_t>(const_cast<uint8_t&>(shared[k])).load(std::memory_order_relaxed);
  };
  for (; i < n && !Aligned8(reinterpret_cast<uintptr_t>(shared + i)); ++i) byte(i);
  for (; i + 8 <= n; i += 8) {
    uint64_t w =
        std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(const_cast<uint8_t*>(shared + i)))
            .load(std::memory_order_relaxed);
    std::memcpy(dst + i, &w, 8);
  }
  for (; i < n; ++i) byte(i);
}

void CopyToShared(uint8_t* shared, const uint8_t* src, size_t n) {
  size_t i = 0;
  auto byte = [&](size_t k) {
    std::atomic_ref<uint8_t>(shared[k]).store(src[k], std::memory_order_relaxed);
  };
  for (; i < n && !Aligned8(reinterpret_cast<uintptr_t>(shared + i)); ++i) byte(i);
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, src + i, 8);
    std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(shared + i))
        .store(w, std::memory_order_relaxed);
  }
  for (; i < n; ++i) byte(i);
}

CompletionStatus ExecuteRead(const MemoryTable& table, const RemoteRequest& req, uint32_t offset,
                             uint32_t n, uint8_t* dst) {
  return table.WithRemote(req.rkey, req.remote_addr, req.length, kRemoteRead,
                          [&](uint8_t* p) { CopyFromShared(dst, p + offset, n); });
}

CompletionStatus ExecuteWrite(const MemoryTable& table, const RemoteRequest& req, uint32_t offset,
                              uint32_t n, const uint8_t* src) {
  return table.WithRemote(req.rkey, req.remote_addr, req.length, kRemoteWrite,
                          [&](uint8_t* p) { CopyToShared(p + offset, src, n); });
}

CompletionStatus ExecuteAtomic(const MemoryTable& table, const RemoteRequest& req,
                               uint64_t* old_value) {
  if (!Aligned8(req.remote_addr) || req.length != 8) {
    return CompletionStatus::kRemoteInvalidRequest;
  }
  return table.WithRemote(req.rkey, req.remote_addr, 8, kRemoteAtomic, [&](uint8_t* p) {
    std::atomic_ref<uint64_t> word(*reinterpret_cast<uint64_t*>(p));
    if (req.opcode == Opcode::kCas64) {
      uint64_t expected = req.compare_add;
      word.compare_exchange_strong(expected, req.swap, std::memory_order_acq_rel);
      *old_value = expected;  // The word's value before, on success and failure.
    } else {
      *old_value = word.fetch_add(req.compare_add, std::memory_order_acq_rel);
    }
  });
}

}  // namespace rkv::fabric
