#include "common/hash.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#elif defined(__aarch64__)
#include <arm_acle.h>
#include <sys/auxv.h>
#endif

namespace rkv {
namespace {

constexpr uint64_t kP1 = 0x9E3779B185EBCA87ULL;
constexpr uint64_t kP2 = 0xC2B2AE3D27D4EB4FULL;
constexpr uint64_t kP3 = 0x165667B19E3779F9ULL;
constexpr uint64_t kP4 = 0x85EBCA77C2B2AE63ULL;
constexpr uint64_t kP5 = 0x27D4EB2F165667C5ULL;

inline uint64_t Rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

inline uint64_t Load64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);  // rkv runs on little-endian hosts only.
  return v;
}

inline uint32_t Load32(const unsigned char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

inline uint64_t Round(uint64_t acc, uint64_t input) {
  acc += input * kP2;
  acc = Rotl(acc, 31);
  return acc * kP1;
}

inline uint64_t MergeRound(uint64_t acc, uint64_t val) {
  acc ^= Round(0, val);
  return acc * kP1 + kP4;
}

std::array<uint32_t, 256> MakeCrc32cTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}

}  // namespace

uint64_t XXH64(absl::string_view data, uint64_t seed) {
  const auto* p = reinterpret_cast<const unsigned char*>(data.data());
  const unsigned char* const end = p + data.size();
  uint64_t h;
  if (data.size() >= 32) {
    uint64_t v1 = seed + kP1 + kP2, v2 = seed + kP2, v3 = seed, v4 = seed - kP1;
    const unsigned char* const limit = end - 32;
    do {
      v1 = Round(v1, Load64(p));
      v2 = Round(v2, Load64(p + 8));
      v3 = Round(v3, Load64(p + 16));
      v4 = Round(v4, Load64(p + 24));
      p += 32;
    } while (p <= limit);
    h = Rotl(v1, 1) + Rotl(v2, 7) + Rotl(v3, 12) + Rotl(v4, 18);
    h = MergeRound(h, v1);
    h = MergeRound(h, v2);
    h = MergeRound(h, v3);
    h = MergeRound(h, v4);
  } else {
    h = seed + kP5;
  }
  h += data.size();
  while (p + 8 <= end) {
    h ^= Round(0, Load64(p));
    h = Rotl(h, 27) * kP1 + kP4;
    p += 8;
  }
  if (p + 4 <= end) {
    h ^= static_cast<uint64_t>(Load32(p)) * kP1;
    h = Rotl(h, 23) * kP2 + kP3;
    p += 4;
  }
  while (p < end) {
    h ^= (*p) * kP5;
    h = Rotl(h, 11) * kP1;
    ++p;
  }
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

uint64_t Fnv1a64(absl::string_view data) {
  uint64_t h = 0xCBF29CE484222325ULL;
  for (unsigned char c : data) {
    h ^= c;
    h *= 0x100000001B3ULL;
  }
  return h;
}

namespace hash_internal {

uint32_t Crc32cPortable(absl::string_view data, uint32_t crc) {
  static const std::array<uint32_t, 256> table = MakeCrc32cTable();
  crc = ~crc;
  for (unsigned char c : data) crc = table[(crc ^ c) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

// The instruction computes the same reflected CRC-32C as the table, a byte
// or eight at a time. Compiled for the instruction set alone (the target
// attribute), so that the rest of the binary runs on CPUs without it; it is
// called only once the CPU was seen to have it. Eight-byte steps start at
// an aligned address: unaligned loads would be correct, but slower on some
// cores.
#if defined(__x86_64__)

bool Crc32cHardwareAvailable() { return __builtin_cpu_supports("sse4.2"); }

__attribute__((target("sse4.2"))) uint32_t Crc32cHardware(absl::string_view data, uint32_t crc) {
  const auto* p = reinterpret_cast<const unsigned char*>(data.data());
  size_t n = data.size();
  uint32_t c = ~crc;
  for (; n > 0 && reinterpret_cast<uintptr_t>(p) % 8 != 0; --n) c = _mm_crc32_u8(c, *p++);
  uint64_t c64 = c;
  for (; n >= 8; n -= 8, p += 8) c64 = _mm_crc32_u64(c64, Load64(p));
  c = static_cast<uint32_t>(c64);
  for (; n > 0; --n) c = _mm_crc32_u8(c, *p++);
  return ~c;
}

#elif defined(__aarch64__)

bool Crc32cHardwareAvailable() { return (getauxval(AT_HWCAP) & HWCAP_CRC32) != 0; }

__attribute__((target("+crc"))) uint32_t Crc32cHardware(absl::string_view data, uint32_t crc) {
  const auto* p = reinterpret_cast<const unsigned char*>(data.data());
  size_t n = data.size();
  uint32_t c = ~crc;
  for (; n > 0 && reinterpret_cast<uintptr_t>(p) % 8 != 0; --n) c = __crc32cb(c, *p++);
  for (; n >= 8; n -= 8, p += 8) c = __crc32cd(c, Load64(p));
  for (; n > 0; --n) c = __crc32cb(c, *p++);
  return ~c;
}

#else

bool Crc32cHardwareAvailable() { return false; }

uint32_t Crc32cHardware(absl::string_view data, uint32_t crc) { return Crc32cPortable(data, crc); }

#endif

}  // namespace hash_internal

uint32_t Crc32c(absl::string_view data, uint32_t crc) {
  using Impl = uint32_t (*)(absl::string_view, uint32_t);
  static const Impl impl = hash_internal::Crc32cHardwareAvailable()
                               ? &hash_internal::Crc32cHardware
                               : &hash_internal::Crc32cPortable;
  return impl(data, crc);
}

}  // namespace rkv
