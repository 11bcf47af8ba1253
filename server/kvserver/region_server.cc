#include "server/kvserver/region_server.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/fabric/remote_op.h"
#include "common/hash.h"
#include "common/logging.h"
#include "common/socket.h"
#include "common/status.h"
#include "server/kvserver/heap_census.h"
#include "server/kvserver/replica_takeover.h"

namespace rkv::server {

absl::Status RegionServer::MapFile(const RegionServerOptions& o) {
  const std::string& path = o.region_file;
  file_backed_ = true;
  Fd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
  if (fd.valid()) {
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) return ErrnoToStatus(errno, absl::StrCat("stat ", path));
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    if (size < layout::kHeaderBytes) {
      return absl::DataLossError(absl::StrCat("refusing region file ", path, ": ", size,
                                              " bytes is too short for a region (truncated?)"));
    }
    void* mem = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
    if (mem == MAP_FAILED) return ErrnoToStatus(errno, absl::StrCat("mmap ", path));
    memory_ = static_cast<uint8_t*>(mem);
    mapped_bytes_ = size;
    absl::StatusOr<layout::Layout> l = layout::ParseHeader(
        absl::string_view(reinterpret_cast<char*>(memory_), layout::kHeaderBytes), size);
    if (!l.ok()) {
      return absl::Status(l.status().code(),
                          absl::StrCat("refusing region file ", path, ": ", l.status().message()));
    }
    if (o.region_bytes != 0 && o.region_bytes != size) {
      return absl::InvalidArgumentError(
          absl::StrCat("region file ", path, " holds a region of ", size, " bytes, not the ",
                       o.region_bytes, " asked for; drop the size flag to use the file as it is"));
    }
    layout_ = *l;
    previous_generation_ = l->generation;
    // A new generation: clients holding the old rkey must refresh.
    layout_.generation = std::max(l->generation + 1, o.generation);
    layout::SetGeneration(memory_, layout_.generation);
    recovered_ = true;
    return absl::OkStatus();
  }
  if (errno != ENOENT) return ErrnoToStatus(errno, absl::StrCat("open ", path));
  if (o.region_bytes == 0) return absl::InvalidArgumentError("a new region needs a size");
  RKV_ASSIGN_OR_RETURN(layout_, layout::ComputeLayout(o.region_bytes, o.index_share, o.generation));
  fd = Fd(::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fd.valid()) return ErrnoToStatus(errno, absl::StrCat("create ", path));
  // Allocate the blocks now: a full disk shows up here, not as SIGBUS later.
  if (int err = ::posix_fallocate(fd.get(), 0, static_cast<off_t>(o.region_bytes)); err != 0) {
    ::unlink(path.c_str());
    return ErrnoToStatus(err, absl::StrCat("allocate ", o.region_bytes, " bytes for ", path));
  }
  void* mem = ::mmap(nullptr, o.region_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (mem == MAP_FAILED) return ErrnoToStatus(errno, absl::StrCat("mmap ", path));
  memory_ = static_cast<uint8_t*>(mem);
  mapped_bytes_ = o.region_bytes;
  layout::InitRegion(memory_, layout_);
  return Flush();
}

absl::StatusOr<std::unique_ptr<RegionServer>> RegionServer::Create(
    fabric::Fabric& fabric, const RegionServerOptions& options) {
  if (options.grace_period < absl::Microseconds(1)) {
    return absl::InvalidArgumentError("the grace period must be at least a microsecond");
  }
  std::unique_ptr<RegionServer> s(new RegionServer(fabric, options.clock));
  s->token_ = options.token;
  if (!options.region_file.empty()) {
    RKV_RETURN_IF_ERROR(s->MapFile(options));
    // No client reaches the memory yet, and none of the last run's holds
    // any of it: the heap is rebuilt from what the index names (the cursor
    // back to the last named block, every gap below it into the free
    // pool), so that heap lost for any reason — chunks and freed blocks of
    // clients that crashed — is back after a restart at the latest.
    if (s->recovered_) RKV_RETURN_IF_ERROR(s->Settle(/*wipe=*/false));
  } else {
    RKV_ASSIGN_OR_RETURN(
        s->layout_,
        layout::ComputeLayout(options.region_bytes, options.index_share, options.generation));
    void* mem = ::mmap(nullptr, options.region_bytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) {
      return ErrnoToStatus(errno, absl::StrCat("mmap of a ", options.region_bytes, "-byte region"));
    }
    s->memory_ = static_cast<uint8_t*>(mem);
    s->mapped_bytes_ = options.region_bytes;
    layout::InitRegion(s->memory_, s->layout_);
  }
  layout::SetGracePeriod(s->memory_,
                         static_cast<uint64_t>(absl::ToInt64Microseconds(options.grace_period)));
  s->layout_.grace_us = static_cast<uint64_t>(absl::ToInt64Microseconds(options.grace_period));
  if (options.client_lease > absl::ZeroDuration()) {
    const uint64_t report_bytes =
        options.census_report_bytes != 0
            ? options.census_report_bytes
            : std::clamp<uint64_t>(s->layout_.heap_bytes / 64, 1 << 20, 64 << 20);
    RKV_ASSIGN_OR_RETURN(s->leases_, SessionLeases::Create(fabric, options.session_slots,
                                                           options.client_lease, report_bytes / 8));
    layout::SetSessionTable(s->memory_, s->leases_->remote_base(), s->leases_->rkey(),
                            s->leases_->slots(),
                            static_cast<uint64_t>(absl::ToInt64Microseconds(options.client_lease)));
  } else {  // A region file may name the table of an earlier run.
    layout::SetSessionTable(s->memory_, 0, 0, 0, 0);
  }
  RKV_ASSIGN_OR_RETURN(s->region_,
                       fabric.RegisterMemory(s->memory_, s->mapped_bytes_, fabric::kAllAccess));
  RKV_ASSIGN_OR_RETURN(
      s->listener_, fabric.Listen({options.listen_address, options.token, options.soft_threads}));
  if (s->leases_ != nullptr) {
    s->reclaim_ = std::make_unique<HeapReclaim>(fabric, s->memory_, s->layout_, *s->leases_,
                                                [r = s.get()] { return r->address(); });
    s->reclaim_->set_enabled(options.reclaim);
  }
  if (s->leases_ != nullptr && options.lease_thread) {
    s->lease_thread_ = std::thread([r = s.get()] { r->RunLeaseChecks(); });
  }
  return s;
}

void RegionServer::RunLeaseChecks() {
  const auto period = absl::ToChronoMicroseconds(leases_->lease() / 8);
  // While a census round is under way, its steps come often: sessions
  // track what they take until it ends.
  const auto often =
      absl::ToChronoMicroseconds(std::min(leases_->lease() / 8, absl::Milliseconds(2)));
  std::unique_lock<std::mutex> lock(lease_mu_);
  while (!lease_cv_.wait_for(lock, reclaim_->busy() ? often : period,
                             [this] { return stop_leases_; })) {
    CheckLeasesLocked(clock_());
  }
}

void RegionServer::SetReclaim(bool enabled, std::vector<fabric::RemoteRegion> backups) {
  for (fabric::RemoteRegion& b : backups) {
    if (b.endpoint.token.empty()) b.endpoint.token = token_;
  }
  std::lock_guard<std::mutex> lock(lease_mu_);
  if (reclaim_ == nullptr) return;
  reclaim_->SetBackups(std::move(backups));
  reclaim_->set_enabled(enabled);
  if (!enabled) reclaim_->Abandon("reclaim disabled");
}

void RegionServer::StopLeaseChecks() {
  {
    std::lock_guard<std::mutex> lock(lease_mu_);
    stop_leases_ = true;
  }
  lease_cv_.notify_all();
  if (lease_thread_.joinable()) lease_thread_.join();
}

std::vector<uint64_t> RegionServer::CheckLeases(absl::Time now) {
  std::lock_guard<std::mutex> lock(lease_mu_);
  return CheckLeasesLocked(now);
}

std::vector<uint64_t> RegionServer::CheckLeasesLocked(absl::Time now) {
  if (leases_ == nullptr || stop_leases_) return {};
  std::vector<uint64_t> fenced = leases_->Check(now, *listener_);
  reclaim_->Step(now, fenced);
  return fenced;
}

RegionServer::~RegionServer() {
  StopLeaseChecks();
  reclaim_.reset();   // Its queue pair to the region goes before the listener.
  listener_.reset();  // No peer touches the memory once these are gone.
  region_.reset();
  if (memory_ != nullptr) {
    (void)Flush();
    ::munmap(memory_, mapped_bytes_);
  }
}

absl::Status RegionServer::Flush() {
  if (memory_ == nullptr || !file_backed_) return absl::OkStatus();
  if (::msync(memory_, mapped_bytes_, MS_SYNC) != 0 && errno != ENOMEM) {
    return ErrnoToStatus(errno, "msync of the region file");
  }
  return absl::OkStatus();
}

RegionStats RegionServer::Stats() const {
  const HeapCensus census = CountHeap(memory_, layout_);
  return {.slots_total = layout_.slots(),
          .slots_used = census.slots_used,
          .heap_bytes = layout_.heap_bytes,
          .heap_used = census.cursor,
          .heap_live = census.live_bytes,
          .heap_pooled = census.pooled_bytes,
          .heap_pool_partial = census.pool_partial,
          .sessions = leases_ != nullptr ? leases_->live() : 0,
          .sessions_fenced = leases_ != nullptr ? leases_->fenced() : 0,
          .heap_reclaimed = reclaim_ != nullptr ? reclaim_->reclaimed_bytes() : 0};
}

absl::Status RegionServer::Fence(uint64_t generation) {
  // No census round runs across a fence: it would push what the settle
  // that follows pools too. A step under way gives up at its next read or
  // push: a server that fences itself because its lease could not be
  // renewed must do so in time.
  if (reclaim_ != nullptr) reclaim_->Interrupt();
  std::lock_guard<std::mutex> lock(lease_mu_);
  if (reclaim_ != nullptr) reclaim_->Reset();
  // The old registration goes first: its rkey is refused from here on,
  // however long the new registration takes (and the memory is never
  // pinned twice).
  region_.reset();
  previous_generation_ = layout_.generation;
  RKV_ASSIGN_OR_RETURN(region_,
                       fabric_->RegisterMemory(memory_, mapped_bytes_, fabric::kAllAccess));
  layout_.generation = generation;
  layout::SetGeneration(memory_, generation);
  return absl::OkStatus();
}

void RegionServer::StopServing() {
  StopLeaseChecks();
  {
    // Its queue pairs go before the listener. (It stays: Stats reads it.)
    std::lock_guard<std::mutex> lock(lease_mu_);
    if (reclaim_ != nullptr) reclaim_->Disconnect();
  }
  std::unique_ptr<fabric::Listener> listener;
  {
    // A scrape from now on sees what it served, which no longer grows.
    std::lock_guard<std::mutex> lock(listener_mu_);
    listener = std::move(listener_);
    if (listener != nullptr) {
      stopped_counters_ = listener->counters();
      stopped_counters_.connections = 0;
    }
  }
  listener.reset();  // Joins its threads: not under the lock a scrape waits on.
  region_.reset();
}

fabric::ListenerCounters RegionServer::FabricCounters() const {
  std::lock_guard<std::mutex> lock(listener_mu_);
  return listener_ != nullptr ? listener_->counters() : stopped_counters_;
}

absl::Status RegionServer::Settle(bool wipe) {
  if (reclaim_ != nullptr) reclaim_->Interrupt();
  std::lock_guard<std::mutex> lock(lease_mu_);
  if (reclaim_ != nullptr) reclaim_->Reset();  // The settle pools every gap.
  if (wipe) {
    // A blank index, cursor and free pool, with word stores: the memory is
    // served again afterwards, read by the NIC's word loads.
    for (uint64_t off = layout::HeaderOffsets::kHeapCursor; off < layout_.heap_offset; off += 8) {
      std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(memory_ + off))
          .store(0, std::memory_order_relaxed);
    }
  }
  uint8_t* const copies[] = {memory_};
  absl::StatusOr<TakeoverStats> settled = TakeOver(copies, layout_);
  if (!settled.ok()) return settled.status();
  RKV_LOG(INFO) << "settled: " << settled->slots_changed << " slots changed, heap cursor at "
                << settled->heap_cursor << ", " << settled->pooled_bytes
                << " bytes below it reclaimed into the free pool";
  return absl::OkStatus();
}

