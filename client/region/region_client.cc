// RegionClient's implementation: the Session the protocol's operations see
// (one region's copies, layout and heap allocator on the client's shared
// resources), and the event loop that runs their rounds with shared
// doorbells over its parts:
// - OpScheduler (op_scheduler.h): which operations run, in what order, and
//   their one completion each;
// - RoundBatcher (round_batcher.h): their rounds under one doorbell per copy;
// - RegionCopies (region_copies.h): the queue pairs to the region's copies;
// - ReturnFreeBlocks (free_block_return.h): freed blocks back to the
//   region's free pool when the session closes; and while it lives, the
//   blocks its allocator does not reuse (FreePoolPush, in a slot of its
//   own past the scheduler's);
// - SessionLease (session_lease.h): the session's lease on every copy,
//   renewed in a slot of its own too; a client the server fenced
//   connects anew as a new session, with a heap allocator of its own;
// - CensusReport (census_report.h): what the session holds, for the
//   server's heap census, in a third slot.
#include "client/region/region_client.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/protocol/free_pool_push.h"
#include "client/region/census_report.h"
#include "client/region/free_block_return.h"
#include "client/region/op_scheduler.h"
#include "client/region/region_copies.h"
#include "client/region/round_batcher.h"
#include "client/region/session_lease.h"
#include "client/session/session.h"
#include "common/logging.h"
#include "common/status.h"
#include "rkv/client.h"

namespace rkv {
namespace {

using client_internal::ClientResources;
using client_internal::PendingOp;

std::atomic<uint64_t> next_region_id{1};

// How much longer than a grace period a block the allocator does not reuse
// may wait for enough others of its class to fill a pool node.
constexpr absl::Duration kStaleLinger = absl::Seconds(1);

client_internal::OpenOptions WithDefaults(client_internal::OpenOptions options) {
  options.clock = OrMonotonic(std::move(options.clock));
  options.max_outstanding = std::max<uint32_t>(1, options.max_outstanding);
  return options;
}

class ClientImpl final : public client_internal::RegionClient, public client_internal::Session {
 public:
  ClientImpl(const std::vector<fabric::RemoteRegion>& regions,
             const client_internal::OpenOptions& options,
             const client_internal::BrokenProtocol& broken,
             std::shared_ptr<ClientResources> resources)
      : resources_(std::move(resources)),
        region_id_(next_region_id.fetch_add(1)),
        real_clock_(!options.clock),
        options_(WithDefaults(options)),
        broken_(broken),
        copies_(regions, *resources_),
        scheduler_(*this, options_.max_outstanding),
        batcher_(copies_.size()) {}

  ~ClientImpl() override {
    closing_ = true;  // No new push: ReturnFreeBlocks hands back everything.
    // Tails first: a replicated write's commit still in flight holds the
    // replaced block, and a commit that never lands leaves its intent for
    // the next operation on the key to finish. Bounded: a dead server fails
    // them.
    for (const absl::Time deadline = Now() + absl::Seconds(5);
         (scheduler_.tails() > 0 || pool_push_ || lease_waiting_ > 0 || census_waiting_ > 0) &&
         copies_.connected() && Now() < deadline;) {
      Poll(absl::Milliseconds(100));
    }
    // The blocking rounds below take the queue pairs' next completions as
    // theirs: nothing else may be in flight.
    const bool quiet = lease_waiting_ == 0 && census_waiting_ == 0;
    if (copies_.connected() && heap_ != nullptr && scheduler_.active() == 0 && !pool_push_ &&
        quiet) {
      lease_.Depart(*this, copies_);
      if (absl::Status s = ReturnFreeBlocks(*this, copies_, real_clock_); !s.ok()) {
        RKV_LOG(WARNING) << "freed blocks not handed back to the server (they stay unused): " << s;
      }
    }
    if (quiet) lease_.Release(*this, copies_);
    // Every operation completes exactly once, even when the client is
    // destroyed under it. The queue pair goes first; the memory its
    // requests land in is the resources', which outlive it.
    const absl::Status closed = absl::CancelledError("the client was closed");
    FailActive(closed);
    scheduler_.FailQueued(closed);
  }

  absl::Status Init();

