// An owning handle on a piece of scratch memory: handed back to its arena
// when the handle goes, so that an operation's parts each hold their own
// buffers and no path can leak or share one.
#ifndef RKV_CLIENT_SESSION_SCRATCH_BUFFER_H_
#define RKV_CLIENT_SESSION_SCRATCH_BUFFER_H_

#include <cstdint>
#include <utility>

#include "client/session/scratch_arena.h"

namespace rkv::client_internal {

class ScratchBuffer {
 public:
  ScratchBuffer() = default;
  // Empty (false) when the arena has no free range of `bytes`.
  static ScratchBuffer Allocate(ScratchArena& arena, uint64_t bytes) {
    return ScratchBuffer(&arena, arena.Allocate(bytes), bytes);
  }
  // Room for one T, for a part's fixed scratch (bucket images, result words).
  template <typename T>
  static ScratchBuffer AllocateFor(ScratchArena& arena) {
    return Allocate(arena, sizeof(T));
  }

  ScratchBuffer(ScratchBuffer&& other) noexcept
      : arena_(std::exchange(other.arena_, nullptr)),
        data_(std::exchange(other.data_, nullptr)),
        size_(std::exchange(other.size_, 0)) {}
  ScratchBuffer& operator=(ScratchBuffer&& other) noexcept {
    if (this != &other) {
      Reset();
      arena_ = std::exchange(other.arena_, nullptr);
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;
  ~ScratchBuffer() { Reset(); }

  explicit operator bool() const { return data_ != nullptr; }
  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  // The buffer as the T it was allocated for.
  template <typename T>
  T* As() const {
    return reinterpret_cast<T*>(data_);
  }

  // Hands the memory back now.
  void Reset() {
    if (data_ != nullptr) arena_->Free(data_);
    data_ = nullptr;
    size_ = 0;
  }

 private:
  ScratchBuffer(ScratchArena* arena, uint8_t* data, uint64_t size)
      : arena_(arena), data_(data), size_(data != nullptr ? size : 0) {}

  ScratchArena* arena_ = nullptr;
  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace rkv::client_internal

#endif  // RKV_CLIENT_SESSION_SCRATCH_BUFFER_H_