uint64_t RegionServer::PushBytes() const {
  return layout_.region_bytes - layout::HeaderOffsets::kHeapCursor;
}

uint64_t RegionServer::PushChunkBytes() const {
  // Small enough that a push after a live copy sends little more than what
  // changed, few enough that their hashes fit a registration (16 Ki of
  // them at most below 128 GiB).
  return std::clamp<uint64_t>(std::bit_ceil(PushBytes() / 16384), 64 << 10, 8 << 20);
}

std::vector<RegionServer::Chunk> RegionServer::PushChunks() const {
  const uint64_t chunk = PushChunkBytes();
  // The heap goes first, then the index, then the header's cursor and free
  // pool, each range landed before the next is sent: a push cut short
  // leaves no slot naming a block it has not written (a target's own slots
  // name blocks that hold the same bytes here, unless this copy's slot
  // moved on to a write the target never saw, whose replaced block nobody
  // freed).
  const uint64_t ranges[][2] = {
      {layout_.heap_offset, layout_.region_bytes},
      {layout_.index_offset, layout_.heap_offset},
      {layout::HeaderOffsets::kHeapCursor, layout_.index_offset},
  };
  std::vector<Chunk> chunks;
  for (const auto& [from, to] : ranges) {
    for (uint64_t at = from; at < to; at += chunk) {
      chunks.push_back({at, static_cast<uint32_t>(std::min(chunk, to - at)), at == from});
    }
  }
  return chunks;
}

