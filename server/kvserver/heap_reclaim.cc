#include "server/kvserver/heap_reclaim.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/fabric/remote_op.h"
#include "common/logging.h"
#include "common/status.h"

namespace rkv::server {
namespace {

uint64_t Load(const uint8_t* memory, uint64_t offset) {
  return std::atomic_ref<const uint64_t>(*reinterpret_cast<const uint64_t*>(memory + offset))
      .load(std::memory_order_acquire);
}

// Walks of a class's pool before a round is given up: a walk fails when a
// node it reads was popped and reused meanwhile.
constexpr int kWalkTries = 8;
// CASes of one node's push lost to clients' pops and pushes before the
// round is given up.
constexpr int kPushTries = 64;

}  // namespace

HeapReclaim::HeapReclaim(fabric::Fabric& fabric, uint8_t* memory, const layout::Layout& layout,
                         SessionLeases& leases, std::function<fabric::RemoteRegion()> address)
    : fabric_(fabric),
      memory_(memory),
      layout_(layout),
      leases_(leases),
      address_(std::move(address)) {}

HeapReclaim::~HeapReclaim() = default;

void HeapReclaim::Step(absl::Time now, absl::Span<const uint64_t> fenced) {
  now_ = now;
  if (!fenced.empty()) {
    owed_ = true;
    if (phase_ != layout::kCensusIdle) fenced_.insert(fenced.begin(), fenced.end());
    // A session live at the scan may have linked or pushed what it took
    // since its ack, before it was fenced: only its report would say so.
    if (phase_ == layout::kCensusTracked) return End("a session was fenced before it reported");
  }
  if (phase_ == layout::kCensusIdle) {
    if (owed_ && enabled_.load(std::memory_order_relaxed) && now >= retry_at_) Start(now);
    return;
  }
  if (!enabled_.load(std::memory_order_relaxed)) return End("reclaim disabled");
  // Every live session answers within a few of its renewals; one that
  // does not is fenced within a lease. Longer means something is wrong.
  if (now - started_ > 3 * leases_.lease()) return End("sessions did not answer in time");
  bool gone = false;
  const uint64_t word = layout::CensusRoundWord(round_, phase_);
  const bool acked = Acked(word, phase_ == layout::kCensusTracked, &gone);
  if (gone) return End("a session closed during the round");
  if (!acked) return;
  if (leases_.report_cursor() > leases_.report_words()) {
    return End("the reports outran the report area (kvserver --census_report_bytes)");
  }
  if (phase_ == layout::kCensusHoldings) {
    if (!Scan()) return End("the free pool would not hold still");
    phase_ = layout::kCensusTracked;
    leases_.SetRound(layout::CensusRoundWord(round_, phase_));
    return;
  }
  // A session that closed handed back what it held, perhaps after the
  // pool walk; its report may not say all it had.
  if (leases_.departures() != departures_) return End("a session closed during the round");
  if (!MarkReports()) return End("the reports outran the report area");
  absl::StatusOr<uint64_t> pooled = PushGaps();
  if (!pooled.ok()) {
    RKV_LOG(WARNING) << "heap census: pushing onto the free pool: " << pooled.status();
    return End("the pushes failed");
  }
  reclaimed_.fetch_add(*pooled, std::memory_order_relaxed);
  RKV_LOG(INFO) << "heap census round " << round_ << ": " << *pooled
                << " bytes of fenced client sessions' heap back in the free pool";
  // Sessions fenced during the round may have reported what they held:
  // another round takes that.
  const bool again = !fenced_.empty();
  End(nullptr);
  owed_ = again;
}

void HeapReclaim::Start(absl::Time now) {
  owed_ = false;
  ++round_;
  phase_ = layout::kCensusHoldings;
  started_ = now;
  fenced_.clear();
  departures_ = leases_.departures();
  // The round word first: a session that claims an entry after its slot
  // was looked at below reads it, and tracks from its claim on (the fence
  // orders this store before the loads, as the claim's CAS does its READ).
  leases_.SetRound(layout::CensusRoundWord(round_, phase_));
  std::atomic_thread_fence(std::memory_order_seq_cst);
  participants_.clear();
  for (uint32_t i = 0; i < leases_.slots(); ++i) {
    if (const uint64_t owner = leases_.owner(i); owner != 0) participants_.push_back({i, owner});
  }
}

bool HeapReclaim::Acked(uint64_t word, bool everyone, bool* gone) const {
  bool acked = true;
  for (const Participant& p : participants_) {
    if (leases_.owner(p.slot) != p.owner) {
      if (!fenced_.contains(p.owner)) *gone = true;
    } else if (leases_.ack(p.slot) < word) {
      acked = false;
    }
  }
  if (!everyone || !acked) return acked;
  // Sessions that came during the round track from their claim on.
  for (uint32_t i = 0; i < leases_.slots(); ++i) {
    if (leases_.owner(i) != 0 && leases_.ack(i) < word) return false;
  }
  return true;
}

bool HeapReclaim::Scan() {
  map_.emplace(layout_.heap_bytes);
  named_bytes_ = {};
  // Read after every session acked its holdings: what is handed out
  // beyond is nobody's concern here.
  cursor_ = std::min(Load(memory_, layout::HeaderOffsets::kHeapCursor), layout_.heap_bytes);
  const uint64_t heap_end = layout_.heap_offset + layout_.heap_bytes;
  // Every block a slot names, in any state: a claim not yet decided, a
  // killed claim its owner has yet to clear, an intent.
  layout::ForEachSlot(layout_, [&](uint64_t offset) {
    const uint64_t word = Load(memory_, offset);
    if (word == 0) return;
    const layout::Slot s = layout::Slot::Decode(layout::CommittedOf(word));
    const uint64_t bytes = layout::ClassBytes(s.size_class);
    if (bytes == 0 || s.offset < layout_.heap_offset || s.offset + bytes > heap_end) return;
    map_->Mark(s.offset - layout_.heap_offset, bytes);
    named_bytes_[s.size_class] += bytes;
  });
  // Every block in the pool. A walk reads nodes that clients may pop
  // and reuse meanwhile; one that fails its checks is walked again. What
  // a walk marks wrongly is only kept a round longer; what it misses was
  // popped by a session that tracks it, or pushed by one that reported it.
  std::vector<uint8_t> buffer;
  for (int c = 1; c < 256; ++c) {
    const auto size_class = static_cast<uint8_t>(c);
    const uint64_t block = layout::ClassBytes(size_class);
    const uint64_t node_bytes = layout::FreeNodeBytes(size_class);
    buffer.resize(node_bytes);
    bool whole = false;
    for (int attempt = 0; attempt < kWalkTries && !whole; ++attempt) {
      uint64_t node =
          layout::FreePoolHead::Decode(Load(memory_, layout::FreePoolHeadOffset(size_class))).node;
      // Nodes are blocks of the class: more than the heap holds is a cycle.
      for (uint64_t budget = layout_.heap_bytes / block + 1;; --budget) {
        if (node == 0) {
          whole = true;
          break;
        }
        if (budget == 0 || node < layout_.heap_offset || node + node_bytes > heap_end) break;
        fabric::CopyFromShared(buffer.data(), memory_ + node, node_bytes);
        absl::StatusOr<layout::FreeNode> decoded = layout::DecodeFreeNode(
            absl::string_view(reinterpret_cast<const char*>(buffer.data()), node_bytes), size_class,
            layout_);
        if (!decoded.ok()) break;
        map_->Mark(node - layout_.heap_offset, block);
        for (uint64_t b : decoded->blocks) map_->Mark(b - layout_.heap_offset, block);
        node = decoded->next;
      }
    }
    if (!whole) return false;
  }
  return true;
}

bool HeapReclaim::MarkReports() {
  const uint64_t n = leases_.report_cursor();
  if (n > leases_.report_words()) return false;
  const uint64_t heap_end = layout_.heap_offset + layout_.heap_bytes;
  for (uint64_t i = 0; i < n; ++i) {
    const layout::ReportExtent e = layout::DecodeReportWord(leases_.report(i));
    if (e.bytes == 0 || e.offset < layout_.heap_offset || e.offset >= heap_end) continue;
    map_->Mark(e.offset - layout_.heap_offset, e.bytes);
  }
  return true;
}

absl::StatusOr<uint64_t> HeapReclaim::PushGaps() {
  RKV_RETURN_IF_ERROR(Connect());
  PoolBuilder pool(named_bytes_, [this](uint8_t c, uint64_t node, layout::FreeNode& contents) {
    return PushNode(c, node, contents);
  });
  absl::Status added = absl::OkStatus();
  map_->ForEachGap(cursor_, [&](uint64_t begin, uint64_t end) {
    if (added.ok()) added = pool.AddGap(layout_.heap_offset + begin, layout_.heap_offset + end);
  });
  RKV_RETURN_IF_ERROR(added);
  return pool.Finish();
}

absl::Status HeapReclaim::Connect() {
  const fabric::RemoteRegion now = address_();
  if (qp_ != nullptr && now.rkey == region_.rkey && now.base == region_.base) {
    return absl::OkStatus();
  }
  qp_.reset();
  region_ = now;
  if (staging_mr_ == nullptr) {
    staging_.resize(layout::FreeNodeBytes(255) + 8);
    RKV_ASSIGN_OR_RETURN(
        staging_mr_, fabric_.RegisterMemory(staging_.data(), staging_.size(), fabric::kLocalWrite));
  }
  RKV_ASSIGN_OR_RETURN(qp_, fabric_.Connect(region_.endpoint));
  return absl::OkStatus();
}

absl::Status HeapReclaim::PushNode(uint8_t size_class, uint64_t node, layout::FreeNode& contents) {
  const uint64_t head_at = layout::FreePoolHeadOffset(size_class);
  const uint32_t node_bytes = static_cast<uint32_t>(layout::FreeNodeBytes(size_class));
  uint64_t* const result = reinterpret_cast<uint64_t*>(staging_.data() + staging_.size() - 8);
  uint64_t head = Load(memory_, head_at);  // A guess; the CAS tells.
  for (int attempt = 0; attempt < kPushTries; ++attempt) {
    const layout::FreePoolHead h = layout::FreePoolHead::Decode(head);
    contents.next = h.node;
    layout::EncodeFreeNode(contents, size_class, staging_.data());
    const uint64_t desired =
        layout::FreePoolHead{.tag = static_cast<uint16_t>(h.tag + 1), .node = node}.Encode();
    // The node lands before the CAS that makes it reachable: one queue pair.
    RKV_RETURN_IF_ERROR(qp_->Post({
        fabric::WorkRequest::Write(0, staging_.data(), node_bytes, staging_mr_->lkey(),
                                   region_.base + node, region_.rkey),
        fabric::WorkRequest::Cas(1, result, staging_mr_->lkey(), region_.base + head_at,
                                 region_.rkey, head, desired),
    }));
    fabric::Completion cs[2];
    for (size_t got = 0; got < 2;) {
      const size_t n = qp_->Wait(absl::MakeSpan(cs + got, 2 - got), absl::Seconds(5));
      if (n == 0) {
        qp_.reset();  // Whatever it still does, it is not waited for.
        return absl::DeadlineExceededError("no completion from the region in 5 s");
      }
      for (size_t i = got; i < got + n; ++i) {
        if (cs[i].status != fabric::CompletionStatus::kSuccess) {
          qp_.reset();
          return absl::UnavailableError(
              absl::StrCat("pushing a node: ", fabric::CompletionStatusName(cs[i].status)));
        }
      }
      got += n;
    }
    if (*result == head) return absl::OkStatus();
    head = *result;
  }
  return absl::AbortedError("the pool's head kept changing");
}

void HeapReclaim::End(const char* why) {
  if (why != nullptr) {
    RKV_LOG(WARNING) << "heap census round " << round_ << " given up: " << why
                     << "; another follows";
    owed_ = true;
    // A session's report words land before its next renewal, or never
    // once it is fenced (within a lease and an eighth): by then none of
    // this round's can overwrite the next round's.
    retry_at_ = now_ + 2 * leases_.lease();
  }
  phase_ = layout::kCensusIdle;
  leases_.SetRound(layout::CensusRoundWord(round_, phase_));
  participants_.clear();
  fenced_.clear();
  map_.reset();
}

}  // namespace rkv::server