  // Session.
  const layout::Layout& layout() const override { return layout_; }
  const ClientOptions& options() const override { return options_; }
  const client_internal::BrokenProtocol& broken() const override { return broken_; }
  absl::Time Now() const override { return options_.clock(); }
  int replicas() const override { return copies_.size(); }
  uint64_t Remote(int r, uint64_t off) const override { return copies_.Remote(r, off); }
  uint32_t rkey(int r) const override { return copies_.rkey(r); }
  uint64_t region_id() const override { return region_id_; }
  uint32_t lkey() const override { return resources_->lkey(); }
  client_internal::ScratchArena& scratch() override { return resources_->scratch(); }
  client_internal::HeapAllocator& heap() override { return *heap_; }
  client_internal::SlotCache& cache() override { return resources_->cache(); }
  Rng& rng() override { return rng_; }

  // RegionSession.
  void Submit(OpType type, absl::string_view key, absl::string_view value, GetCallback on_get,
              DoneCallback on_done) override {
    scheduler_.Submit(type, key, value, std::move(on_get), std::move(on_done));
  }

  // Client.
  void GetAsync(absl::string_view key, GetCallback done) override {
    scheduler_.Submit(OpType::kGet, key, "", std::move(done), nullptr);
  }
  void PutAsync(absl::string_view key, absl::string_view value, DoneCallback done) override {
    scheduler_.Submit(OpType::kPut, key, value, nullptr, std::move(done));
  }
  void InsertAsync(absl::string_view key, absl::string_view value, DoneCallback done) override {
    scheduler_.Submit(OpType::kInsert, key, value, nullptr, std::move(done));
  }
  void DeleteAsync(absl::string_view key, DoneCallback done) override {
    scheduler_.Submit(OpType::kDelete, key, "", nullptr, std::move(done));
  }

  size_t Poll(absl::Duration timeout) override;
  size_t in_flight() const override { return scheduler_.in_flight(); }
  OpCosts costs(OpType type) const override { return scheduler_.costs(type); }
  OpStats stats(OpType type) const override { return scheduler_.stats(type); }
  fabric::QueuePairCounters connection_counters() const override { return copies_.counters(); }

 private:
  // Posts every ready round, each copy's share under one doorbell; false
  // when a post failed (and everything active was failed).
  bool PostRounds(size_t* finished);
  // Posts the batches; false when a post failed (and everything active was
  // failed).
  bool PostBatches(size_t* finished);
  // Steps the operations whose rounds `cs` complete; false when one is an
  // error (and everything active was failed).
  bool TakeCompletions(absl::Span<const fabric::Completion> cs, size_t* finished);
  // Fails every active operation and disconnects; returns how many.
  size_t FailActive(const absl::Status& status);
  // Starts handing blocks the allocator does not reuse back to the free
  // pool, a node at a time, unless a push is under way; looks at most
  // every quarter grace period.
  void ReturnStaleBlocks();
  // The push's round completed; false when a post failed (and everything
  // active was failed).
  bool OnPushRound(size_t* finished);
  size_t push_slot() const { return scheduler_.slots(); }
  // Connects anew: as the same session while the server has not fenced
  // it, else as a new one, with a new lease.
  absl::Status Connect();
  // Renews the lease when due; false when a post failed (and everything
  // active was failed).
  bool RenewLease(size_t* finished);
  size_t lease_slot() const { return scheduler_.slots() + 1; }
  // The renewal landed, with the census's header reads: answers a round
  // that asks; false when a post failed (and everything active was
  // failed).
  bool OnRenewed(size_t* finished);
  // A round of the census report completed; likewise.
  bool OnCensusRound(size_t* finished);
  size_t census_slot() const { return scheduler_.slots() + 2; }
  // A fresh heap allocator: a new session's (nothing of a fenced one's is
  // its any more: the server may have handed it on).
  void NewHeap();