std::vector<uint64_t> RegionServer::ChunkHashes() const {
  // A pusher's WRITEs land in this memory soon after, ordered with these
  // reads only through other processes: read it the way the NIC does, word
  // by word, into a private copy.
  std::vector<uint64_t> hashes;
  std::vector<uint8_t> copy;
  for (const Chunk& c : PushChunks()) {
    copy.resize(c.length);
    fabric::CopyFromShared(copy.data(), memory_ + c.offset, c.length);
    hashes.push_back(
        XXH64(absl::string_view(reinterpret_cast<const char*>(copy.data()), c.length)));
  }
  return hashes;
}

absl::Status RegionServer::CheckTarget(fabric::QueuePair& qp, const fabric::RemoteRegion& t,
                                       uint8_t* buffer, uint32_t lkey) {
  const fabric::WorkRequest read =
      fabric::WorkRequest::Read(0, buffer, layout::kHeaderBytes, lkey, t.base, t.rkey);
  RKV_RETURN_IF_ERROR(qp.Post({&read, 1}));
  fabric::Completion c;
  if (qp.Wait({&c, 1}, absl::Seconds(10)) == 0) {
    return absl::DeadlineExceededError("the target's header did not come in 10 s");
  }
  if (c.status != fabric::CompletionStatus::kSuccess) {
    return absl::UnavailableError(
        absl::StrCat("reading the target's header: ", fabric::CompletionStatusName(c.status)));
  }
  absl::StatusOr<layout::Layout> theirs = layout::ParseHeader(
      absl::string_view(reinterpret_cast<const char*>(buffer), layout::kHeaderBytes), t.length);
  if (!theirs.ok()) return theirs.status();
  if (!layout::SameGeometry(*theirs, layout_)) {
    return absl::FailedPreconditionError(
        "the target's region has another geometry (index share) than this one's");
  }
  return absl::OkStatus();
}

