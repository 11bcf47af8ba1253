#include "server/kvserver/heap_reclaim.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/fabric/remote_op.h"
#include "common/logging.h"
#include "common/status.h"
#include "server/kvserver/heap_census.h"

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
// Staging for pool nodes and for reads of the backups (whole pieces of
// their index and session table), and the result of a CAS at its end.
constexpr uint64_t kStagingBytes = (1 << 20) + 8;
// How often a round waiting for backups to fence reads their tables.
constexpr absl::Duration kBackupCheckEvery = absl::Milliseconds(20);
// Scans of one round (each after sessions present at the last were fenced
// or closed before they reported) before it is given up.
constexpr uint32_t kMaxScans = 16;

bool SameRegion(const fabric::RemoteRegion& a, const fabric::RemoteRegion& b) {
  return a.endpoint.address == b.endpoint.address && a.base == b.base && a.length == b.length &&
         a.rkey == b.rkey;
}

}  // namespace

HeapReclaim::HeapReclaim(fabric::Fabric& fabric, uint8_t* memory, const layout::Layout& layout,
                         SessionLeases& leases, std::function<fabric::RemoteRegion()> address)
    : fabric_(fabric),
      memory_(memory),
      layout_(layout),
      leases_(leases),
      address_(std::move(address)) {}

HeapReclaim::~HeapReclaim() = default;

void HeapReclaim::SetBackups(std::vector<fabric::RemoteRegion> backups) {
  if (backups.size() == backups_.size() &&
      std::equal(
          backups.begin(), backups.end(), backups_.begin(),
          [](const fabric::RemoteRegion& a, const Backup& b) { return SameRegion(a, b.region); })) {
    return;
  }
  Abandon("the region's copies changed");
  backups_.clear();
  for (fabric::RemoteRegion& r : backups) backups_.push_back({.region = std::move(r)});
}

void HeapReclaim::Reset() {
  Abandon("the region was fenced or settled");
  unconfirmed_.clear();
  for (Backup& b : backups_) b.qp.reset();
  interrupted_.store(false, std::memory_order_relaxed);
}

absl::Status HeapReclaim::CheckInterrupted() const {
  if (!interrupted_.load(std::memory_order_relaxed)) return absl::OkStatus();
  return absl::CancelledError("the region is being fenced");
}

void HeapReclaim::Disconnect() {
  Reset();
  qp_.reset();
}

