// libFuzzer target: the decoders of what a client reads from a region and
// what a server reads from a region file: slots, KV blocks, free-pool
// nodes, and the region header. Nothing may crash; a block that decodes
// must hold a key and value that encode back to it.
#include <cstring>
#include <string>

#include "common/layout/region_format.h"

namespace l = rkv::layout;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view in(reinterpret_cast<const char*>(data), size);

  if (size >= 8) {
    uint64_t word;
    std::memcpy(&word, data, 8);
    const l::Slot s = l::Slot::Decode(word);
    if (l::Slot::Decode(s.Encode()).offset != s.offset) __builtin_trap();
    (void)l::FreePoolHead::Decode(word);
  }

  if (auto block = l::DecodeBlock(in); block.ok()) {
    std::string again;
    l::EncodeBlock(block->key, block->value, &again);
    auto back = l::DecodeBlock(again);
    if (!back.ok() || back->key != block->key || back->value != block->value) __builtin_trap();
  }

  // A region header, validated against a region size taken from the input.
  const uint64_t region_bytes = size >= 16 ? (uint64_t{data[8]} << 20) + data[9] : 1 << 20;
  if (auto layout = l::ParseHeader(in, region_bytes); layout.ok()) {
    if (layout->heap_offset + layout->heap_bytes > region_bytes ||
        layout->index_offset + layout->groups * l::kGroupBytes > layout->heap_offset) {
      __builtin_trap();  // A header the server would trust must fit its region.
    }
  }

  // Free-pool nodes of every class, against a fixed 8 MiB layout.
  static const l::Layout layout = *l::ComputeLayout(8 << 20, 0.25, 1);
  if (size > 0) {
    const uint8_t size_class = data[0] ? data[0] : 1;
    (void)l::DecodeFreeNode(in, size_class, layout);
  }
  return 0;
}