// One Push's connection to its target and its window of WRITEs in flight,
// each sent out of a staging slot of its own.
struct RegionServer::PushState {
  // In this order, so that the queue pair goes before the memory its
  // requests use.
  std::unique_ptr<uint8_t[]> staging;
  std::unique_ptr<fabric::MemoryRegion> mr;
  std::unique_ptr<fabric::QueuePair> qp;
  uint32_t chunk_bytes = 0;
  int window = 0;
  std::vector<int> free_slots;
  std::vector<uint32_t> lengths;  // Of the chunk in each slot.
  size_t next = 0;                // The next chunk to stage.
  uint64_t sent = 0;
  absl::Time start;
  absl::Time heard;  // The last completion, or the last moment nothing was in flight.
  std::vector<fabric::WorkRequest> batch;
  fabric::Completion completions[64];
  Clock clock;  // The server's.

  int in_flight() const { return window - static_cast<int>(free_slots.size()); }
  uint8_t* slot(int i) const { return staging.get() + static_cast<size_t>(i) * chunk_bytes; }

  // Waits a while for completions, freeing their slots.
  absl::Status AwaitCompletions(const PushControl& control) {
    if (control.while_waiting) control.while_waiting();
    const size_t got = qp->Wait(absl::MakeSpan(completions), absl::Milliseconds(100));
    if (got == 0) {
      if (clock() - heard > absl::Seconds(10)) {
        return absl::DeadlineExceededError("no completion from the target in 10 s");
      }
      return absl::OkStatus();
    }
    heard = clock();
    for (size_t i = 0; i < got; ++i) {
      if (completions[i].status != fabric::CompletionStatus::kSuccess) {
        return absl::UnavailableError(absl::StrCat(
            "writing the copy: ", fabric::CompletionStatusName(completions[i].status)));
      }
      const int freed = static_cast<int>(completions[i].wr_id);
      control.copied->fetch_add(lengths[freed], std::memory_order_relaxed);
      free_slots.push_back(freed);
    }
    return absl::OkStatus();
  }