void HeapReclaim::Step(absl::Time now, absl::Span<const uint64_t> fenced) {
  now_ = now;
  if (!fenced.empty()) {
    owed_ = true;
    unconfirmed_.insert(fenced.begin(), fenced.end());
    if (phase_ != layout::kCensusIdle) fenced_.insert(fenced.begin(), fenced.end());
    // A session live at the scan may have linked or pushed what it took
    // since its ack, before it was fenced: only its report would say so.
    // A scan anew, once every copy fenced it, sees all it did.
    if (phase_ == layout::kCensusTracked) stale_ = true;
  }
  if (phase_ == layout::kCensusIdle) {
    if (owed_ && enabled_.load(std::memory_order_relaxed) && now >= retry_at_) Start(now);
    return;
  }
  if (!enabled_.load(std::memory_order_relaxed)) return End("reclaim disabled");
  // Every live session answers a phase within a few of its renewals; one
  // that does not is fenced within a lease. Longer means something is
  // wrong. (A phase counts from the step after it began: reading the
  // backups may take a while.)
  if (phase_since_ == absl::InfiniteFuture()) phase_since_ = now;
  if (now - phase_since_ > 3 * leases_.lease()) return End("sessions did not answer in time");
  const bool tracked = phase_ == layout::kCensusTracked;
  bool gone = false;
  const bool acked = Acked(RoundWord(), tracked, &gone);
  // A session present at the scan that closed since handed back what it
  // held, perhaps after the pool walk. (One that closed before the scan
  // had: its entry empties after its last request landed.)
  if (tracked && gone) stale_ = true;
  if (!acked) return;
  if (leases_.report_cursor() > leases_.report_words()) {
    return End("the reports outran the report area (kvserver --census_report_bytes)");
  }
  // So did one that came during the round and closed since the scan.
  if (tracked && leases_.departures() != departures_) stale_ = true;
  if (tracked && !stale_) return Push();
  // The scan, or a scan anew: sessions keep tracking until the round ends,
  // so what they report after it covers all they took or freed since
  // their holdings.
  if (scans_ == kMaxScans) return End("sessions kept leaving during the round");
  // What a fenced session held is nobody's only once no copy executes
  // its requests: a late WRITE of it to a backup would land in a block
  // handed to someone else. Each backup fences on its own clock, within
  // a few of its checks of this one.
  if (!unconfirmed_.empty() && !backups_.empty()) {
    if (now < backups_checked_ + std::min(kBackupCheckEvery, leases_.lease() / 16)) return;
    backups_checked_ = now;
    absl::StatusOr<bool> fenced_everywhere = BackupsFenced();
    if (!fenced_everywhere.ok()) {
      RKV_LOG(WARNING) << "heap census: reading a backup's sessions: "
                       << fenced_everywhere.status();
      return End("a backup could not be read");
    }
    if (!*fenced_everywhere) return;
  }
  // Who is present at the scan, and how many sessions began to close by
  // then: what changes of them until every session acked is seen above.
  departures_ = leases_.departures();
  NoteParticipants();
  stale_ = false;
  if (!Scan()) return End("the free pool would not hold still");
  if (absl::Status s = MarkBackupSlots(); !s.ok()) {
    RKV_LOG(WARNING) << "heap census: reading a backup's index: " << s;
    return End("a backup could not be read");
  }
  ++scans_;
  phase_ = layout::kCensusTracked;
  phase_since_ = absl::InfiniteFuture();
  leases_.SetRound(RoundWord());
}

void HeapReclaim::Push() {
  if (!MarkReports()) return End("the reports outran the report area");
  absl::StatusOr<uint64_t> pooled = PushGaps();
  if (!pooled.ok()) {
    RKV_LOG(WARNING) << "heap census: pushing onto the free pool: " << pooled.status();
    return End("the pushes failed");
  }
  reclaimed_.fetch_add(*pooled, std::memory_order_relaxed);
  RKV_LOG(INFO) << "heap census round " << round_ << ": " << *pooled
                << " bytes of fenced client sessions' heap back in the free pool"
                << (scans_ > 1 ? absl::StrCat(" (", scans_, " scans)") : "");
  // Sessions fenced during the round may have reported what they held:
  // another round takes that. Every one fenced before the last scan is
  // gone from every copy.
  const bool again = !fenced_.empty();
  End(nullptr);
  owed_ = again;
  unconfirmed_.clear();
}

uint64_t HeapReclaim::RoundWord() const {
  return phase_ == layout::kCensusTracked ? layout::CensusTrackedWord(round_, scans_ - 1)
                                          : layout::CensusRoundWord(round_, phase_);
}

void HeapReclaim::Start(absl::Time now) {
  owed_ = false;
  ++round_;
  scans_ = 0;
  phase_ = layout::kCensusHoldings;
  phase_since_ = now;
  fenced_.clear();
  // The round word first: a session that claims an entry after its slot
  // was looked at below reads it, and tracks from its claim on (the fence
  // orders this store before the loads, as the claim's CAS does its READ).
  leases_.SetRound(RoundWord());
  std::atomic_thread_fence(std::memory_order_seq_cst);
  NoteParticipants();
}

