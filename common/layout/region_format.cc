#include "common/layout/region_format.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/hash.h"
#include "common/unaligned.h"

namespace rkv::layout {
namespace {

constexpr uint64_t kOffsetMask = (uint64_t{1} << 48) - 1;
constexpr uint64_t kHashSeed1 = 0x5253564B31ULL;
constexpr uint64_t kHashSeed2 = 0x5253564B32ULL;

std::array<uint64_t, 256> MakeClassTable() {
  std::array<uint64_t, 256> t{};
  for (int c = 1; c < 256; ++c) {
    if (c <= 64) {
      t[c] = uint64_t(c) * 64;
    } else {
      // 4 KiB * 2^((c-64)/8), rounded up to 64 bytes.
      double bytes = 4096.0;
      for (int i = 0; i < c - 64; ++i) bytes *= 1.0905077326652577;  // 2^(1/8)
      t[c] = (static_cast<uint64_t>(bytes) + 63) / 64 * 64;
    }
  }
  return t;
}

const std::array<uint64_t, 256>& ClassTable() {
  static const std::array<uint64_t, 256> table = MakeClassTable();
  return table;
}

uint32_t HeaderChecksum(const char* header) {
  return Crc32c(absl::string_view(header, HeaderOffsets::kChecksum));
}

}  // namespace

absl::StatusOr<Layout> ComputeLayout(uint64_t region_bytes, double index_share,
                                     uint64_t generation) {
  if (!(index_share > 0 && index_share < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("index share ", index_share, " must lie strictly between 0 and 1"));
  }
  if (region_bytes < kHeaderBytes + kGroupBytes + 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("a region of ", region_bytes, " bytes is too small"));
  }
  Layout l;
  l.region_bytes = region_bytes;
  l.generation = generation;
  l.index_offset = kHeaderBytes;
  const uint64_t usable = region_bytes - kHeaderBytes;
  l.groups = std::max<uint64_t>(1, static_cast<uint64_t>(usable * index_share) / kGroupBytes);
  l.heap_offset = (l.index_offset + l.groups * kGroupBytes + 4095) / 4096 * 4096;
  if (l.heap_offset + 4096 > region_bytes) {
    return absl::InvalidArgumentError("index share leaves no heap");
  }
  l.heap_bytes = region_bytes - l.heap_offset;
  return l;
}

void InitRegion(uint8_t* region, const Layout& l) {
  std::memset(region, 0, kHeaderBytes);
  Put<uint64_t>(region, HeaderOffsets::kMagic, kRegionMagic);
  Put<uint32_t>(region, HeaderOffsets::kVersion, kFormatVersion);
  Put<uint64_t>(region, HeaderOffsets::kRegionBytes, l.region_bytes);
  Put<uint64_t>(region, HeaderOffsets::kGeneration, l.generation);
  Put<uint64_t>(region, HeaderOffsets::kIndexOffset, l.index_offset);
  Put<uint64_t>(region, HeaderOffsets::kGroups, l.groups);
  Put<uint64_t>(region, HeaderOffsets::kHeapOffset, l.heap_offset);
  Put<uint64_t>(region, HeaderOffsets::kHeapBytes, l.heap_bytes);
  Put<uint32_t>(region, HeaderOffsets::kChecksum,
                HeaderChecksum(reinterpret_cast<const char*>(region)));
  std::memset(region + l.index_offset, 0, l.groups * kGroupBytes);
}

void SetGeneration(uint8_t* region, uint64_t generation) {
  // A served region's header is read by peers (the NIC) concurrently:
  // word stores, as theirs are word loads.
  std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(region + HeaderOffsets::kGeneration))
      .store(generation, std::memory_order_relaxed);
  std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(region + HeaderOffsets::kVersion))
      .store(kFormatVersion, std::memory_order_relaxed);
  std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(region + HeaderOffsets::kChecksum))
      .store(HeaderChecksum(reinterpret_cast<const char*>(region)), std::memory_order_relaxed);
}

void SetSessionTable(uint8_t* region, uint64_t address, uint32_t rkey, uint32_t slots,
                     uint64_t lease_us) {
  auto store = [region](uint64_t offset, uint64_t value) {
    std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(region + offset))
        .store(value, std::memory_order_relaxed);
  };
  store(HeaderOffsets::kSessionTable, address);
  store(HeaderOffsets::kSessionTableKey, uint64_t{rkey} | (uint64_t{slots} << 32));
  store(HeaderOffsets::kClientLease, lease_us);
}

void SetGracePeriod(uint8_t* region, uint64_t grace_us) {
  std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(region + HeaderOffsets::kGracePeriod))
      .store(grace_us, std::memory_order_relaxed);
}

