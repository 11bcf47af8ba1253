// A double-ended queue in one array that doubles when full and never
// shrinks. std::deque frees a block as its front empties and allocates
// another as its back fills, so a queue that merely cycles allocates every
// few elements; the client's queues (operations waiting to start, freed
// heap blocks) cycle on every operation, and this one then allocates
// nothing once it has grown to its working size.
#ifndef RKV_CLIENT_SESSION_RING_DEQUE_H_
#define RKV_CLIENT_SESSION_RING_DEQUE_H_

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

namespace rkv::client_internal {

// T must be default-constructible and movable: a slot not in use holds a
// default T, so that what a popped element owned is let go at once.
template <typename T>
class RingDeque {
 public:
  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }

  T& front() { return slots_[head_]; }
  const T& front() const { return slots_[head_]; }
  T& back() { return (*this)[size_ - 1]; }
  const T& back() const { return (*this)[size_ - 1]; }
  T& operator[](size_t i) { return slots_[Wrap(head_ + i)]; }
  const T& operator[](size_t i) const { return slots_[Wrap(head_ + i)]; }

  void push_back(T value) {
    GrowIfFull();
    slots_[Wrap(head_ + size_)] = std::move(value);
    ++size_;
  }
  void push_front(T value) {
    GrowIfFull();
    head_ = Wrap(head_ + slots_.size() - 1);
    slots_[head_] = std::move(value);
    ++size_;
  }
  void pop_front() {
    slots_[head_] = T();
    head_ = Wrap(head_ + 1);
    --size_;
  }

 private:
  // The capacity is a power of two, so wrapping is a mask.
  size_t Wrap(size_t i) const { return i & (slots_.size() - 1); }

  void GrowIfFull() {
    if (size_ < slots_.size()) return;
    std::vector<T> bigger(std::max<size_t>(8, slots_.size() * 2));
    for (size_t i = 0; i < size_; ++i) bigger[i] = std::move((*this)[i]);
    slots_.swap(bigger);
    head_ = 0;
  }

  std::vector<T> slots_;
  size_t head_ = 0;
  size_t size_ = 0;
};

}  // namespace rkv::client_internal

#endif  // RKV_CLIENT_SESSION_RING_DEQUE_H_
