#include "client/region/free_block_return.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/fabric/types.h"
#include "common/layout/region_format.h"
#include "common/status.h"

namespace rkv::client_internal {
namespace {

absl::Status PushFreeBlocks(Session& session, RegionCopies& copies, uint8_t size_class,
                            const std::vector<uint64_t>& blocks) {
  // Nodes: each is the first block of a run and lists the run's others.
  const uint64_t per_node = layout::FreeNodeCapacity(size_class) + 1;
  const uint64_t node_bytes = layout::FreeNodeBytes(size_class);
  std::vector<layout::FreeNode> nodes;
  std::vector<uint64_t> node_offsets;
  for (size_t i = 0; i < blocks.size(); i += per_node) {
    node_offsets.push_back(blocks[i]);
    layout::FreeNode& n = nodes.emplace_back();
    n.blocks.assign(blocks.begin() + i + 1,
                    blocks.begin() + std::min<size_t>(blocks.size(), i + per_node));
  }
  for (size_t i = 0; i + 1 < nodes.size(); ++i) nodes[i].next = node_offsets[i + 1];
  // Scratch: the head word, then node buffers written a batch at a time.
  const size_t batch = std::max<size_t>(1, std::min<size_t>(64, (1 << 20) / node_bytes));
  uint8_t* scratch = session.scratch().Allocate(8 + batch * node_bytes);
  if (scratch == nullptr) return absl::ResourceExhaustedError("scratch memory");
  auto* word = reinterpret_cast<uint64_t*>(scratch);
  uint8_t* bufs = scratch + 8;
  const uint32_t lkey = session.lkey();
  const uint32_t rkey = session.rkey(0);
  absl::Status status;
  // Every node but the last can be written now: nobody sees them yet.
  for (size_t i = 0; i + 1 < nodes.size() && status.ok(); i += batch) {
    std::vector<fabric::WorkRequest> wrs;
    for (size_t k = 0; k < batch && i + k + 1 < nodes.size(); ++k) {
      layout::EncodeFreeNode(nodes[i + k], size_class, bufs + k * node_bytes);
      wrs.push_back(fabric::WorkRequest::Write(0, bufs + k * node_bytes,
                                               static_cast<uint32_t>(node_bytes), lkey,
                                               session.Remote(0, node_offsets[i + k]), rkey));
    }
    status = copies.RunSync(std::move(wrs));
  }
  // Then link the last node to the current head and swing the head to the
  // first node; a lost race re-links and tries again.
  const uint64_t head_at = session.Remote(0, layout::FreePoolHeadOffset(size_class));
  for (int attempt = 0; status.ok(); ++attempt) {
    if (attempt == 100) {
      status = absl::UnavailableError("too much contention on the free pool");
      break;
    }
    status = copies.RunSync({fabric::WorkRequest::Read(0, word, 8, lkey, head_at, rkey)});
    if (!status.ok()) break;
    const uint64_t head = *word;
    const layout::FreePoolHead h = layout::FreePoolHead::Decode(head);
    nodes.back().next = h.node;
    layout::EncodeFreeNode(nodes.back(), size_class, bufs);
    status = copies.RunSync(
        {fabric::WorkRequest::Write(0, bufs, static_cast<uint32_t>(node_bytes), lkey,
                                    session.Remote(0, node_offsets.back()), rkey),
         fabric::WorkRequest::Cas(
             0, word, lkey, head_at, rkey, head,
             layout::FreePoolHead{static_cast<uint16_t>(h.tag + 1), node_offsets.front()}
                 .Encode())});
    if (status.ok() && *word == head) break;
  }
  session.scratch().Free(scratch);
  return status;
}

}  // namespace

absl::Status ReturnFreeBlocks(Session& session, RegionCopies& copies, bool real_clock) {
  HeapAllocator& heap = session.heap();
  std::array<std::vector<uint64_t>, 256> blocks;
  heap.TakeFree(session.Now(), &blocks);
  if (const absl::Time at = heap.AllReusableAt(); real_clock && at > session.Now()) {
    absl::SleepFor(std::min(at - session.Now(), session.options().grace_period));
    heap.TakeFree(session.Now(), &blocks);
  }
  for (int c = 1; c < 256; ++c) {
    if (!blocks[c].empty()) {
      RKV_RETURN_IF_ERROR(PushFreeBlocks(session, copies, static_cast<uint8_t>(c), blocks[c]));
    }
  }
  return absl::OkStatus();
}

}  // namespace rkv::client_internal