absl::StatusOr<Layout> ParseHeader(absl::string_view header, uint64_t region_bytes) {
  if (header.size() < HeaderOffsets::kChecksum + 4) {
    return absl::InvalidArgumentError("region header truncated");
  }
  const char* p = header.data();
  if (Get<uint64_t>(p, HeaderOffsets::kMagic) != kRegionMagic) {
    return absl::DataLossError("not an rkv region (bad magic)");
  }
  const uint32_t version = Get<uint32_t>(p, HeaderOffsets::kVersion);
  if (version < kOldestFormatVersion || version > kFormatVersion) {
    return absl::FailedPreconditionError(absl::StrCat("region format version ", version,
                                                      "; this build reads ", kOldestFormatVersion,
                                                      " to ", kFormatVersion));
  }
  if (Get<uint32_t>(p, HeaderOffsets::kChecksum) != HeaderChecksum(p)) {
    return absl::DataLossError("region header checksum mismatch");
  }
  Layout l;
  l.region_bytes = Get<uint64_t>(p, HeaderOffsets::kRegionBytes);
  l.generation = Get<uint64_t>(p, HeaderOffsets::kGeneration);
  l.index_offset = Get<uint64_t>(p, HeaderOffsets::kIndexOffset);
  l.groups = Get<uint64_t>(p, HeaderOffsets::kGroups);
  l.heap_offset = Get<uint64_t>(p, HeaderOffsets::kHeapOffset);
  l.heap_bytes = Get<uint64_t>(p, HeaderOffsets::kHeapBytes);
  if (header.size() >= HeaderOffsets::kGracePeriod + 8) {
    l.grace_us = Get<uint64_t>(p, HeaderOffsets::kGracePeriod);
  }
  if (header.size() >= HeaderOffsets::kHeaderFieldsEnd) {
    l.session_table = Get<uint64_t>(p, HeaderOffsets::kSessionTable);
    l.session_rkey = Get<uint32_t>(p, HeaderOffsets::kSessionTableKey);
    l.session_slots = Get<uint32_t>(p, HeaderOffsets::kSessionTableKey + 4);
    l.lease_us = Get<uint64_t>(p, HeaderOffsets::kClientLease);
    if (l.session_slots == 0 || l.lease_us == 0) l.session_slots = 0;
  }
  const bool fits = l.region_bytes == region_bytes && l.index_offset >= kHeaderBytes &&
                    l.groups > 0 && l.groups < (uint64_t{1} << 40) &&
                    l.index_offset + l.groups * kGroupBytes <= l.heap_offset &&
                    l.heap_offset <= region_bytes && l.heap_bytes == region_bytes - l.heap_offset;
  if (!fits) {
    return absl::DataLossError(absl::StrCat("region header describes a layout that does not fit ",
                                            region_bytes, " bytes"));
  }
  return l;
}

uint64_t Slot::Encode() const {
  return (uint64_t{fingerprint} << 56) | (uint64_t{size_class} << 48) | (offset & kOffsetMask) |
         (pending ? 1 : 0);
}

Slot Slot::Decode(uint64_t word) {
  Slot s;
  s.fingerprint = static_cast<uint8_t>(word >> 56);
  s.size_class = static_cast<uint8_t>(word >> 48);
  s.offset = word & kOffsetMask & ~kStateBits;
  s.pending = (word & kPendingBit) != 0;
  return s;
}

uint64_t ClassBytes(uint8_t size_class) { return ClassTable()[size_class]; }

uint8_t ClassFor(uint64_t bytes) {
  const auto& t = ClassTable();
  for (int c = 1; c < 256; ++c) {
    if (t[c] >= bytes) return static_cast<uint8_t>(c);
  }
  return 0;
}

uint64_t BlockBytes(size_t key_len, size_t value_len) {
  return kBlockHeaderBytes + key_len + value_len;
}

void EncodeBlockInto(absl::string_view key, absl::string_view value, uint8_t* out) {
  const uint64_t n = BlockBytes(key.size(), value.size());
  std::memset(out, 0, 16);
  Put<uint16_t>(out, 4, static_cast<uint16_t>(key.size()));
  Put<uint32_t>(out, 8, static_cast<uint32_t>(value.size()));
  std::memcpy(out + kBlockHeaderBytes, key.data(), key.size());
  std::memcpy(out + kBlockHeaderBytes + key.size(), value.data(), value.size());
  const uint64_t padded = (n + kBlockAlign - 1) / kBlockAlign * kBlockAlign;
  std::memset(out + n, 0, padded - n);
  Put<uint32_t>(out, 0, Crc32c(absl::string_view(reinterpret_cast<char*>(out) + 4, n - 4)));
}

void EncodeBlock(absl::string_view key, absl::string_view value, std::string* out) {
  const uint8_t c = ClassFor(BlockBytes(key.size(), value.size()));
  out->assign(ClassBytes(c), '\0');
  EncodeBlockInto(key, value, reinterpret_cast<uint8_t*>(out->data()));
}

