// A session with one server's region: its queue pair, layout and heap
// allocator on the client's shared resources, and the loop that runs
// operations' rounds with shared doorbells.
#include <atomic>
#include <memory>
#include <random>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "client/client_resources.h"
#include "client/kv_operation.h"
#include "client/outcome.h"
#include "client/ring_deque.h"
#include "client/session.h"
#include "common/logging.h"
#include "common/status.h"
#include "rkv/client.h"

namespace rkv {
namespace {

using client_internal::ClientResources;
using client_internal::KvOperation;
using client_internal::RingDeque;

std::atomic<uint64_t> next_region_id{1};

class ClientImpl final : public Client, public client_internal::Session {
 public:
  ClientImpl(const fabric::RemoteRegion& region, const ClientOptions& options,
             const client_internal::BrokenProtocol& broken,
             std::shared_ptr<ClientResources> resources)
      : resources_(std::move(resources)),
        region_(region),
        region_id_(next_region_id.fetch_add(1)),
        options_(options),
        broken_(broken) {
    real_clock_ = !options_.clock;
    if (real_clock_) options_.clock = [] { return absl::Now(); };
    options_.max_outstanding = std::max<uint32_t>(1, options_.max_outstanding);
  }

  ~ClientImpl() override {
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
  uint64_t Remote(uint64_t off) const override { return region_.base + off; }
  uint32_t rkey() const override { return region_.rkey; }
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
  size_t in_flight() const override {
    return queued_.size() + deferred_.size() + active_count_;
  }
  OpCosts costs(OpType type) const override { return costs_[static_cast<int>(type)]; }
  fabric::QueuePairCounters connection_counters() const override {
    fabric::QueuePairCounters c = past_counters_;
    if (qp_ != nullptr) c += qp_->counters();
    return c;
  }

 private:
  struct Pending {
    std::unique_ptr<KvOperation> op;
    GetCallback on_get;
    DoneCallback on_done;
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

  void Complete(Pending& p);
  // Runs `p`'s callback with `status`, marked as of unknown outcome if the
  // operation had posted a CAS.
  static void Finish(Pending& p, absl::Status status);
  // Hands the blocks this client freed (and the rest of its heap chunk)
  // back to the region's free pool, so that they outlive the client.
  absl::Status ReleaseFreeBlocks();
  absl::Status PushFreeBlocks(uint8_t size_class, const std::vector<uint64_t>& blocks);
  // Posts `wrs` (the last one signaled) and waits for their completion.
  absl::Status RunSync(std::vector<fabric::WorkRequest> wrs);
  // Fails every active operation and drops the queue pair; returns how many.
  size_t FailActive(const absl::Status& status);
  // Fails every operation not yet started; returns how many.
  size_t FailQueued(const absl::Status& status);
  absl::Status Reconnect();

  // First: destroyed last, after the queue pair that writes its memory.
  const std::shared_ptr<ClientResources> resources_;
  const fabric::RemoteRegion region_;
  const uint64_t region_id_;
  ClientOptions options_;
  const client_internal::BrokenProtocol broken_;
  bool real_clock_ = false;
  std::unique_ptr<fabric::QueuePair> qp_;
  layout::Layout layout_;
  std::unique_ptr<client_internal::HeapAllocator> heap_;

  RingDeque<Pending> queued_;
  std::vector<Pending> active_;  // Indexed by the wr_id's high half.
  size_t active_count_ = 0;
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
  // The requests one Poll posts; kept for its capacity.
  std::vector<fabric::WorkRequest> batch_;
  Rng rng_{0};
  OpCosts costs_[kOpTypes];
  fabric::QueuePairCounters past_counters_;  // Of connections replaced.
};

absl::Status ClientImpl::Reconnect() {
  fabric::QueuePairOptions qo;
  // Every active operation may post a full round at once.
  qo.max_send_wr = std::max<uint32_t>(
      512, options_.max_outstanding * KvOperation::kMaxRoundRequests);
  qo.channel = resources_->channel();
  RKV_ASSIGN_OR_RETURN(std::unique_ptr<fabric::QueuePair> qp,
                       resources_->fabric().Connect(region_.endpoint, qo));
  if (qp->limits().max_send_wr < qo.max_send_wr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the fabric grants a send queue of ", qp->limits().max_send_wr, " requests; ",
        options_.max_outstanding, " operations in flight need ", qo.max_send_wr,
        " (lower max_outstanding)"));
  }
  qp_ = std::move(qp);
  return absl::OkStatus();
}

absl::Status ClientImpl::Init() {
  rng_ = Rng(options_.seed != 0 ? options_.seed : std::random_device()());
  RKV_RETURN_IF_ERROR(Reconnect());
  // Read the region header: it says where the index and the heap are.
  const uint32_t n = layout::HeaderOffsets::kChecksum + 4;
  uint8_t* header = scratch().Allocate(n);
  if (header == nullptr) return absl::ResourceExhaustedError("scratch memory");
  absl::Status read = RunSync({fabric::WorkRequest::Read(0, header, n, lkey(), region_.base,
                                                         region_.rkey)});
  absl::StatusOr<layout::Layout> parsed =
      read.ok() ? layout::ParseHeader(absl::string_view(reinterpret_cast<char*>(header), n),
                                      region_.length)
                : absl::UnavailableError(absl::StrCat("reading the region header: ",
                                                      read.message()));
  scratch().Free(header);
  if (!parsed.ok()) return parsed.status();
  layout_ = *parsed;
  heap_ = std::make_unique<client_internal::HeapAllocator>(layout_, options_.heap_chunk_bytes,
                                                           options_.grace_period);
  active_.resize(options_.max_outstanding);
  idle_ops_.reserve(options_.max_outstanding);
  writing_.reserve(options_.max_outstanding);
  return absl::OkStatus();
}

absl::Status ClientImpl::RunSync(std::vector<fabric::WorkRequest> wrs) {
  for (fabric::WorkRequest& wr : wrs) wr.flags = 0;
  wrs.back().flags = fabric::kSignaled;
  RKV_RETURN_IF_ERROR(qp_->Post(wrs));
  fabric::Completion c;
  if (qp_->Wait({&c, 1}, absl::Seconds(10)) != 1) {
    return absl::DeadlineExceededError("no completion from the server in 10 s");
  }
  if (c.status != fabric::CompletionStatus::kSuccess) {
    return absl::UnavailableError(fabric::CompletionStatusName(c.status));
  }
  return absl::OkStatus();
}

absl::Status ClientImpl::ReleaseFreeBlocks() {
  if (qp_ == nullptr || heap_ == nullptr || in_flight() > 0) return absl::OkStatus();
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
                                               Remote(node_offsets[i + k]), rkey()));
    }
    status = RunSync(std::move(wrs));
  }
  // Then link the last node to the current head and swing the head to the
  // first node; a lost race re-links and tries again.
  const uint64_t head_at = Remote(layout::FreePoolHeadOffset(size_class));
  for (int attempt = 0; status.ok(); ++attempt) {
    if (attempt == 100) {
      status = absl::UnavailableError("too much contention on the free pool");
      break;
    }
    status = RunSync({fabric::WorkRequest::Read(0, word, 8, lkey(), head_at, rkey())});
    if (!status.ok()) break;
    const uint64_t head = *word;
    const layout::FreePoolHead h = layout::FreePoolHead::Decode(head);
    nodes.back().next = h.node;
    layout::EncodeFreeNode(nodes.back(), size_class, bufs);
    status = RunSync(
        {fabric::WorkRequest::Write(0, bufs, static_cast<uint32_t>(node_bytes), lkey(),
                                    Remote(node_offsets.back()), rkey()),
         fabric::WorkRequest::Cas(0, word, lkey(), head_at, rkey(), head,
                                  layout::FreePoolHead{static_cast<uint16_t>(h.tag + 1),
                                                       node_offsets.front()}
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
  GetCallback on_get = std::move(p.on_get);
  DoneCallback on_done = std::move(p.on_done);
  absl::Status status = op.status();
  std::string result = std::move(op.result());
  Recycle(std::move(p.op));  // Frees its scratch memory before the callback runs.
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
    p.op->round().clear();
    Pending done = std::move(p);
    p = Pending{};
    active_count_--;
    Finish(done, status);
    failed++;
  }
  writing_.clear();
  past_counters_ = connection_counters();
  qp_.reset();
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

size_t ClientImpl::Poll(absl::Duration timeout) {
  size_t finished = 0;
  if (qp_ == nullptr) {
    if (absl::Status s = Reconnect(); !s.ok()) {
      // Whatever the fabric's reason, for an operation the server is
      // unreachable: never a code such as NotFound that a key could mean.
      s = absl::UnavailableError(absl::StrCat("connecting to the server: ", s.message()));
      return FailQueued(s);
    }
  }
  StartWaiting();
  // One doorbell for every round that is ready; each round signals only
  // its last request (a queue pair completes in order).
  std::vector<fabric::WorkRequest>& batch = batch_;
  batch.clear();
  const absl::Time now = Now();
  for (size_t i = 0; i < active_.size(); ++i) {
    Pending& p = active_[i];
    if (p.op == nullptr) continue;
    if (p.op->finished()) {
      Complete(p);
      p = Pending{};
      active_count_--;
      finished++;
      continue;
    }
    auto& round = p.op->round();
    if (round.empty()) continue;
    RKV_CHECK(round.size() <= KvOperation::kMaxRoundRequests) << round.size() << " requests";
    p.op->OnPosted(now);
    for (size_t k = 0; k < round.size(); ++k) {
      fabric::WorkRequest wr = round[k];
      wr.wr_id = (uint64_t{i} << 32) | k;
      // Only the round's last request signals; other flags stay as set.
      wr.flags &= ~fabric::kSignaled;
      if (k + 1 == round.size()) wr.flags |= fabric::kSignaled;
      batch.push_back(wr);
    }
    round.clear();
  }
  if (!batch.empty()) {
    if (absl::Status s = qp_->Post(batch); !s.ok()) {
      return finished +
             FailActive(absl::UnavailableError(absl::StrCat("posting to the server: ", s.message())));
    }
  }
  if (active_count_ == 0) return finished;
  fabric::Completion cs[64];
  size_t n = qp_->Poll(absl::MakeSpan(cs));
  if (n == 0 && finished == 0 && timeout > absl::ZeroDuration()) {
    n = qp_->Wait(absl::MakeSpan(cs), timeout);
  }
  for (size_t k = 0; k < n; ++k) {
    if (cs[k].status != fabric::CompletionStatus::kSuccess) {
      return finished + FailActive(absl::UnavailableError(absl::StrCat(
                            "connection to the server failed: ",
                            fabric::CompletionStatusName(cs[k].status))));
    }
    Pending& p = active_[cs[k].wr_id >> 32];
    if (p.op == nullptr) continue;
    p.op->Step();
    if (p.op->finished()) {
      Complete(p);
      p = Pending{};
      active_count_--;
      finished++;
    }
  }
  return finished;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Client>> Client::Open(const fabric::RemoteRegion& region,
                                                     const ClientOptions& options) {
  return client_internal::OpenBroken(region, options, {});
}

absl::StatusOr<std::unique_ptr<Client>> client_internal::OpenBroken(
    const fabric::RemoteRegion& region, const ClientOptions& options,
    const BrokenProtocol& broken) {
  RKV_ASSIGN_OR_RETURN(std::shared_ptr<ClientResources> resources,
                       ClientResources::Create(options));
  return OpenSession(region, options, broken, std::move(resources));
}

absl::StatusOr<std::unique_ptr<Client>> client_internal::OpenSession(
    const fabric::RemoteRegion& region, const ClientOptions& options,
    const BrokenProtocol& broken, std::shared_ptr<ClientResources> resources) {
  auto client = std::make_unique<ClientImpl>(region, options, broken, std::move(resources));
  RKV_RETURN_IF_ERROR(client->Init());
  return std::unique_ptr<Client>(std::move(client));
}

}  // namespace rkv