void HeapReclaim::NoteParticipants() {
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
  // Every block a slot names, in any state: a claim not yet decided, a
  // killed claim its owner has yet to clear, an intent.
  layout::ForEachSlot(layout_, [&](uint64_t offset) { MarkNamed(Load(memory_, offset)); });
  // Every block in the pool. A walk reads nodes that clients may pop
  // and reuse meanwhile; one that fails its checks is walked again. What
  // a walk marks wrongly is only kept a round longer; what it misses was
  // popped by a session that tracks it, or pushed by one that reported it.
  for (int c = 1; c < 256; ++c) {
    const auto size_class = static_cast<uint8_t>(c);
    const uint64_t block = layout::ClassBytes(size_class);
    bool whole = false;
    for (int attempt = 0; attempt < kWalkTries && !whole; ++attempt) {
      // Nodes are blocks of the class: more than the heap holds is a cycle.
      uint64_t budget = layout_.heap_bytes / block + 1;
      whole = WalkFreePool(memory_, layout_, size_class, &budget,
                           [&](uint64_t node, const layout::FreeNode& contents) {
                             map_->Mark(node - layout_.heap_offset, block);
                             for (uint64_t b : contents.blocks) {
                               map_->Mark(b - layout_.heap_offset, block);
                             }
                           });
    }
    if (!whole) return false;
  }
  return true;
}

void HeapReclaim::MarkNamed(uint64_t word) {
  if (word == 0) return;
  const layout::Slot s = layout::Slot::Decode(layout::CommittedOf(word));
  const uint64_t bytes = layout::ClassBytes(s.size_class);
  if (bytes == 0 || s.offset < layout_.heap_offset ||
      s.offset + bytes > layout_.heap_offset + layout_.heap_bytes) {
    return;
  }
  map_->Mark(s.offset - layout_.heap_offset, bytes);
  named_bytes_[s.size_class] += bytes;
}

absl::StatusOr<bool> HeapReclaim::BackupsFenced() {
  if (unconfirmed_.empty()) return true;
  // A session gone from a backup's table was fenced there, or closed
  // (after its last request there landed); either way none of its
  // requests executes there again (a fenced id is refused a reconnect). A
  // session takes heap only once it holds an entry on every copy.
  absl::flat_hash_set<uint64_t> present;
  for (Backup& b : backups_) {
    RKV_RETURN_IF_ERROR(ConnectBackup(b));
    const uint64_t first = layout::SessionOwnerOffset(0);
    RKV_RETURN_IF_ERROR(
        ReadBackup(b, b.layout.session_table + first, b.layout.session_rkey,
                   layout::SessionOwnerOffset(b.layout.session_slots) - first,
                   layout::kSessionEntryBytes, [&](const uint8_t* bytes, uint64_t n) {
                     for (uint64_t at = 0; at < n; at += layout::kSessionEntryBytes) {
                       uint64_t owner;
                       std::memcpy(&owner, bytes + at, 8);
                       if (unconfirmed_.contains(owner)) present.insert(owner);
                     }
                   }));
  }
  unconfirmed_ = std::move(present);
  return unconfirmed_.empty();
}

absl::Status HeapReclaim::MarkBackupSlots() {
  // After every backup fenced the sessions fenced here: a word a backup's
  // slot takes from now on comes from a live session, and names a block
  // it reported or tracks, or one a slot here named at the scan.
  const uint64_t index_bytes = layout_.groups * layout::kGroupBytes;
  for (Backup& b : backups_) {
    RKV_RETURN_IF_ERROR(ConnectBackup(b));
    RKV_RETURN_IF_ERROR(
        ReadBackup(b, b.region.base + layout_.index_offset, b.region.rkey, index_bytes,
                   layout::kBucketBytes, [&](const uint8_t* bytes, uint64_t n) {
                     for (uint64_t bucket = 0; bucket < n; bucket += layout::kBucketBytes) {
                       for (uint64_t i = 1; i <= layout::kSlotsPerBucket; ++i) {
                         uint64_t word;
                         std::memcpy(&word, bytes + bucket + 8 * i, 8);
                         MarkNamed(word);
                       }
                     }
                   }));
  }
  return absl::OkStatus();
}

absl::Status HeapReclaim::ConnectBackup(Backup& b) {
  if (b.qp != nullptr) return absl::OkStatus();
  RKV_RETURN_IF_ERROR(AllocateStaging());
  RKV_ASSIGN_OR_RETURN(b.qp, fabric_.Connect(b.region.endpoint));
  absl::StatusOr<layout::Layout> theirs = absl::UnknownError("unread");
  absl::Status read =
      ReadBackup(b, b.region.base, b.region.rkey, layout::kHeaderBytes, layout::kHeaderBytes,
                 [&](const uint8_t* bytes, uint64_t n) {
                   theirs = layout::ParseHeader(
                       absl::string_view(reinterpret_cast<const char*>(bytes), n), b.region.length);
                 });
  if (read.ok()) read = theirs.status();
  if (read.ok() && (!layout::SameGeometry(*theirs, layout_) || theirs->session_slots == 0)) {
    read = absl::FailedPreconditionError(
        "a backup's region has another geometry, or no session table");
  }
  if (read.ok()) b.layout = *theirs;
  if (!read.ok()) b.qp.reset();
  return read;
}