absl::StatusOr<BlockView> DecodeBlock(absl::string_view bytes, BlockCheck check) {
  if (bytes.size() < kBlockHeaderBytes) return absl::DataLossError("block truncated");
  const char* p = bytes.data();
  const uint64_t key_len = Get<uint16_t>(p, 4);
  const uint64_t value_len = Get<uint32_t>(p, 8);
  if (key_len == 0 || key_len > kMaxKeyBytes || value_len > kMaxValueBytes ||
      kBlockHeaderBytes + key_len + value_len > bytes.size()) {
    return absl::DataLossError("block lengths out of range");
  }
  const uint64_t n = kBlockHeaderBytes + key_len + value_len;
  if (check == BlockCheck::kChecksum && Get<uint32_t>(p, 0) != Crc32c(bytes.substr(4, n - 4))) {
    return absl::DataLossError("block checksum mismatch");
  }
  return BlockView{bytes.substr(kBlockHeaderBytes, key_len),
                   bytes.substr(kBlockHeaderBytes + key_len, value_len)};
}

uint64_t FreeNodeBytes(uint8_t size_class) {
  return std::min<uint64_t>(ClassBytes(size_class), 4096);
}

uint64_t FreeNodeCapacity(uint8_t size_class) {
  return (FreeNodeBytes(size_class) - kFreeNodeHeaderBytes) / 8;
}

void EncodeFreeNode(const FreeNode& node, uint8_t size_class, uint8_t* out) {
  EncodeFreeNode(node.next, node.blocks, size_class, out);
}

void EncodeFreeNode(uint64_t next, absl::Span<const uint64_t> blocks, uint8_t size_class,
                    uint8_t* out) {
  std::memset(out, 0, FreeNodeBytes(size_class));
  Put<uint32_t>(out, 4, static_cast<uint32_t>(blocks.size()));
  Put<uint64_t>(out, 8, next);
  for (size_t i = 0; i < blocks.size(); ++i) {
    Put<uint64_t>(out, kFreeNodeHeaderBytes + 8 * i, blocks[i]);
  }
  const size_t covered = kFreeNodeHeaderBytes + 8 * blocks.size();
  Put<uint32_t>(out, 0,
                Crc32c(absl::string_view(reinterpret_cast<const char*>(out) + 4, covered - 4)));
}

absl::StatusOr<FreeNode> DecodeFreeNode(absl::string_view bytes, uint8_t size_class,
                                        const Layout& layout) {
  if (size_class == 0 || bytes.size() < FreeNodeBytes(size_class)) {
    return absl::DataLossError("free node truncated");
  }
  const char* p = bytes.data();
  const uint32_t count = Get<uint32_t>(p, 4);
  if (count > FreeNodeCapacity(size_class)) return absl::DataLossError("free node count");
  const size_t covered = kFreeNodeHeaderBytes + 8 * size_t{count};
  if (Get<uint32_t>(p, 0) != Crc32c(absl::string_view(p + 4, covered - 4))) {
    return absl::DataLossError("free node checksum");
  }
  const uint64_t block_bytes = ClassBytes(size_class);
  auto valid = [&](uint64_t off) {
    return off >= layout.heap_offset && (off - layout.heap_offset) % kBlockAlign == 0 &&
           off - layout.heap_offset <= layout.heap_bytes &&
           block_bytes <= layout.heap_bytes - (off - layout.heap_offset);
  };
  FreeNode node;
  node.next = Get<uint64_t>(p, 8);
  if (node.next != 0 && !valid(node.next)) return absl::DataLossError("free node next");
  node.blocks.resize(count);
  for (uint32_t i = 0; i < count; ++i) {
    node.blocks[i] = Get<uint64_t>(p, kFreeNodeHeaderBytes + 8 * i);
    if (!valid(node.blocks[i])) return absl::DataLossError("free node block offset");
  }
  return node;
}

KeyPlacement PlaceKey(absl::string_view key, uint64_t groups) {
  const uint64_t h1 = XXH64(key, kHashSeed1);
  const uint64_t h2 = XXH64(key, kHashSeed2);
  KeyPlacement p;
  p.group[0] = h1 % groups;
  p.side[0] = static_cast<uint32_t>((h1 >> 32) & 1);
  p.group[1] = h2 % groups;
  p.side[1] = static_cast<uint32_t>((h2 >> 32) & 1);
  if (p.group[0] == p.group[1] && p.side[0] == p.side[1]) p.side[1] ^= 1;
  p.fingerprint = static_cast<uint8_t>(h1 >> 56);
  return p;
}

void AppendReportRange(uint64_t begin, uint64_t end, std::vector<uint64_t>* out) {
  constexpr uint64_t kMaxUnits = (uint64_t{1} << 16) - 1;
  while (end - begin >= kBlockAlign) {
    const uint64_t units = std::min(kMaxUnits, (end - begin) / kBlockAlign);
    out->push_back(units << 48 | begin | 1);
    begin += units * kBlockAlign;
  }
}

ReportExtent DecodeReportWord(uint64_t word) {
  constexpr uint64_t kOffsetMask = (uint64_t{1} << 48) - 1;
  if ((word & 1) != 0)
    return {(word & kOffsetMask) & ~(kBlockAlign - 1), (word >> 48) * kBlockAlign};
  return {word & kOffsetMask, ClassBytes(static_cast<uint8_t>(word >> 56))};
}

}  // namespace rkv::layout
