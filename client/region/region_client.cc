// RegionClient's implementation: a session with one server's region (its
// queue pair, layout and heap allocator on the client's shared resources)
// and the loop that runs operations' rounds with shared doorbells.
#include "client/region/region_client.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "client/protocol/kv_operation.h"
#include "client/protocol/outcome.h"
#include "client/session/ring_deque.h"
#include "client/session/session.h"
#include "common/logging.h"
#include "common/status.h"
#include "rkv/client.h"

namespace rkv {
namespace {

using client_internal::ClientResources;
using client_internal::KvOperation;
using client_internal::RingDeque;

std::atomic<uint64_t> next_region_id{1};

class ClientImpl final : public client_internal::RegionClient, public client_internal::Session {
 public:
  ClientImpl(const std::vector<fabric::RemoteRegion>& regions,
             const client_internal::OpenOptions& options,
             const client_internal::BrokenProtocol& broken,
             std::shared_ptr<ClientResources> resources)
      : resources_(std::move(resources)),
        region_id_(next_region_id.fetch_add(1)),
        options_(options),
        broken_(broken) {
    real_clock_ = !options_.clock;
    if (real_clock_) options_.clock = [] { return absl::Now(); };
    options_.max_outstanding = std::max<uint32_t>(1, options_.max_outstanding);
    for (const fabric::RemoteRegion& r : regions) replicas_.push_back({r, nullptr, {}});
  }

  ~ClientImpl() override {
    // Tails first: a replicated write's commit still in flight holds the
    // replaced block, and a commit that never lands leaves its intent for
    // the next operation on the key to finish. Bounded: a dead server fails
    // them.
    for (const absl::Time deadline = absl::Now() + absl::Seconds(5);
         tails_ > 0 && replicas_[0].qp != nullptr && absl::Now() < deadline;) {
      Poll(absl::Milliseconds(100));
    }
    if (absl::Status s = ReleaseFreeBlocks(); !s.ok()) {
      RKV_LOG(WARNING) << "freed blocks not handed back to the server (they stay unused): " << s;
    }
    // Every operation completes exactly once, even when the client is
    // destroyed under it. The queue pair goes first; the memory its
    // requests land in is the resources', which outlive it.
    const absl::Status closed = absl::CancelledError("the client was closed");
    FailActive(closed);
    FailQueued(closed);
  }

  absl::Status Init();

  // Session.
  const layout::Layout& layout() const override { return layout_; }
  const ClientOptions& options() const override { return options_; }
  const client_internal::BrokenProtocol& broken() const override { return broken_; }
  absl::Time Now() const override { return options_.clock(); }
  int replicas() const override { return static_cast<int>(replicas_.size()); }
  uint64_t Remote(int r, uint64_t off) const override { return replicas_[r].region.base + off; }
  uint32_t rkey(int r) const override { return replicas_[r].region.rkey; }
  uint64_t region_id() const override { return region_id_; }
  uint32_t lkey() const override { return resources_->lkey(); }
  client_internal::ScratchArena& scratch() override { return resources_->scratch(); }
  client_internal::HeapAllocator& heap() override { return *heap_; }
  client_internal::SlotCache& cache() override { return resources_->cache(); }
  Rng& rng() override { return rng_; }

  // Client.
  void GetAsync(absl::string_view key, GetCallback done) override {
    Submit(OpType::kGet, key, "", std::move(done), nullptr);
  }
  void PutAsync(absl::string_view key, absl::string_view value, DoneCallback done) override {
    Submit(OpType::kPut, key, value, nullptr, std::move(done));
  }
  void InsertAsync(absl::string_view key, absl::string_view value, DoneCallback done) override {
    Submit(OpType::kInsert, key, value, nullptr, std::move(done));
  }
  void DeleteAsync(absl::string_view key, DoneCallback done) override {
    Submit(OpType::kDelete, key, "", nullptr, std::move(done));
  }

  size_t Poll(absl::Duration timeout) override;
  size_t in_flight() const override { return queued_.size() + deferred_.size() + active_count_; }
  OpCosts costs(OpType type) const override { return costs_[static_cast<int>(type)]; }
  fabric::QueuePairCounters connection_counters() const override {
    fabric::QueuePairCounters c = past_counters_;
    for (const Replica& r : replicas_) {
      if (r.qp != nullptr) c += r.qp->counters();
    }
    return c;
  }