template <typename F>
absl::Status HeapReclaim::ReadBackup(Backup& b, uint64_t address, uint32_t rkey, uint64_t bytes,
                                     uint64_t unit, F f) {
  // A backup that stops answering holds up this thread, and with it the
  // lease checks and a fence of this region: a short wait.
  const absl::Duration timeout = std::max(leases_.lease() / 8, absl::Milliseconds(100));
  const uint64_t piece = (staging_.size() - 8) / unit * unit;
  for (uint64_t at = 0; at < bytes; at += piece) {
    RKV_RETURN_IF_ERROR(CheckInterrupted());
    const auto n = static_cast<uint32_t>(std::min(piece, bytes - at));
    const fabric::WorkRequest read =
        fabric::WorkRequest::Read(0, staging_.data(), n, staging_mr_->lkey(), address + at, rkey);
    absl::Status s = b.qp->Post({&read, 1});
    if (s.ok()) s = Await(*b.qp, 1, timeout, "reading a backup");
    if (!s.ok()) {
      b.qp.reset();
      return s;
    }
    f(staging_.data(), n);
  }
  return absl::OkStatus();
}

absl::Status HeapReclaim::Await(fabric::QueuePair& qp, size_t n, absl::Duration timeout,
                                const char* what) {
  fabric::Completion cs[2];
  for (size_t got = 0; got < n;) {
    const size_t k = qp.Wait(absl::MakeSpan(cs, std::min<size_t>(2, n - got)), timeout);
    if (k == 0) {
      return absl::DeadlineExceededError(
          absl::StrCat(what, ": no completion in ", absl::FormatDuration(timeout)));
    }
    for (size_t i = 0; i < k; ++i) {
      if (cs[i].status != fabric::CompletionStatus::kSuccess) {
        return absl::UnavailableError(
            absl::StrCat(what, ": ", fabric::CompletionStatusName(cs[i].status)));
      }
    }
    got += k;
  }
  return absl::OkStatus();
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
  RKV_RETURN_IF_ERROR(AllocateStaging());
  RKV_ASSIGN_OR_RETURN(qp_, fabric_.Connect(region_.endpoint));
  return absl::OkStatus();
}

absl::Status HeapReclaim::AllocateStaging() {
  if (staging_mr_ != nullptr) return absl::OkStatus();
  static_assert(kStagingBytes >= layout::kHeaderBytes + 8);
  staging_.resize(std::max<uint64_t>(kStagingBytes, layout::FreeNodeBytes(255) + 8));
  RKV_ASSIGN_OR_RETURN(
      staging_mr_, fabric_.RegisterMemory(staging_.data(), staging_.size(), fabric::kLocalWrite));
  return absl::OkStatus();
}

absl::Status HeapReclaim::PushNode(uint8_t size_class, uint64_t node, layout::FreeNode& contents) {
  const uint64_t head_at = layout::FreePoolHeadOffset(size_class);
  const uint32_t node_bytes = static_cast<uint32_t>(layout::FreeNodeBytes(size_class));
  uint64_t* const result = reinterpret_cast<uint64_t*>(staging_.data() + staging_.size() - 8);
  RKV_RETURN_IF_ERROR(CheckInterrupted());
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
    if (absl::Status s = Await(*qp_, 2, absl::Seconds(5), "pushing a node"); !s.ok()) {
      qp_.reset();  // Whatever it still does, it is not waited for.
      return s;
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
  leases_.SetRound(RoundWord());
  participants_.clear();
  fenced_.clear();
  map_.reset();
}

}  // namespace rkv::server