  // Nothing may still be landing once a cancelled push returns: waits for
  // what is posted, unless the target has gone quiet for 10 s.
  void DrainPosted() {
    for (int left = in_flight(); left > 0 && clock() - heard < absl::Seconds(10);) {
      const size_t got = qp->Wait(absl::MakeSpan(completions), absl::Milliseconds(100));
      if (got > 0) heard = clock();
      left -= static_cast<int>(got);
    }
  }
};

absl::Status RegionServer::CheckPushArguments(const fabric::RemoteRegion& t, size_t target_hashes,
                                              size_t chunks) const {
  if (t.length != layout_.region_bytes) {
    return absl::FailedPreconditionError(
        absl::StrCat("target region of ", t.length, " bytes; this one has ", layout_.region_bytes));
  }
  if (target_hashes != 0 && target_hashes != chunks) {
    return absl::InvalidArgumentError(
        absl::StrCat("the target sent ", target_hashes, " chunk hashes; this region has ", chunks));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<RegionServer::PushState>> RegionServer::OpenPush(
    const fabric::RemoteRegion& t) {
  auto push = std::make_unique<PushState>();
  push->clock = clock_;
  // Chunks go out of a staging buffer, copied with word loads: serving,
  // the region changes under the copy (a torn chunk is sent again when the
  // spare joins), and a chunk's hash must be that of the bytes sent.
  push->chunk_bytes = static_cast<uint32_t>(PushChunkBytes());
  push->window = std::clamp<int>(static_cast<int>((16u << 20) / push->chunk_bytes), 2, 64);
  const size_t staging_bytes =
      std::max<size_t>(size_t{push->chunk_bytes} * push->window, layout::kHeaderBytes);
  push->staging.reset(new uint8_t[staging_bytes]);
  RKV_ASSIGN_OR_RETURN(
      push->mr, fabric_->RegisterMemory(push->staging.get(), staging_bytes, fabric::kLocalWrite));
  fabric::Endpoint endpoint = t.endpoint;
  if (endpoint.token.empty()) endpoint.token = token_;
  RKV_ASSIGN_OR_RETURN(push->qp, fabric_->Connect(endpoint));
  RKV_RETURN_IF_ERROR(CheckTarget(*push->qp, t, push->staging.get(), push->mr->lkey()));
  for (int i = push->window - 1; i >= 0; --i) push->free_slots.push_back(i);
  push->lengths.resize(push->window);
  push->start = push->heard = clock_();
  return push;
}

absl::Status RegionServer::PostChunks(PushState& push, absl::Span<const Chunk> chunks,
                                      const fabric::RemoteRegion& t,
                                      absl::Span<const uint64_t> target_hashes,
                                      const PushControl& control) {
  push.batch.clear();
  while (!push.free_slots.empty() && push.next < chunks.size() && !control.cancel->load()) {
    const Chunk& c = chunks[push.next];
    if (c.starts_range && push.in_flight() > 0) break;  // The last range lands first.
    if (control.bytes_per_second > 0 &&
        clock_() < push.start + absl::Seconds(double(push.sent) / control.bytes_per_second)) {
      break;  // Over the ceiling: wait for completions, or a while.
    }
    const int slot = push.free_slots.back();
    uint8_t* const stage = push.slot(slot);
    fabric::CopyFromShared(stage, memory_ + c.offset, c.length);
    push.next++;
    if (!target_hashes.empty() &&
        XXH64(absl::string_view(reinterpret_cast<const char*>(stage), c.length)) ==
            target_hashes[push.next - 1]) {
      control.copied->fetch_add(c.length, std::memory_order_relaxed);
      continue;  // The target holds these bytes already.
    }
    push.free_slots.pop_back();
    push.lengths[slot] = c.length;
    push.sent += c.length;
    push.batch.push_back(fabric::WorkRequest::Write(slot, stage, c.length, push.mr->lkey(),
                                                    t.base + c.offset, t.rkey));
  }
  if (push.batch.empty()) return absl::OkStatus();
  return push.qp->Post(push.batch);
}

absl::StatusOr<uint64_t> RegionServer::Push(const fabric::RemoteRegion& t,
                                            absl::Span<const uint64_t> target_hashes,
                                            const PushControl& control) {
  const std::vector<Chunk> chunks = PushChunks();
  RKV_RETURN_IF_ERROR(CheckPushArguments(t, target_hashes.size(), chunks.size()));
  RKV_ASSIGN_OR_RETURN(std::unique_ptr<PushState> push, OpenPush(t));
  while (push->next < chunks.size() || push->in_flight() > 0) {
    if (control.cancel->load()) {
      push->DrainPosted();
      return absl::CancelledError("push cancelled");
    }
    RKV_RETURN_IF_ERROR(PostChunks(*push, chunks, t, target_hashes, control));
    if (push->in_flight() == 0) {
      // Nothing in flight: only the rate ceiling holds the next chunk back.
      if (push->next < chunks.size() && !control.cancel->load()) {
        absl::SleepFor(absl::Milliseconds(5));
      }
      push->heard = clock_();
      continue;
    }
    RKV_RETURN_IF_ERROR(push->AwaitCompletions(control));
  }
  return push->sent;
}

fabric::RemoteRegion RegionServer::address() const {
  return {listener_->endpoint(), region_->remote_base(), region_->length(), region_->rkey()};
}

}  // namespace rkv::server