  // First: destroyed last, after the queue pairs that write its memory.
  const std::shared_ptr<ClientResources> resources_;
  const uint64_t region_id_;
  const bool real_clock_;
  client_internal::OpenOptions options_;  // Its grace period: the region's.
  const client_internal::BrokenProtocol broken_;
  client_internal::RegionCopies copies_;
  layout::Layout layout_;
  std::unique_ptr<client_internal::HeapAllocator> heap_;
  client_internal::OpScheduler scheduler_;
  client_internal::RoundBatcher batcher_;
  Rng rng_{0};
  Rng id_rng_{0};  // Session ids; apart, so that they leave rng_'s sequence as it was.
  std::optional<client_internal::FreePoolPush> pool_push_;
  std::vector<uint64_t> stale_blocks_;  // The push's; kept for its capacity.
  client_internal::OpRounds push_rounds_{*this};
  uint32_t push_waiting_ = 0;
  std::array<uint64_t, 256> pool_heads_{};  // Each class's head word as last seen.
  absl::Time next_stale_check_;
  bool closing_ = false;
  client_internal::SessionLease lease_;
  client_internal::OpRounds lease_rounds_{*this};
  uint32_t lease_waiting_ = 0;
  client_internal::CensusReport census_;
  client_internal::OpRounds census_rounds_{*this};
  uint32_t census_waiting_ = 0;
};

absl::Status ClientImpl::Init() {
  if (replicas() == 0 || replicas() > client_internal::kMaxReplicas) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a region has 1 to ", client_internal::kMaxReplicas, " replicas, not ", replicas()));
  }
  const uint64_t seed = options_.seed != 0 ? options_.seed : std::random_device()();
  rng_ = Rng(seed);
  // Session ids must differ between clients (a fence names one): 64
  // random bits, or with a seed (the simulation, which replays) drawn
  // from it.
  id_rng_ = options_.seed != 0
                ? Rng(~seed)
                : Rng((uint64_t{std::random_device()()} << 32) | std::random_device()());
  const uint64_t id = client_internal::SessionLease::NewId(id_rng_);
  RKV_RETURN_IF_ERROR(copies_.Connect(options_.max_outstanding, id));
  // The region header says where the index and the heap are.
  RKV_ASSIGN_OR_RETURN(layout_, copies_.ReadLayout());
  // The region's grace period is every client's (a server of an older
  // build says none: the client's own then).
  if (layout_.grace_us != 0) options_.grace_period = absl::Microseconds(layout_.grace_us);
  NewHeap();
  RKV_RETURN_IF_ERROR(lease_.Claim(*this, copies_, id, Now()));
  RKV_RETURN_IF_ERROR(census_.Init(*this, copies_, lease_, *heap_));
  // A push and a renewal allocate nothing: their blocks and requests have
  // their room.
  stale_blocks_.reserve(layout::FreeNodeCapacity(255) + 1);
  push_rounds_.Reserve(2);
  lease_rounds_.Reserve(2 * client_internal::kMaxReplicas);
  census_rounds_.Reserve(2);
  return absl::OkStatus();
}

void ClientImpl::NewHeap() {
  heap_ = std::make_unique<client_internal::HeapAllocator>(layout_, options_.heap_chunk_bytes,
                                                           options_.grace_period);
}

absl::Status ClientImpl::Connect() {
  if (lease_.held()) {
    // The session lives on unless the server fenced it (FailedPrecondition).
    absl::Status same = copies_.Connect(options_.max_outstanding, lease_.id());
    if (same.ok()) {
      same = census_.Init(*this, copies_, lease_, *heap_);
      if (!same.ok()) copies_.Disconnect();
      return same;
    }
    if (!absl::IsFailedPrecondition(same)) return same;
    // Fenced: what the session held is the server's to hand on. Nothing
    // of it is in use (every operation that held a block failed with the
    // connection), and a push's blocks were given up then too.
    NewHeap();
  }
  const uint64_t id = client_internal::SessionLease::NewId(id_rng_);
  RKV_RETURN_IF_ERROR(copies_.Connect(options_.max_outstanding, id));
  absl::Status s = lease_.Claim(*this, copies_, id, Now());
  if (s.ok()) s = census_.Init(*this, copies_, lease_, *heap_);
  if (!s.ok()) {
    copies_.Disconnect();
    return s;
  }
  return absl::OkStatus();
}

bool ClientImpl::RenewLease(size_t* finished) {
  if (lease_waiting_ > 0 || closing_) return true;
  lease_rounds_.Clear();
  if (!lease_.MaybeRenew(Now(), lease_rounds_, census_.busy())) return true;
  census_.AddHeaderReads(lease_rounds_);
  lease_waiting_ = batcher_.Append(lease_slot(), lease_rounds_);
  return PostBatches(finished);
}

bool ClientImpl::OnRenewed(size_t* finished) {
  lease_.OnRenewed();
  if (census_waiting_ > 0 || closing_) return true;
  census_rounds_.Clear();
  const auto held = [this](std::vector<uint64_t>* out) {
    for (size_t i = 0; i < scheduler_.slots(); ++i) {
      if (scheduler_.slot(i).op != nullptr) scheduler_.slot(i).op->HeldBlocks(out);
    }
    if (pool_push_) {
      for (uint64_t b : pool_push_->blocks()) {
        out->push_back(layout::ReportBlock(pool_push_->size_class(), b));
      }
    }
  };
  if (!census_.MaybeStart(held, census_rounds_)) return true;
  census_waiting_ = batcher_.Append(census_slot(), census_rounds_);
  return PostBatches(finished);
}

bool ClientImpl::OnCensusRound(size_t* finished) {
  if (--census_waiting_ > 0) return true;
  census_rounds_.Clear();
  if (census_.OnRound(census_rounds_)) return true;
  census_waiting_ = batcher_.Append(census_slot(), census_rounds_);
  return PostBatches(finished);
}

size_t ClientImpl::FailActive(const absl::Status& status) {
  const size_t failed = scheduler_.FailActive(status);
  // A push whose CAS may have landed: its blocks may be in the pool, so
  // they are never used again here (heap lost until the server settles).
  pool_push_.reset();
  lease_waiting_ = 0;
  lease_.OnLost();
  census_waiting_ = 0;
  census_.OnLost();
  copies_.Disconnect();
  return failed;
}

void ClientImpl::ReturnStaleBlocks() {
  const absl::Time now = Now();
  if (pool_push_ || closing_ || heap_ == nullptr || now < next_stale_check_) return;
  next_stale_check_ = now + options_.grace_period / 4;
  stale_blocks_.clear();
  const uint8_t size_class = heap_->TakeStale(now, kStaleLinger, &stale_blocks_);
  if (size_class == 0) return;
  pool_push_ = client_internal::FreePoolPush::Create(*this, size_class, stale_blocks_,
                                                     pool_heads_[size_class]);
  if (!pool_push_) {  // Scratch memory is short: another time.
    heap_->AddRecycled(size_class, stale_blocks_, now);
    return;
  }
  push_rounds_.Reset();
  pool_push_->Start(push_rounds_);
  push_waiting_ = batcher_.Append(push_slot(), push_rounds_);
}

bool ClientImpl::OnPushRound(size_t* finished) {
  if (--push_waiting_ > 0) return true;
  const absl::StatusOr<bool> done = pool_push_->OnRound(push_rounds_);
  if (done.ok() && !*done) {
    push_waiting_ = batcher_.Append(push_slot(), push_rounds_);
    return PostBatches(finished);
  }
  const uint8_t size_class = pool_push_->size_class();
  if (done.ok()) {
    pool_heads_[size_class] = pool_push_->head();
  } else {  // Every CAS lost: the blocks are still ours.
    heap_->AddRecycled(size_class, pool_push_->blocks(), Now());
  }
  pool_push_.reset();
  return true;
}

bool ClientImpl::PostBatches(size_t* finished) {
  const absl::Status posted = batcher_.Post(copies_);
  if (posted.ok()) return true;
  *finished +=
      FailActive(absl::UnavailableError(absl::StrCat("posting to the server: ", posted.message())));
  return false;
}

bool ClientImpl::PostRounds(size_t* finished) {
  const absl::Time now = Now();
  for (size_t i = 0; i < scheduler_.slots(); ++i) {
    PendingOp& p = scheduler_.slot(i);
    if (p.op == nullptr || p.tail) continue;
    if (p.op->finished()) {  // As it started: it posted nothing.
      scheduler_.Complete(i);
      (*finished)++;
      continue;
    }
    if (p.op->round().empty()) continue;
    p.op->OnPosted(now);
    p.waiting = batcher_.Append(i, p.op->round());
  }
  return PostBatches(finished);
}

bool ClientImpl::TakeCompletions(absl::Span<const fabric::Completion> cs, size_t* finished) {
  for (const fabric::Completion& c : cs) {
    if (c.status != fabric::CompletionStatus::kSuccess) {
      *finished += FailActive(absl::UnavailableError(absl::StrCat(
          "connection to the server failed: ", fabric::CompletionStatusName(c.status))));
      return false;
    }
    const size_t i = client_internal::RoundBatcher::SlotOf(c);
    if (i == lease_slot()) {
      if (--lease_waiting_ == 0 && !OnRenewed(finished)) return false;
      continue;
    }
    if (i == census_slot()) {
      if (!OnCensusRound(finished)) return false;
      continue;
    }
    if (i == push_slot()) {
      if (!OnPushRound(finished)) return false;
      continue;
    }
    PendingOp& p = scheduler_.slot(i);
    if (p.op == nullptr || --p.waiting > 0) continue;
    if (p.tail) {
      scheduler_.TailLanded(i);
      continue;
    }
    p.op->Step();
    if (!p.op->finished()) continue;
    (*finished)++;
    scheduler_.Complete(i);
    if (!p.tail) continue;
    // The tail goes out now, ahead of anything this client posts later:
    // a later write of the key expects the word it commits.
    p.waiting = batcher_.Append(i, p.op->round());
    if (!PostBatches(finished)) return false;
  }
  return true;
}

size_t ClientImpl::Poll(absl::Duration timeout) {
  size_t finished = 0;
  if (!copies_.connected()) {
    // Nothing to do, nothing to renew: no connect (which may block for its
    // timeout) for a session polled while idle.
    if (scheduler_.in_flight() == 0) return 0;
    if (absl::Status s = Connect(); !s.ok()) {
      // Whatever the fabric's reason, for an operation the server is
      // unreachable: never a code such as NotFound that a key could mean.
      return scheduler_.FailQueued(
          absl::UnavailableError(absl::StrCat("connecting to the server: ", s.message())));
    }
  }
  if (!RenewLease(&finished)) return finished;
  // While the lease is in doubt, nothing new starts: a session the server
  // fenced would only fail it. The renewal tells which.
  if (!lease_.InDoubt(Now())) {
    scheduler_.StartWaiting();
    ReturnStaleBlocks();
  }
  if (!PostRounds(&finished) ||
      (scheduler_.active() == 0 && !pool_push_ && lease_waiting_ == 0 && census_waiting_ == 0)) {
    return finished;
  }
  fabric::Completion cs[64];
  size_t got = 0;
  for (int r = 0; r < copies_.size(); ++r) {
    const size_t n = copies_.qp(r).Poll(absl::MakeSpan(cs));
    got += n;
    if (!TakeCompletions({cs, n}, &finished)) return finished;
  }
  if (got == 0 && finished == 0 && timeout > absl::ZeroDuration()) {
    if (copies_.size() == 1) {
      const size_t n = copies_.qp(0).Wait(absl::MakeSpan(cs), timeout);
      TakeCompletions({cs, n}, &finished);
    } else {
      // Every copy's queue pair notifies the one channel.
      resources_->channel()->Wait(timeout);
      for (int r = 0; r < copies_.size(); ++r) {
        const size_t n = copies_.qp(r).Poll(absl::MakeSpan(cs));
        if (!TakeCompletions({cs, n}, &finished)) return finished;
      }
    }
  }
  return finished;
}

}  // namespace

