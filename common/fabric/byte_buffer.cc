#include "common/fabric/byte_buffer.h"

#include <algorithm>
#include <cstring>

namespace rkv::fabric {

void ByteBuffer::Reserve(size_t n) {
  if (capacity_ - size_ >= n) return;
  const size_t want = std::max(size_ + n, capacity_ * 2);
  // new[] without () leaves the bytes uninitialized.
  std::unique_ptr<uint8_t[]> grown(new uint8_t[want]);
  if (size_ > 0) std::memcpy(grown.get(), data_.get(), size_);
  data_ = std::move(grown);
  capacity_ = want;
}

uint8_t* ByteBuffer::Append(size_t n) {
  Reserve(n);
  uint8_t* p = data_.get() + size_;
  size_ += n;
  return p;
}

void ByteBuffer::Consume(size_t n) {
  if (n >= size_) {
    size_ = 0;
    return;
  }
  std::memmove(data_.get(), data_.get() + n, size_ - n);
  size_ -= n;
}

void ByteBuffer::Clear(size_t keep) {
  size_ = 0;
  if (capacity_ > keep) {
    data_.reset();
    capacity_ = 0;
  }
}

}  // namespace rkv::fabric
