// A growable byte buffer whose new bytes are left uninitialized: the soft
// target overwrites a READ response's bytes at once, and zeroing megabytes
// first (as std::vector::resize does) would be waste.
#ifndef RKV_COMMON_FABRIC_BYTE_BUFFER_H_
#define RKV_COMMON_FABRIC_BYTE_BUFFER_H_

#include <cstddef>
#include <cstdint>
#include <memory>

namespace rkv::fabric {

class ByteBuffer {
 public:
  uint8_t* data() { return data_.get(); }
  const uint8_t* data() const { return data_.get(); }
  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }
  // Makes room for n more bytes without appending them.
  void Reserve(size_t n);
  // Appends n uninitialized bytes and returns where they start.
  uint8_t* Append(size_t n);
  // Keeps the first n bytes (n <= size()).
  void Truncate(size_t n) { size_ = n; }
  // Drops the first n bytes, moving the rest to the front.
  void Consume(size_t n);
  // Empties the buffer, giving its memory back when it holds more than `keep`.
  void Clear(size_t keep);

 private:
  std::unique_ptr<uint8_t[]> data_;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

}  // namespace rkv::fabric

#endif  // RKV_COMMON_FABRIC_BYTE_BUFFER_H_