absl::StatusOr<std::unique_ptr<client_internal::RegionClient>> client_internal::OpenRegion(
    const fabric::RemoteRegion& region, const OpenOptions& options) {
  return OpenBroken(region, options, {});
}

absl::StatusOr<std::unique_ptr<client_internal::RegionClient>> client_internal::OpenBroken(
    const fabric::RemoteRegion& region, const OpenOptions& options, const BrokenProtocol& broken) {
  RKV_ASSIGN_OR_RETURN(std::shared_ptr<ClientResources> resources,
                       ClientResources::Create(options));
  return OpenSession(region, options, broken, std::move(resources));
}

absl::StatusOr<std::unique_ptr<client_internal::RegionClient>> client_internal::OpenSession(
    const fabric::RemoteRegion& region, const OpenOptions& options, const BrokenProtocol& broken,
    std::shared_ptr<ClientResources> resources) {
  return OpenReplicatedSession({region}, options, broken, std::move(resources));
}

absl::StatusOr<std::unique_ptr<client_internal::RegionClient>>
client_internal::OpenReplicatedSession(const std::vector<fabric::RemoteRegion>& replicas,
                                       const OpenOptions& options, const BrokenProtocol& broken,
                                       std::shared_ptr<ClientResources> resources) {
  auto client = std::make_unique<ClientImpl>(replicas, options, broken, std::move(resources));
  RKV_RETURN_IF_ERROR(client->Init());
  return std::unique_ptr<client_internal::RegionClient>(std::move(client));
}

}  // namespace rkv