 private:
  struct Pending {
    std::unique_ptr<KvOperation> op;
    GetCallback on_get;
    DoneCallback on_done;
    // Completions the posted round still waits for: one per replica it
    // went to (each replica's share signals its last request).
    uint32_t waiting = 0;
    // The operation is done and its callback has run; what is in flight is
    // its tail (KvOperation::has_tail), and the slot is free once it lands.
    bool tail = false;
  };
  struct Replica {
    fabric::RemoteRegion region;
    std::unique_ptr<fabric::QueuePair> qp;
    std::vector<fabric::WorkRequest> batch;  // What one Poll posts; kept for its capacity.
  };

  void Submit(OpType type, absl::string_view key, absl::string_view value, GetCallback on_get,
              DoneCallback on_done) {
    std::unique_ptr<KvOperation> op;
    if (idle_ops_.empty()) {
      op = std::make_unique<KvOperation>(*this);
    } else {
      op = std::move(idle_ops_.back());
      idle_ops_.pop_back();
    }
    op->Reset(type, key, value);
    queued_.push_back({std::move(op), std::move(on_get), std::move(on_done)});
  }
  // Takes back a finished operation for reuse.
  void Recycle(std::unique_ptr<KvOperation> op);
  // Starts operations that wait for a slot, as many as there is room for.
  void StartWaiting();
  // Steps `p` to its first round in active slot `slot`; false (and `p`
  // kept) when it must wait for scratch memory.
  bool Start(Pending& p, size_t slot);
  // A write of `p`'s key is active: `p`, a write too, must wait for it.
  bool MustWait(const Pending& p) const {
    return p.op->type() != OpType::kGet && writing_.contains(p.op->key());
  }

  // Accounts for `p`'s operation and runs its callback; the operation is
  // recycled unless it has a tail to post.
  void Complete(Pending& p);
  // Adds the round of active operation `i` to the replicas' batches.
  void AppendRound(size_t i, Pending& p);
  // Posts the replicas' batches; false when a post failed (and everything
  // active was failed).
  bool PostBatches(size_t* finished);
  // Runs `p`'s callback with `status`, marked as of unknown outcome if the
  // operation had posted a CAS.
  static void Finish(Pending& p, absl::Status status);
  // Hands the blocks this client freed (and the rest of its heap chunk)
  // back to the region's free pool, so that they outlive the client.
  absl::Status ReleaseFreeBlocks();
  absl::Status PushFreeBlocks(uint8_t size_class, const std::vector<uint64_t>& blocks);
  // Posts `wrs` (the last one signaled) to a replica's queue pair and
  // waits for their completion.
  absl::Status RunSync(std::vector<fabric::WorkRequest> wrs, int replica = 0);
  // Reads a replica's region header.
  absl::StatusOr<layout::Layout> ReadLayout(int replica);
  // Posts every ready round, each replica's share under one doorbell;
  // false when a post failed (and everything active was failed).
  bool PostRounds(size_t* finished);
  // Steps the operations whose rounds `cs` complete; false when one is an
  // error (and everything active was failed).
  bool TakeCompletions(absl::Span<const fabric::Completion> cs, size_t* finished);
  // Fails every active operation and drops the queue pair; returns how many.
  size_t FailActive(const absl::Status& status);
  // Fails every operation not yet started; returns how many.
  size_t FailQueued(const absl::Status& status);
  absl::Status Reconnect();

  // First: destroyed last, after the queue pair that writes its memory.
  const std::shared_ptr<ClientResources> resources_;
  const uint64_t region_id_;
  client_internal::OpenOptions options_;
  const client_internal::BrokenProtocol broken_;
  bool real_clock_ = false;
  std::vector<Replica> replicas_;  // The primary first; queue pairs all or none.
  layout::Layout layout_;
  std::unique_ptr<client_internal::HeapAllocator> heap_;

