// Hash functions and checksums shared by clients and servers. Every function
// here is part of the on-wire or in-region format: changing one changes the
// format, so each is pinned by known-answer tests.
#ifndef RKV_COMMON_HASH_H_
#define RKV_COMMON_HASH_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace rkv {

// XXH64 (Yann Collet's xxHash, 64-bit variant): the hash that places keys in
// buckets and on servers.
uint64_t XXH64(absl::string_view data, uint64_t seed = 0);

// FNV-1a, 64-bit: what YCSB uses to turn record numbers into keys.
uint64_t Fnv1a64(absl::string_view data);

// CRC-32C (Castagnoli), the checksum over KV blocks. Chainable: pass the
// previous result as `crc` to extend a checksum over more data. Uses the
// CPU's CRC-32C instruction where there is one (SSE4.2 on x86-64, the CRC
// extension on AArch64), chosen at run time; a table otherwise.
uint32_t Crc32c(absl::string_view data, uint32_t crc = 0);

namespace hash_internal {

// Crc32c's implementations, so that tests can hold them to each other.
uint32_t Crc32cPortable(absl::string_view data, uint32_t crc);
// Whether this CPU has the instruction Crc32cHardware needs.
bool Crc32cHardwareAvailable();
// Only where Crc32cHardwareAvailable().
uint32_t Crc32cHardware(absl::string_view data, uint32_t crc);

}  // namespace hash_internal

}  // namespace rkv

#endif  // RKV_COMMON_HASH_H_
