// The client's steady state allocates no heap memory per operation beyond
// what its API implies. This binary replaces the global operator new with
// one that counts, so it is a test binary of its own.
//
// Counted: everything the client does in Submit (GetAsync, PutAsync) and
// Poll, callbacks included. Not counted: the simulated network, which
// stands in for the NIC and the server (its queue pairs pause the count).
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/fabric/fabric.h"
#include "gtest/gtest.h"
#include "tests/client/region/kv_test_env.h"

namespace {

std::atomic<bool> counting{false};
thread_local int fabric_depth = 0;
std::atomic<uint64_t> allocations{0};

void* CountedAlloc(size_t n) {
  if (counting.load(std::memory_order_relaxed) && fabric_depth == 0) {
    allocations.fetch_add(1, std::memory_order_relaxed);
  }
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}

}  // namespace

void* operator new(size_t n) { return CountedAlloc(n); }
void* operator new[](size_t n) { return CountedAlloc(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }

namespace rkv::testing {
namespace {

// While one lives, allocations are the fabric's.
struct InFabric {
  InFabric() { ++fabric_depth; }
  ~InFabric() { --fabric_depth; }
};

class UncountedQueuePair : public fabric::QueuePair {
 public:
  explicit UncountedQueuePair(std::unique_ptr<fabric::QueuePair> qp) : qp_(std::move(qp)) {}
  absl::Status Post(absl::Span<const fabric::WorkRequest> batch) override {
    InFabric f;
    return qp_->Post(batch);
  }
  size_t Poll(absl::Span<fabric::Completion> out) override {
    InFabric f;
    return qp_->Poll(out);
  }
  size_t Wait(absl::Span<fabric::Completion> out, absl::Duration timeout) override {
    InFabric f;
    return qp_->Wait(out, timeout);
  }
  bool in_error() const override { return qp_->in_error(); }
  fabric::QueuePairCounters counters() const override { return qp_->counters(); }
  fabric::QueuePairLimits limits() const override { return qp_->limits(); }

 private:
  std::unique_ptr<fabric::QueuePair> qp_;
};

// A fabric whose queue pairs' work is not counted.
class UncountedFabric : public fabric::Fabric {
 public:
  explicit UncountedFabric(std::unique_ptr<fabric::Fabric> f) : f_(std::move(f)) {}
  fabric::FabricKind kind() const override { return f_->kind(); }
  absl::StatusOr<std::unique_ptr<fabric::MemoryRegion>> RegisterMemory(void* addr, size_t length,
                                                                       uint32_t access) override {
    return f_->RegisterMemory(addr, length, access);
  }
  absl::StatusOr<std::unique_ptr<fabric::Listener>> Listen(
      const fabric::ListenOptions& options) override {
    return f_->Listen(options);
  }
  absl::StatusOr<std::shared_ptr<fabric::CompletionChannel>> NewCompletionChannel() override {
    return f_->NewCompletionChannel();
  }
  absl::StatusOr<std::unique_ptr<fabric::QueuePair>> Connect(
      const fabric::Endpoint& endpoint, const fabric::QueuePairOptions& options) override {
    auto qp = f_->Connect(endpoint, options);
    if (!qp.ok()) return qp.status();
    return std::unique_ptr<fabric::QueuePair>(
        std::make_unique<UncountedQueuePair>(std::move(qp).value()));
  }

 private:
  std::unique_ptr<fabric::Fabric> f_;
};

class ClientAllocTest : public ::testing::Test {
 protected:
  static constexpr int kKeys = 8;

  void SetUp() override {
    // A short grace period (in simulated time an operation takes a few
    // microseconds), so that the warm-up outlasts it and blocks freed by
    // updates come back into use, as in a client that has run a while;
    // long enough that cached slots stay fresh while the operations cycle
    // through the keys.
    auto env = KvTestEnv::Create(KvBackend::kSoftSim,
                                 {.region_bytes = 8 << 20, .grace_period = absl::Milliseconds(2)});
    ASSERT_TRUE(env.ok()) << env.status();
    env_ = std::move(env).value();
    client_internal::OpenOptions o = env_->client_options();
    o.fabric = std::make_shared<UncountedFabric>(env_->sim->NewFabric());
    auto c = env_->NewClient(o);
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = std::move(c).value();
    for (int i = 0; i < kKeys; ++i) {
      keys_.push_back(absl::StrCat("user", i));
      ASSERT_TRUE(client_->Insert(keys_.back(), value_).ok());
    }
  }

  // Runs `ops` operations one at a time, cycling through the keys; returns
  // the heap allocations they made.
  uint64_t Run(bool update, int ops) {
    int failed = 0;
    allocations = 0;
    counting = true;
    for (int i = 0; i < ops; ++i) {
      const std::string& key = keys_[i % keys_.size()];
      bool done = false;
      // The callbacks capture two references: std::function holds them
      // without allocating (a larger capture would cost one allocation,
      // the caller's).
      if (update) {
        client_->PutAsync(key, value_, [&](absl::Status s) {
          failed += !s.ok();
          done = true;
        });
      } else {
        client_->GetAsync(key, [&](absl::StatusOr<std::string> v) {
          failed += !v.ok();
          done = true;
        });
      }
      while (!done) client_->Poll();
    }
    counting = false;
    EXPECT_EQ(failed, 0);
    return allocations;
  }

  std::unique_ptr<KvTestEnv> env_;
  std::unique_ptr<Client> client_;
  std::vector<std::string> keys_;
  // Longer than std::string's inline buffer: a GET's result allocates.
  const std::string value_ = std::string(100, 'v');
};

constexpr int kWarmUp = 3000;
constexpr int kOps = 1000;

TEST_F(ClientAllocTest, CachedGetAllocatesOnlyTheValueItReturns) {
  Run(/*update=*/false, kWarmUp);
  const OpCosts before = client_->costs(OpType::kGet);
  const uint64_t n = Run(/*update=*/false, kOps);
  const OpCosts after = client_->costs(OpType::kGet);
  // Every GET took the cached path: one round trip.
  EXPECT_EQ(after.round_trips - before.round_trips, uint64_t{kOps});
  // The one allocation a GET makes: the std::string of the value, which the
  // callback receives (a StatusOr<std::string> owns its value).
  EXPECT_EQ(n, uint64_t{kOps}) << static_cast<double>(n) / kOps << " per GET";
}

TEST_F(ClientAllocTest, CachedUpdateAllocatesNothing) {
  Run(/*update=*/true, kWarmUp);
  const OpCosts before = client_->costs(OpType::kPut);
  const uint64_t n = Run(/*update=*/true, kOps);
  const OpCosts after = client_->costs(OpType::kPut);
  // Every UPDATE took the cached path (its block's WRITE and the slot's CAS
  // in one round trip), with blocks from the client's free lists.
  EXPECT_EQ(after.round_trips - before.round_trips, uint64_t{kOps});
  EXPECT_EQ(n, 0u) << static_cast<double>(n) / kOps << " per UPDATE";
}

TEST_F(ClientAllocTest, MixedCachedOperationsAllocateOnlyGetValues) {
  Run(/*update=*/true, kWarmUp);
  Run(/*update=*/false, kWarmUp);
  // The mix itself a while, too: in the GET-only spell the blocks updates
  // had freed went back to the region unused, and the free lists settle
  // again to what the mix keeps.
  const auto mix = [this] {
    uint64_t n = 0;
    for (int round = 0; round < 10; ++round) {
      n += Run(/*update=*/round % 2 == 0, kOps / 10);
      n += Run(/*update=*/round % 2 == 1, kOps / 10);
    }
    return n;
  };
  mix();
  EXPECT_EQ(mix(), uint64_t{kOps}) << "one per GET, none per UPDATE";
}

}  // namespace
}  // namespace rkv::testing