  RingDeque<Pending> queued_;
  std::vector<Pending> active_;  // Indexed by the wr_id's high half.
  size_t active_count_ = 0;
  size_t tails_ = 0;  // Of the active: finished operations whose tail is in flight.
  // Writes of one key run one at a time: two in flight together would race
  // for the same slot, and one of them would lose its CAS and start over
  // (a hot key under a skewed load). A write whose key has one active
  // waits in `deferred_`, in order; `writing_` views the active writes'
  // keys (held by their operations).
  absl::flat_hash_set<absl::string_view> writing_;
  std::vector<Pending> deferred_;
  // Finished operations, for the next ones to reuse: at most
  // max_outstanding, the most a client runs at once (a burst queued beyond
  // that is let go as it finishes).
  std::vector<std::unique_ptr<KvOperation>> idle_ops_;
  Rng rng_{0};
  OpCosts costs_[kOpTypes];
  fabric::QueuePairCounters past_counters_;  // Of connections replaced.
};

absl::Status ClientImpl::Reconnect() {
  fabric::QueuePairOptions qo;
  // Every active operation may post a full round at once.
  qo.max_send_wr =
      std::max<uint32_t>(512, options_.max_outstanding * KvOperation::kMaxRoundRequests);
  qo.channel = resources_->channel();
  std::vector<std::unique_ptr<fabric::QueuePair>> qps;
  for (const Replica& r : replicas_) {
    RKV_ASSIGN_OR_RETURN(std::unique_ptr<fabric::QueuePair> qp,
                         resources_->fabric().Connect(r.region.endpoint, qo));
    if (qp->limits().max_send_wr < qo.max_send_wr) {
      return absl::FailedPreconditionError(
          absl::StrCat("the fabric grants a send queue of ", qp->limits().max_send_wr,
                       " requests; ", options_.max_outstanding, " operations in flight need ",
                       qo.max_send_wr, " (lower max_outstanding)"));
    }
    qps.push_back(std::move(qp));
  }
  for (size_t i = 0; i < replicas_.size(); ++i) replicas_[i].qp = std::move(qps[i]);
  return absl::OkStatus();
}

absl::StatusOr<layout::Layout> ClientImpl::ReadLayout(int replica) {
  const uint32_t n = layout::HeaderOffsets::kChecksum + 4;
  uint8_t* header = scratch().Allocate(n);
  if (header == nullptr) return absl::ResourceExhaustedError("scratch memory");
  const fabric::RemoteRegion& region = replicas_[replica].region;
  absl::Status read =
      RunSync({fabric::WorkRequest::Read(0, header, n, lkey(), region.base, region.rkey)}, replica);
  absl::StatusOr<layout::Layout> parsed =
      read.ok()
          ? layout::ParseHeader(absl::string_view(reinterpret_cast<char*>(header), n),
                                region.length)
          : absl::UnavailableError(absl::StrCat("reading the region header: ", read.message()));
  scratch().Free(header);
  return parsed;
}

absl::Status ClientImpl::Init() {
  if (replicas_.empty() || replicas_.size() > client_internal::kMaxReplicas) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a region has 1 to ", client_internal::kMaxReplicas, " replicas, not ", replicas_.size()));
  }
  rng_ = Rng(options_.seed != 0 ? options_.seed : std::random_device()());
  RKV_RETURN_IF_ERROR(Reconnect());
  // The region header says where the index and the heap are; replicas are
  // mirrors, so every one must say the same.
  RKV_ASSIGN_OR_RETURN(layout_, ReadLayout(0));
  for (int r = 1; r < replicas(); ++r) {
    RKV_ASSIGN_OR_RETURN(const layout::Layout other, ReadLayout(r));
    if (!layout::SameGeometry(layout_, other)) {
      return absl::FailedPreconditionError(
          absl::StrCat("replica ", r, " (", replicas_[r].region.endpoint.address,
                       ") has another region geometry than the primary's"));
    }
  }
  heap_ = std::make_unique<client_internal::HeapAllocator>(layout_, options_.heap_chunk_bytes,
                                                           options_.grace_period);
  active_.resize(options_.max_outstanding);
  idle_ops_.reserve(options_.max_outstanding);
  writing_.reserve(options_.max_outstanding);
  return absl::OkStatus();
}

absl::Status ClientImpl::RunSync(std::vector<fabric::WorkRequest> wrs, int replica) {
  fabric::QueuePair& qp = *replicas_[replica].qp;
  for (fabric::WorkRequest& wr : wrs) wr.flags = 0;
  wrs.back().flags = fabric::kSignaled;
  RKV_RETURN_IF_ERROR(qp.Post(wrs));
  fabric::Completion c;
  if (qp.Wait({&c, 1}, absl::Seconds(10)) != 1) {
    return absl::DeadlineExceededError("no completion from the server in 10 s");
  }
  if (c.status != fabric::CompletionStatus::kSuccess) {
    return absl::UnavailableError(fabric::CompletionStatusName(c.status));
  }
  return absl::OkStatus();
}

absl::Status ClientImpl::ReleaseFreeBlocks() {
  if (replicas_.empty() || replicas_[0].qp == nullptr || heap_ == nullptr || active_count_ > 0) {
    return absl::OkStatus();
  }
  std::array<std::vector<uint64_t>, 256> blocks;
  heap_->TakeFree(Now(), &blocks);
  // Blocks still within their grace period may yet be read by a slow
  // reader: on the real clock, wait it out (at most one grace period).
  if (const absl::Time at = heap_->AllReusableAt(); real_clock_ && at > Now()) {
    absl::SleepFor(std::min(at - Now(), options_.grace_period));
    heap_->TakeFree(Now(), &blocks);
  }
  for (int c = 1; c < 256; ++c) {
    if (!blocks[c].empty()) RKV_RETURN_IF_ERROR(PushFreeBlocks(static_cast<uint8_t>(c), blocks[c]));
  }
  return absl::OkStatus();
}

absl::Status ClientImpl::PushFreeBlocks(uint8_t size_class, const std::vector<uint64_t>& blocks) {
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
  uint8_t* scratch = this->scratch().Allocate(8 + batch * node_bytes);
  if (scratch == nullptr) return absl::ResourceExhaustedError("scratch memory");
  auto* word = reinterpret_cast<uint64_t*>(scratch);
  uint8_t* bufs = scratch + 8;
  absl::Status status;
  // Every node but the last can be written now: nobody sees them yet.
  for (size_t i = 0; i + 1 < nodes.size() && status.ok(); i += batch) {
    std::vector<fabric::WorkRequest> wrs;
    for (size_t k = 0; k < batch && i + k + 1 < nodes.size(); ++k) {
      layout::EncodeFreeNode(nodes[i + k], size_class, bufs + k * node_bytes);
      wrs.push_back(fabric::WorkRequest::Write(0, bufs + k * node_bytes,
                                               static_cast<uint32_t>(node_bytes), lkey(),
                                               Remote(0, node_offsets[i + k]), rkey(0)));
    }
    status = RunSync(std::move(wrs));
  }
  // Then link the last node to the current head and swing the head to the
  // first node; a lost race re-links and tries again.
  const uint64_t head_at = Remote(0, layout::FreePoolHeadOffset(size_class));
  for (int attempt = 0; status.ok(); ++attempt) {
    if (attempt == 100) {
      status = absl::UnavailableError("too much contention on the free pool");
      break;
    }
    status = RunSync({fabric::WorkRequest::Read(0, word, 8, lkey(), head_at, rkey(0))});
    if (!status.ok()) break;
    const uint64_t head = *word;
    const layout::FreePoolHead h = layout::FreePoolHead::Decode(head);
    nodes.back().next = h.node;
    layout::EncodeFreeNode(nodes.back(), size_class, bufs);
    status =
        RunSync({fabric::WorkRequest::Write(0, bufs, static_cast<uint32_t>(node_bytes), lkey(),
                                            Remote(0, node_offsets.back()), rkey(0)),
                 fabric::WorkRequest::Cas(
                     0, word, lkey(), head_at, rkey(0), head,
                     layout::FreePoolHead{static_cast<uint16_t>(h.tag + 1), node_offsets.front()}
                         .Encode())});
    if (status.ok() && *word == head) break;
  }
  this->scratch().Free(scratch);
  return status;
}

void ClientImpl::Recycle(std::unique_ptr<KvOperation> op) {
  op->Clear();
  if (idle_ops_.size() < options_.max_outstanding) idle_ops_.push_back(std::move(op));
}

void ClientImpl::Complete(Pending& p) {
  KvOperation& op = *p.op;
  if (op.type() != OpType::kGet) writing_.erase(op.key());
  OpCosts& c = costs_[static_cast<int>(op.type())];
  c.ops++;
  c.round_trips += op.costs().round_trips;
  c.requests += op.costs().requests;
  c.bytes += op.costs().bytes;
  c.retries += op.costs().retries;
  GetCallback on_get = std::exchange(p.on_get, nullptr);
  DoneCallback on_done = std::exchange(p.on_done, nullptr);
  absl::Status status = op.status();
  std::string result = std::move(op.result());
  if (op.has_tail()) {
    p.tail = true;  // Its scratch memory holds the tail's results.
    tails_++;
  } else {
    Recycle(std::move(p.op));  // Frees its scratch memory before the callback runs.
  }
  if (on_get) {
    if (status.ok()) {
      on_get(std::move(result));
    } else {
      on_get(std::move(status));
    }
  } else if (on_done) {
    on_done(std::move(status));
  }
}

void ClientImpl::Finish(Pending& p, absl::Status status) {
  if (p.op != nullptr && p.op->posted_cas()) {
    status = client_internal::WithUnknownOutcome(std::move(status));
  }
  if (p.on_get) p.on_get(status);
  if (p.on_done) p.on_done(status);
}

size_t ClientImpl::FailActive(const absl::Status& status) {
  size_t failed = 0;
  for (Pending& p : active_) {
    if (p.op == nullptr) continue;
    p.op->round().Clear();
    Pending done = std::move(p);
    p = Pending{};
    active_count_--;
    if (done.tail) {  // Its callback has run.
      tails_--;
      continue;
    }
    Finish(done, status);
    failed++;
  }
  writing_.clear();
  past_counters_ = connection_counters();
  for (Replica& r : replicas_) r.qp.reset();
  return failed;
}

size_t ClientImpl::FailQueued(const absl::Status& status) {
  size_t failed = 0;
  for (Pending& p : deferred_) {
    Finish(p, status);
    failed++;
  }
  deferred_.clear();
  while (!queued_.empty()) {
    Pending p = std::move(queued_.front());
    queued_.pop_front();
    Finish(p, status);
    failed++;
  }
  return failed;
}

bool ClientImpl::Start(Pending& p, size_t slot) {
  p.op->Step();
  if (p.op->blocked()) {
    // Scratch memory is shared with the client's other sessions: give up
    // only when nothing at all holds any.
    if (active_count_ > 0 || !scratch().empty()) return false;
    p.op->Finish(absl::ResourceExhaustedError(
        "client scratch memory too small for this operation; raise scratch_bytes"));
  }
  if (p.op->type() != OpType::kGet) writing_.insert(p.op->key());
  active_[slot] = std::move(p);
  active_count_++;
  return true;
}

void ClientImpl::StartWaiting() {
  size_t slot = 0;
  auto free_slot = [&] {
    while (slot < active_.size() && active_[slot].op != nullptr) ++slot;
    return slot < active_.size();
  };
  // Deferred writes first: they were submitted before anything queued.
  size_t kept = 0;
  bool room = true;
  for (size_t d = 0; d < deferred_.size(); ++d) {
    Pending& p = deferred_[d];
    if (room && !MustWait(p) && free_slot() && Start(p, slot)) continue;
    if (room && !MustWait(p)) room = false;  // No slot, or no memory: stop starting.
    if (kept != d) deferred_[kept] = std::move(p);
    kept++;
  }
  deferred_.resize(kept);
  while (room && !queued_.empty()) {
    Pending& next = queued_.front();
    if (MustWait(next)) {
      deferred_.push_back(std::move(next));
    } else if (!free_slot() || !Start(next, slot)) {
      break;
    }
    queued_.pop_front();
  }
}

void ClientImpl::AppendRound(size_t i, Pending& p) {
  // Each replica's share of the round signals only its last request (a
  // queue pair completes in order).
  client_internal::OpRounds& round = p.op->round();
  const std::vector<fabric::WorkRequest>& wrs = round.requests();
  RKV_CHECK(wrs.size() <= KvOperation::kMaxRoundRequests) << wrs.size() << " requests";
  size_t last[client_internal::kMaxReplicas];
  std::fill(std::begin(last), std::end(last), SIZE_MAX);
  for (size_t k = 0; k < wrs.size(); ++k) {
    const int r = round.targets()[k];
    fabric::WorkRequest wr = wrs[k];
    wr.wr_id = (uint64_t{i} << 32) | k;
    wr.flags &= ~fabric::kSignaled;  // Other flags stay as set.
    last[r] = replicas_[r].batch.size();
    replicas_[r].batch.push_back(wr);
  }
  for (int r = 0; r < replicas(); ++r) {
    if (last[r] == SIZE_MAX) continue;
    replicas_[r].batch[last[r]].flags |= fabric::kSignaled;
    p.waiting++;
  }
  round.Clear();
}

bool ClientImpl::PostBatches(size_t* finished) {
  absl::Status posted;
  for (Replica& r : replicas_) {
    if (!r.batch.empty() && posted.ok()) posted = r.qp->Post(r.batch);
    r.batch.clear();
  }
  if (posted.ok()) return true;
  *finished +=
      FailActive(absl::UnavailableError(absl::StrCat("posting to the server: ", posted.message())));
  return false;
}

bool ClientImpl::PostRounds(size_t* finished) {
  // One doorbell per replica for every round that is ready.
  const absl::Time now = Now();
  for (size_t i = 0; i < active_.size(); ++i) {
    Pending& p = active_[i];
    if (p.op == nullptr || p.tail) continue;
    if (p.op->finished()) {
      Complete(p);
      p = Pending{};
      active_count_--;
      (*finished)++;
      continue;
    }
    if (p.op->round().empty()) continue;
    p.op->OnPosted(now);
    AppendRound(i, p);
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
    const size_t i = c.wr_id >> 32;
    Pending& p = active_[i];
    if (p.op == nullptr || --p.waiting > 0) continue;
    if (p.tail) {  // The tail landed: the slot is free.
      p.op->OnTailLanded();
      Recycle(std::move(p.op));
      p = Pending{};
      active_count_--;
      tails_--;
      continue;
    }
    p.op->Step();
    if (!p.op->finished()) continue;
    (*finished)++;
    Complete(p);
    if (!p.tail) {
      p = Pending{};
      active_count_--;
      continue;
    }
    // The tail goes out now, ahead of anything this client posts later:
    // a later write of the key expects the word it commits.
    AppendRound(i, p);
    if (!PostBatches(finished)) return false;
  }
  return true;
}

size_t ClientImpl::Poll(absl::Duration timeout) {
  size_t finished = 0;
  if (replicas_[0].qp == nullptr) {
    if (absl::Status s = Reconnect(); !s.ok()) {
      // Whatever the fabric's reason, for an operation the server is
      // unreachable: never a code such as NotFound that a key could mean.
      s = absl::UnavailableError(absl::StrCat("connecting to the server: ", s.message()));
      for (Replica& r : replicas_) r.qp.reset();
      return FailQueued(s);
    }
  }
  StartWaiting();
  if (!PostRounds(&finished) || active_count_ == 0) return finished;
  fabric::Completion cs[64];
  size_t got = 0;
  for (Replica& r : replicas_) {
    const size_t n = r.qp->Poll(absl::MakeSpan(cs));
    got += n;
    if (!TakeCompletions({cs, n}, &finished)) return finished;
  }
  if (got == 0 && finished == 0 && timeout > absl::ZeroDuration()) {
    if (replicas_.size() == 1) {
      const size_t n = replicas_[0].qp->Wait(absl::MakeSpan(cs), timeout);
      TakeCompletions({cs, n}, &finished);
    } else {
      // Every replica's queue pair notifies the one channel.
      resources_->channel()->Wait(timeout);
      for (Replica& r : replicas_) {
        const size_t n = r.qp->Poll(absl::MakeSpan(cs));
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
