// The fabric contract, run against every backend: soft over TCP, soft in
// the deterministic simulation, and verbs where an RDMA device exists.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/fabric/fabric_test_env.h"
#include "tests/common/fabric/verbs_test_setup.h"

namespace rkv::fabric::testing {
namespace {

using ::testing::Each;
using ::testing::ElementsAre;
using ::testing::Field;

constexpr auto kSuccess = CompletionStatus::kSuccess;
constexpr auto kFlushed = CompletionStatus::kFlushed;

std::vector<CompletionStatus> Statuses(const std::vector<Completion>& cs) {
  std::vector<CompletionStatus> out;
  for (const Completion& c : cs) out.push_back(c.status);
  return out;
}

class ConformanceTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    auto env = FabricTestEnv::Create(GetParam());
    if (!env.ok()) RKV_SKIP_OR_FAIL(env.status());
    env_ = std::move(env).value();
  }

  std::unique_ptr<QueuePair> Connect(const QueuePairOptions& o = {}) {
    auto qp = env_->Connect(o);
    EXPECT_TRUE(qp.ok()) << qp.status();
    return qp.ok() ? std::move(qp).value() : nullptr;
  }

  std::unique_ptr<QueuePair> ConnectAs(uint64_t peer_id) {
    auto qp = env_->ConnectAs(peer_id);
    EXPECT_TRUE(qp.ok()) << qp.status();
    return qp.ok() ? std::move(qp).value() : nullptr;
  }

  // The remote word at `offset`, READ through `qp`; 0xDEAD... if that failed.
  uint64_t ReadThrough(QueuePair& qp, uint64_t offset) {
    auto* word = reinterpret_cast<uint64_t*>(local(kScratch));
    *word = 0;
    auto got = env_->Run(qp, {env_->Read(0, offset, reinterpret_cast<uint8_t*>(word), 8)}, 1);
    EXPECT_THAT(Statuses(got), ElementsAre(kSuccess)) << "READ at " << offset;
    return got.size() == 1 && got[0].status == kSuccess ? *word : 0xDEADDEADDEADDEADu;
  }

  // An 8-byte inline WRITE of `value`, from a place of its own per id
  // (mod 64) until it is posted.
  WorkRequest WriteWord(uint64_t id, uint64_t offset, uint64_t value) {
    auto* src = reinterpret_cast<uint64_t*>(local(kScratch + 64 + 8 * (id % 64)));
    *src = value;
    WorkRequest w = env_->Write(id, offset, reinterpret_cast<uint8_t*>(src), 8);
    w.flags |= kInline;
    return w;
  }

  // A local place the fence tests' helpers use, clear of what tests use.
  static constexpr size_t kScratch = 6 << 20;

  uint8_t* local(size_t offset = 0) { return env_->local_mem->data() + offset; }

  // Remote place p (of `bytes` bytes, from offset p * bytes) filled with
  // the byte p + 1.
  void FillPlaces(QueuePair& qp, int places, uint32_t bytes) {
    uint8_t* src = local(0);
    for (int p = 0; p < places; ++p) {
      std::memset(src, p + 1, bytes);
      ASSERT_EQ(env_->Run(qp, {env_->Write(p, uint64_t{bytes} * p, src, bytes)}, 1).size(), 1u);
    }
  }

  std::unique_ptr<FabricTestEnv> env_;
};

TEST_P(ConformanceTest, ReadWriteRoundTripsFromOneByteToFourMebibytes) {
  auto qp = Connect();
  ASSERT_NE(qp, nullptr);
  const uint32_t sizes[] = {1, 7, 8, 9, 63, 64, 65, 4095, 4096, 65536, 1 << 20, 4 << 20};
  uint64_t id = 0;
  for (uint32_t size : sizes) {
    for (uint64_t remote_offset : {uint64_t{0}, uint64_t{3}}) {
      SCOPED_TRACE(::testing::Message() << "size " << size << " offset " << remote_offset);
      uint8_t* src = local(0);
      uint8_t* dst = local(4 << 20);
      for (uint32_t i = 0; i < size; ++i) src[i] = static_cast<uint8_t>(i * 31 + size + id);
      std::memset(dst, 0, size);
      auto got = env_->Run(
          *qp,
          {env_->Write(++id, remote_offset, src, size), env_->Read(++id, remote_offset, dst, size)},
          2);
      ASSERT_THAT(Statuses(got), ElementsAre(kSuccess, kSuccess));
      EXPECT_EQ(got[1].byte_len, size);
      ASSERT_EQ(std::memcmp(src, dst, size), 0);
    }
  }
}

TEST_P(ConformanceTest, CasReturnsOldValueOnSuccessAndFailure) {
  auto qp = Connect();
  ASSERT_NE(qp, nullptr);
  auto* old = reinterpret_cast<uint64_t*>(local(64));
  ASSERT_THAT(Statuses(env_->Run(*qp, {env_->Faa(1, 128, old, 5)}, 1)), ElementsAre(kSuccess));
  ASSERT_EQ(*old, 0u);

  ASSERT_THAT(Statuses(env_->Run(*qp, {env_->Cas(2, 128, old, 5, 9)}, 1)), ElementsAre(kSuccess));
  EXPECT_EQ(*old, 5u);  // Matched: swapped.
  ASSERT_THAT(Statuses(env_->Run(*qp, {env_->Cas(3, 128, old, 5, 11)}, 1)), ElementsAre(kSuccess));
  EXPECT_EQ(*old, 9u);  // Did not match: the current value comes back.
  auto word = env_->ReadWord(128);
  ASSERT_TRUE(word.ok()) << word.status();
  EXPECT_EQ(*word, 9u);
}

TEST_P(ConformanceTest, FaaReturnsOldValueAndAdds) {
  auto qp = Connect();
  ASSERT_NE(qp, nullptr);
  auto* old = reinterpret_cast<uint64_t*>(local(64));
  for (uint64_t i = 0; i < 4; ++i) {
    ASSERT_THAT(Statuses(env_->Run(*qp, {env_->Faa(i, 256, old, 10)}, 1)), ElementsAre(kSuccess));
    EXPECT_EQ(*old, i * 10);
  }
  EXPECT_EQ(*env_->ReadWord(256), 40u);
  // Addition wraps modulo 2^64.
  ASSERT_THAT(Statuses(env_->Run(*qp, {env_->Faa(9, 256, old, ~uint64_t{0})}, 1)),
              ElementsAre(kSuccess));
  EXPECT_EQ(*env_->ReadWord(256), 39u);
}

// Each queue pair runs CAS-increment loops on one shared word; every
// successful CAS adds exactly one, so the end value is exact.
TEST_P(ConformanceTest, ConcurrentCasIncrementsSumExactly) {
  constexpr int kQueuePairs = 4;
  constexpr int kIncrements = 150;
  constexpr uint64_t kWord = 512;
  struct Worker {
    std::unique_ptr<QueuePair> qp;
    uint64_t* old;
    uint64_t guess = 0;
    int done = 0;
    int attempts = 0;
  };
  std::vector<Worker> workers(kQueuePairs);
  for (int i = 0; i < kQueuePairs; ++i) {
    workers[i].qp = Connect();
    ASSERT_NE(workers[i].qp, nullptr);
    workers[i].old = reinterpret_cast<uint64_t*>(local(4096 + 64 * i));
  }
  auto post = [&](Worker& w) {
    return w.qp->Post({env_->Cas(w.attempts++, kWord, w.old, w.guess, w.guess + 1)});
  };
  // One step: wait for the outstanding CAS and post the next one.
  auto step = [&](Worker& w, absl::Duration timeout) -> bool {
    Completion c;
    if (w.qp->Wait({&c, 1}, timeout) == 0) return false;
    EXPECT_EQ(c.status, kSuccess);
    if (*w.old == w.guess) {
      w.done++;
      w.guess++;
    } else {
      w.guess = *w.old;
    }
    if (w.done < kIncrements) {
      EXPECT_TRUE(post(w).ok());
    }
    return true;
  };
  for (Worker& w : workers) ASSERT_TRUE(post(w).ok());
  if (GetParam() == Backend::kSoftSim) {
    // One thread drives every queue pair; the scheduler interleaves them.
    for (bool busy = true; busy;) {
      busy = false;
      for (Worker& w : workers) {
        if (w.done < kIncrements) {
          ASSERT_TRUE(step(w, absl::Seconds(10)));
          busy = true;
        }
      }
    }
  } else {
    std::vector<std::thread> threads;
    for (Worker& w : workers) {
      threads.emplace_back([&] {
        while (w.done < kIncrements && step(w, absl::Seconds(10))) {
        }
      });
    }
    for (auto& t : threads) t.join();
  }
  int attempts = 0;
  for (const Worker& w : workers) {
    EXPECT_EQ(w.done, kIncrements);
    attempts += w.attempts;
  }
  EXPECT_EQ(*env_->ReadWord(kWord), uint64_t{kQueuePairs} * kIncrements);
  RecordProperty("cas_attempts", attempts);
}

// Many CASes in flight on one queue pair, each on its own word, each
// expecting the value the one before it left: every one must return
// exactly that. A transport that retransmits (rxe under packet loss) must
// answer a repeated atomic from what it executed the first time, never
// execute it again: a second execution would fail and return the value
// the first one wrote, and a client would think it lost a race it won.
TEST_P(ConformanceTest, PipelinedAtomicsExecuteExactlyOnce) {
  constexpr int kWindow = 4;    // Doorbells in flight.
  constexpr int kPerBell = 16;  // CASes per doorbell, each on its own word.
  constexpr int kRounds = 100;  // Doorbells per window place.
  constexpr uint64_t kWords = 16384;
  auto qp = Connect();
  ASSERT_NE(qp, nullptr);
  std::vector<uint64_t> expect(kWindow * kPerBell, 0);
  auto* old = reinterpret_cast<uint64_t*>(local(0));
  uint8_t* bulk = local(65536);
  auto post = [&](int place) {
    std::vector<WorkRequest> bell;
    for (int i = 0; i < kPerBell; ++i) {
      const int w = place * kPerBell + i;
      bell.push_back(env_->Cas(w, kWords + 8 * w, &old[w], expect[w], expect[w] + 1));
    }
    // Bulk traffic between them, so that losses fall on every kind of packet.
    bell.push_back(env_->Read(1000 + place, 65536, bulk + 8192 * place, 8192));
    return qp->Post(bell);
  };
  for (int place = 0; place < kWindow; ++place) ASSERT_TRUE(post(place).ok());
  std::vector<int> rounds(kWindow, 1);
  int open = kWindow;
  std::vector<Completion> got;  // Completions in posting order.
  while (open > 0) {
    if (got.size() < size_t{kPerBell + 1}) {
      std::vector<Completion> more = env_->Await(*qp, 1, absl::Seconds(30));
      ASSERT_FALSE(more.empty()) << "no completion in 30 s";
      got.insert(got.end(), more.begin(), more.end());
      continue;
    }
    ASSERT_THAT(got, Each(Field(&Completion::status, kSuccess)));
    const int place = static_cast<int>(got[0].wr_id) / kPerBell;
    for (int i = 0; i < kPerBell; ++i) {
      const int w = place * kPerBell + i;
      ASSERT_EQ(got[i].wr_id, uint64_t(w));  // Completions in posting order.
      ASSERT_EQ(old[w], expect[w]) << "word " << w << ", round " << rounds[place];
      expect[w]++;
    }
    got.erase(got.begin(), got.begin() + kPerBell + 1);
    if (rounds[place]++ < kRounds) {
      ASSERT_TRUE(post(place).ok());
    } else {
      open--;
    }
  }
  for (int w = 0; w < kWindow * kPerBell; w += 7) {
    EXPECT_EQ(*env_->ReadWord(kWords + 8 * w), uint64_t{kRounds});
  }
}

// An error completion, then every later request of the batch and of later
// batches flushed; other queue pairs keep being served. When the target
// refused the bad request, nothing after it executed. An error the
// initiator finds only in the response (a READ into an unregistered
// buffer) comes after the requests behind it were sent, and on hardware
// they may have executed: `later_may_execute`.
void ExpectErrorThenFlush(FabricTestEnv& env, QueuePair& qp, const WorkRequest& bad,
                          CompletionStatus want, bool later_may_execute = false) {
  uint8_t* src = env.local_mem->data() + 8192;
  uint8_t* dst = src + 4096;
  std::memset(src, 0xAB, 64);
  auto got = env.Run(qp, {bad, env.Write(101, 4096, src, 64), env.Read(102, 0, dst, 8)}, 3);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].status, want) << CompletionStatusName(got[0].status);
  EXPECT_EQ(got[0].wr_id, bad.wr_id);
  EXPECT_THAT(got[1], Field(&Completion::status, kFlushed));
  EXPECT_THAT(got[2], Field(&Completion::status, kFlushed));
  EXPECT_TRUE(qp.in_error());
  // Posting to a queue pair in the error state flushes too.
  EXPECT_THAT(Statuses(env.Run(qp, {env.Read(103, 0, dst, 8)}, 1)), ElementsAre(kFlushed));
  // The target still serves others; the flushed WRITE did not execute, or
  // executed whole.
  auto word = env.ReadWord(4096);
  ASSERT_TRUE(word.ok()) << word.status();
  if (later_may_execute) {
    EXPECT_TRUE(*word == 0 || *word == 0xABABABABABABABABu) << *word;
  } else {
    EXPECT_EQ(*word, 0u);
  }
}

TEST_P(ConformanceTest, BadRkeyIsRemoteAccessError) {
  auto qp = Connect();
  ASSERT_NE(qp, nullptr);
  WorkRequest bad = env_->Read(7, 0, local(0), 8);
  bad.rkey ^= 0x5A5A5A5A;
  ExpectErrorThenFlush(*env_, *qp, bad, CompletionStatus::kRemoteAccessError);
}

TEST_P(ConformanceTest, OutOfBoundsIsRemoteAccessError) {
  auto qp = Connect();
  ASSERT_NE(qp, nullptr);
  // Straddles the end of the region.
  WorkRequest bad = env_->Read(7, env_->remote_mem->size() - 4, local(0), 8);
  ExpectErrorThenFlush(*env_, *qp, bad, CompletionStatus::kRemoteAccessError);
}

TEST_P(ConformanceTest, MissingAccessRightIsRemoteAccessError) {
  AlignedBuffer ro(4096);
  auto region = env_->target->RegisterMemory(ro.data(), ro.size(), kRemoteRead);
  ASSERT_TRUE(region.ok()) << region.status();
  auto qp = Connect();
  ASSERT_NE(qp, nullptr);
  // READ is granted...
  EXPECT_THAT(Statuses(env_->Run(*qp,
                                 {WorkRequest::Read(1, local(0), 8, env_->local->lkey(),
                                                    (*region)->remote_base(), (*region)->rkey())},
                                 1)),
              ElementsAre(kSuccess));
  // ...WRITE is not.
  WorkRequest bad = WorkRequest::Write(7, local(0), 8, env_->local->lkey(),
                                       (*region)->remote_base(), (*region)->rkey());
  ExpectErrorThenFlush(*env_, *qp, bad, CompletionStatus::kRemoteAccessError);
}

TEST_P(ConformanceTest, AtomicWithoutAtomicRightIsRemoteAccessError) {
  AlignedBuffer rw(4096);
  auto region =
      env_->target->RegisterMemory(rw.data(), rw.size(), kLocalWrite | kRemoteRead | kRemoteWrite);
  ASSERT_TRUE(region.ok()) << region.status();
  auto qp = Connect();
  ASSERT_NE(qp, nullptr);
  WorkRequest bad = WorkRequest::Cas(7, reinterpret_cast<uint64_t*>(local(0)), env_->local->lkey(),
                                     (*region)->remote_base(), (*region)->rkey(), 0, 1);
  ExpectErrorThenFlush(*env_, *qp, bad, CompletionStatus::kRemoteAccessError);
}

TEST_P(ConformanceTest, UnregisteredLocalBufferIsLocalProtectionError) {
  auto qp = Connect();
  ASSERT_NE(qp, nullptr);
  uint8_t stack_buffer[8];
  WorkRequest bad = env_->Read(7, 0, stack_buffer, 8);
  ExpectErrorThenFlush(*env_, *qp, bad, CompletionStatus::kLocalProtectionError,
                       /*later_may_execute=*/true);
}

TEST_P(ConformanceTest, DeregisteredRegionRefusesItsRkey) {
  AlignedBuffer mem(4096);
  auto region = env_->target->RegisterMemory(mem.data(), mem.size(), kAllAccess);
  ASSERT_TRUE(region.ok());
  const uint64_t base = (*region)->remote_base();
  const uint32_t rkey = (*region)->rkey();
  region->reset();
  auto qp = Connect();
  ASSERT_NE(qp, nullptr);
  auto got =
      env_->Run(*qp, {WorkRequest::Read(1, local(0), 8, env_->local->lkey(), base, rkey)}, 1);
  EXPECT_THAT(Statuses(got), ElementsAre(CompletionStatus::kRemoteAccessError));
}

TEST_P(ConformanceTest, RequestsOfOneQueuePairExecuteInOrder) {
  auto qp = Connect();
  ASSERT_NE(qp, nullptr);
  constexpr int kRounds = 32;
  std::vector<WorkRequest> batch;
  for (int i = 0; i < kRounds; ++i) {
    uint8_t* value = local(64 * i);
    std::memset(value, i + 1, 64);
    WorkRequest w = env_->Write(2 * i, 8192, value, 64);
    w.flags = 0;  // Unsignaled: only the READs report.
    batch.push_back(w);
    batch.push_back(env_->Read(2 * i + 1, 8192, local(65536 + 64 * i), 64));
  }
  auto got = env_->Run(*qp, batch, kRounds);
  ASSERT_EQ(got.size(), size_t{kRounds});
  EXPECT_THAT(got, Each(Field(&Completion::status, kSuccess)));
  for (int i = 0; i < kRounds; ++i) {
    EXPECT_EQ(got[i].wr_id, uint64_t(2 * i + 1));  // Completions in posting order.
    const uint8_t* seen = local(65536 + 64 * i);
    // Each READ sees exactly the WRITE posted just before it.
    EXPECT_TRUE(std::all_of(seen, seen + 64, [&](uint8_t b) { return b == i + 1; }))
        << "round " << i;
  }
}

TEST_P(ConformanceTest, InlineWriteCopiesAtPost) {
  auto qp = Connect();
  ASSERT_NE(qp, nullptr);
  uint8_t payload[32];
  std::memset(payload, 0x42, sizeof(payload));
  WorkRequest w = env_->Write(1, 16384, payload, sizeof(payload));
  w.flags |= kInline;
  w.lkey = 0;  // Inline data needs no registration.
  ASSERT_TRUE(qp->Post({w}).ok());
  std::memset(payload, 0, sizeof(payload));  // Reused at once.
  auto got = env_->Await(*qp, 1);
  ASSERT_THAT(Statuses(got), ElementsAre(kSuccess));
  EXPECT_EQ(*env_->ReadWord(16384), 0x4242424242424242u);
}

TEST_P(ConformanceTest, SendQueueOverflowIsRefusedWhole) {
  auto qp = Connect({.max_send_wr = 8});
  ASSERT_NE(qp, nullptr);
  std::vector<WorkRequest> nine;
  for (int i = 0; i < 9; ++i) nine.push_back(env_->Read(i, 0, local(64 * i), 8));
  EXPECT_TRUE(absl::IsResourceExhausted(qp->Post(nine)));
  nine.pop_back();
  EXPECT_EQ(env_->Run(*qp, nine, 8).size(), 8u);
  EXPECT_FALSE(qp->in_error());
}

TEST_P(ConformanceTest, MalformedRequestsAreRejectedAtPost) {
  auto qp = Connect({.max_inline_data = 16});
  ASSERT_NE(qp, nullptr);
  WorkRequest cas = env_->Cas(1, 0, reinterpret_cast<uint64_t*>(local(0)), 0, 1);
  cas.length = 4;
  EXPECT_TRUE(absl::IsInvalidArgument(qp->Post({cas})));
  WorkRequest big_inline = env_->Write(2, 0, local(0), 64);
  big_inline.flags |= kInline;
  EXPECT_TRUE(absl::IsInvalidArgument(qp->Post({big_inline})));
  EXPECT_TRUE(
      absl::IsInvalidArgument(qp->Post({env_->Read(3, 0, local(0), kMaxMessageBytes + 1)})));
  // A misaligned atomic, refused whole with the valid request before it.
  EXPECT_TRUE(absl::IsInvalidArgument(
      qp->Post({env_->Read(4, 0, local(0), 8),
                env_->Cas(5, 1028, reinterpret_cast<uint64_t*>(local(8)), 0, 1)})));
  EXPECT_TRUE(absl::IsInvalidArgument(
      qp->Post({env_->Faa(6, 4, reinterpret_cast<uint64_t*>(local(8)), 1)})));
  EXPECT_FALSE(qp->in_error());
  EXPECT_EQ(qp->counters().doorbells, 0u);
}

TEST_P(ConformanceTest, CountersCountDoorbellsRequestsAndBytes) {
  auto qp = Connect();
  ASSERT_NE(qp, nullptr);
  auto* old = reinterpret_cast<uint64_t*>(local(0));
  ASSERT_EQ(env_->Run(*qp,
                      {env_->Read(1, 0, local(64), 100), env_->Write(2, 0, local(64), 28),
                       env_->Faa(3, 0, old, 1)},
                      3)
                .size(),
            3u);
  ASSERT_EQ(env_->Run(*qp, {env_->Cas(4, 0, old, 0, 1)}, 1).size(), 1u);
  QueuePairCounters c = qp->counters();
  EXPECT_EQ(c.doorbells, 2u);
  EXPECT_EQ(c.requests, 4u);
  EXPECT_EQ(c.bytes, 100u + 28u + 8u + 8u);
  EXPECT_EQ(c.error_completions, 0u);
}

TEST_P(ConformanceTest, DroppedConnectionGivesErrorCompletionsNotAHang) {
  auto qp = Connect();
  ASSERT_NE(qp, nullptr);
  std::vector<WorkRequest> batch;
  for (int i = 0; i < 64; ++i) batch.push_back(env_->Read(i, 0, local(0), 65536));
  ASSERT_TRUE(qp->Post(batch).ok());
  env_->listener.reset();  // Closes every connection it accepted.
  auto got = env_->Await(*qp, batch.size());
  // Each request completes exactly once: some may have finished before the
  // drop, the first one after it fails, the rest are flushed.
  ASSERT_EQ(got.size(), batch.size());
  auto first_error = std::find_if(got.begin(), got.end(),
                                  [](const Completion& c) { return c.status != kSuccess; });
  if (first_error != got.end()) {
    EXPECT_EQ(first_error->status, CompletionStatus::kRetryExceeded);
    EXPECT_TRUE(std::all_of(first_error + 1, got.end(),
                            [](const Completion& c) { return c.status == kFlushed; }));
  }
  // Whatever was still outstanding, the next post fails fast.
  auto after = env_->Run(*qp, {env_->Read(99, 0, local(0), 8)}, 1);
  ASSERT_EQ(after.size(), 1u);
  EXPECT_NE(after[0].status, kSuccess);
  EXPECT_TRUE(qp->in_error());
}

TEST_P(ConformanceTest, WrongTokenIsRefused) {
  Endpoint e = env_->listener->endpoint();
  e.token = "not-the-token";
  auto qp = env_->initiator->Connect(e);
  EXPECT_TRUE(absl::IsPermissionDenied(qp.status())) << qp.status();
}

// One listener serves many clients connecting at once, each with its own
// queue pair, and keeps serving them together.
TEST_P(ConformanceTest, ManyClientsConnectAtOnceAndAreServed) {
  constexpr int kClients = 16;
  constexpr uint64_t kWord = 1024;
  std::vector<std::unique_ptr<QueuePair>> qps(kClients);
  std::vector<absl::Status> connected(kClients);
  auto connect = [&](int i) {
    auto qp = env_->Connect();
    connected[i] = qp.status();
    if (qp.ok()) qps[i] = std::move(qp).value();
  };
  if (GetParam() == Backend::kSoftSim) {
    for (int i = 0; i < kClients; ++i) connect(i);  // One thread drives the simulation.
  } else {
    std::vector<std::thread> threads;
    for (int i = 0; i < kClients; ++i) threads.emplace_back(connect, i);
    for (auto& t : threads) t.join();
  }
  for (int i = 0; i < kClients; ++i) ASSERT_TRUE(connected[i].ok()) << i << ": " << connected[i];
  for (int i = 0; i < kClients; ++i) {
    ASSERT_TRUE(
        qps[i]->Post({env_->Faa(i, kWord, reinterpret_cast<uint64_t*>(local(64 * i)), 1)}).ok());
  }
  for (int i = 0; i < kClients; ++i) {
    EXPECT_THAT(Statuses(env_->Await(*qps[i], 1)), ElementsAre(kSuccess)) << i;
  }
  EXPECT_EQ(*env_->ReadWord(kWord), uint64_t{kClients});
}

// Once a request has completed (here: a later signaled request of the same
// queue pair has), its local buffer is the caller's again: what it holds
// afterwards never reaches the target, however the transport retransmitted.
TEST_P(ConformanceTest, CompletedWriteNeverReadsItsBufferAgain) {
  auto qp = Connect();
  ASSERT_NE(qp, nullptr);
  constexpr int kWrites = 300;
  constexpr uint32_t kBytes = 2048;  // Two packets at rxe's MTU.
  uint8_t* buf = local(0);
  uint8_t* sink = local(8192);
  auto pattern = [](int i) { return static_cast<uint8_t>(i * 7 + 1); };
  for (int i = 0; i < kWrites; ++i) {
    std::memset(buf, pattern(i), kBytes);
    WorkRequest w = env_->Write(2 * i, uint64_t{kBytes} * i, buf, kBytes);
    w.flags = 0;
    ASSERT_THAT(Statuses(env_->Run(*qp, {w, env_->Read(2 * i + 1, 0, sink, 8)}, 1)),
                ElementsAre(kSuccess));
    std::memset(buf, 0xEE, kBytes);  // Reused at once, as the KV client does.
  }
  for (int i = 0; i < kWrites; ++i) {
    uint8_t* back = local(65536);
    ASSERT_THAT(Statuses(env_->Run(*qp, {env_->Read(1, uint64_t{kBytes} * i, back, kBytes)}, 1)),
                ElementsAre(kSuccess));
    ASSERT_TRUE(std::all_of(back, back + kBytes, [&](uint8_t b) { return b == pattern(i); }))
        << "write " << i << " holds bytes written after it completed";
  }
}

// Likewise a completed READ's buffer: nothing lands in it afterwards, not
// even a response the transport had asked for twice. The buffer is
// refilled at once, as the KV client reuses scratch memory.
TEST_P(ConformanceTest, CompletedReadNeverWritesItsBufferAgain) {
  auto qp = Connect();
  ASSERT_NE(qp, nullptr);
  constexpr int kReads = 300;
  constexpr uint32_t kBytes = 2048;
  uint8_t* src = local(0);
  std::memset(src, 0x5A, kBytes);
  ASSERT_EQ(env_->Run(*qp, {env_->Write(1, 0, src, kBytes)}, 1).size(), 1u);
  uint8_t* buf = local(16384);
  for (int i = 0; i < kReads; ++i) {
    ASSERT_THAT(Statuses(env_->Run(*qp, {env_->Read(i, 0, buf, kBytes)}, 1)),
                ElementsAre(kSuccess));
    ASSERT_EQ(buf[kBytes - 1], 0x5A);
    std::memset(buf, static_cast<uint8_t>(i), kBytes);  // Reused at once.
    // Give a late response time to land before looking.
    ASSERT_THAT(Statuses(env_->Run(*qp, {env_->Read(kReads + i, 8, local(32768), 8)}, 1)),
                ElementsAre(kSuccess));
    ASSERT_TRUE(
        std::all_of(buf, buf + kBytes, [&](uint8_t b) { return b == static_cast<uint8_t>(i); }))
        << "read " << i << ": its buffer was written after it completed";
  }
}

// Several READs of one doorbell, of different places and sizes, each land
// in their own buffer and nowhere else: what the KV client's bucket and
// block reads rely on, retransmitted or not.
TEST_P(ConformanceTest, ReadsOfOneDoorbellLandInTheirOwnBuffers) {
  auto qp = Connect();
  ASSERT_NE(qp, nullptr);
  constexpr int kPlaces = 64;
  constexpr uint32_t kPlaceBytes = 4096;
  ASSERT_NO_FATAL_FAILURE(FillPlaces(*qp, kPlaces, kPlaceBytes));
  uint64_t rng = 12345;
  auto next = [&rng] { return (rng = rng * 6364136223846793005u + 1442695040888963407u) >> 33; };
  for (int round = 0; round < 200; ++round) {
    std::vector<WorkRequest> batch;
    std::vector<std::pair<int, uint32_t>> want;  // Place and size of each READ.
    for (int i = 0; i < 8; ++i) {
      const int place = static_cast<int>(next() % kPlaces);
      const uint32_t bytes = 64 * (1 + static_cast<uint32_t>(next() % 32));
      uint8_t* buf = local(65536 + kPlaceBytes * i);
      std::memset(buf, 0, kPlaceBytes);
      WorkRequest r = env_->Read(i, uint64_t{kPlaceBytes} * place, buf, bytes);
      r.flags = i == 7 ? kSignaled : 0;
      batch.push_back(r);
      want.emplace_back(place, bytes);
    }
    ASSERT_THAT(Statuses(env_->Run(*qp, batch, 1)), ElementsAre(kSuccess));
    for (int i = 0; i < 8; ++i) {
      const uint8_t* buf = local(65536 + kPlaceBytes * i);
      const auto [place, bytes] = want[i];
      ASSERT_TRUE(std::all_of(buf, buf + bytes, [&](uint8_t b) { return b == place + 1; }) &&
                  std::all_of(buf + bytes, buf + kPlaceBytes, [](uint8_t b) { return b == 0; }))
          << "round " << round << ", read " << i << " of place " << place << " (" << bytes
          << " bytes) holds " << int(buf[0]) << "..." << int(buf[bytes - 1]);
    }
  }
}

// The KV client's traffic in miniature: rounds of a WRITE, READs and a CAS,
// each round signaling only its last request, eight rounds in flight, and
// every buffer handed to another request as soon as its round completed.
// Each READ must hold exactly what it read and each CAS exactly the old
// value when its round completes: a response that lands late, or never,
// shows up as a wrong result. With RKV_TEST_LOSSY_NETWORK set (the rxe
// fault tests, under netem loss) the queue pair may fail instead; the test
// then reconnects, learns where the CAS words stand, and goes on.
TEST_P(ConformanceTest, PipelinedRoundsWithReusedBuffersGetTheirOwnResults) {
  constexpr int kPlaces = 64;
  constexpr uint32_t kPlaceBytes = 4096;
  constexpr uint64_t kWords = 512 << 10;  // CAS words, one per window slot.
  constexpr int kWindow = 8;
  constexpr int kRounds = 1500;
  constexpr int kBuffers = 128;  // Local buffers of kPlaceBytes, reused LIFO.
  const bool lossy = std::getenv("RKV_TEST_LOSSY_NETWORK") != nullptr;
  auto qp = Connect();
  ASSERT_NE(qp, nullptr);
  ASSERT_NO_FATAL_FAILURE(FillPlaces(*qp, kPlaces, kPlaceBytes));
  std::vector<uint8_t*> free_bufs;
  for (int i = 0; i < kBuffers; ++i) free_bufs.push_back(local(65536 + uint64_t{kPlaceBytes} * i));
  auto take = [&] {
    uint8_t* b = free_bufs.back();
    free_bufs.pop_back();
    return b;
  };
  auto give_back = [&](uint8_t* b) {
    std::memset(b, 0xEE, kPlaceBytes);  // Poisoned, and handed out again at once.
    free_bufs.push_back(b);
  };
  uint64_t rng = 99;
  auto next = [&rng] { return (rng = rng * 6364136223846793005u + 1442695040888963407u) >> 33; };
  struct Read {
    uint8_t* buf;
    int place;
    uint32_t bytes;
  };
  struct Round {
    std::vector<Read> reads;
    uint8_t* write_buf = nullptr;
    uint8_t* cas_buf = nullptr;  // The result word lies at a random offset in it.
    uint64_t* cas_result = nullptr;
    uint64_t cas_expect = 0;
  };
  std::vector<Round> rounds(kWindow);
  std::vector<uint64_t> word_value(kWindow, 0);
  // Under loss a connect or a lone READ may fail as well (a lost connect
  // request costs rdma_cm seconds): each is tried again, a bounded number
  // of times.
  const int attempts = lossy ? 10 : 1;
  auto read_word = [&](int slot) {
    absl::StatusOr<uint64_t> w = env_->ReadWord(kWords + 8 * slot);
    for (int a = 1; !w.ok() && a < attempts; ++a) w = env_->ReadWord(kWords + 8 * slot);
    return w;
  };
  std::deque<int> order;  // Window slots in posting order: completions come so.
  int posted = 0;         // Rounds posted and not lost to a failure.
  auto post = [&](int slot) {
    Round& r = rounds[slot];
    r = Round{};
    std::vector<WorkRequest> batch;
    r.write_buf = take();
    std::memset(r.write_buf, 0xC0 + slot, 1024);
    batch.push_back(env_->Write(slot, (kPlaces + slot) * uint64_t{kPlaceBytes}, r.write_buf, 1024));
    const int reads = 1 + static_cast<int>(next() % 3);
    for (int i = 0; i < reads; ++i) {
      Read rd{take(), static_cast<int>(next() % kPlaces),
              64 * (1 + static_cast<uint32_t>(next() % 48))};
      batch.push_back(env_->Read(slot, uint64_t{kPlaceBytes} * rd.place, rd.buf, rd.bytes));
      r.reads.push_back(rd);
    }
    r.cas_buf = take();
    r.cas_result = reinterpret_cast<uint64_t*>(r.cas_buf + 8 * (next() % (kPlaceBytes / 8)));
    r.cas_expect = word_value[slot];
    batch.push_back(
        env_->Cas(slot, kWords + 8 * slot, r.cas_result, r.cas_expect, r.cas_expect + 1));
    for (WorkRequest& w : batch) w.flags = 0;
    batch.back().flags = kSignaled;
    order.push_back(slot);
    posted++;
    return qp->Post(batch);
  };
  auto release = [&](int slot) {
    Round& r = rounds[slot];
    for (const Read& rd : r.reads) give_back(rd.buf);
    give_back(r.cas_buf);
    give_back(r.write_buf);
  };
  for (int slot = 0; slot < kWindow; ++slot) ASSERT_TRUE(post(slot).ok());
  int done = 0, failures = 0;
  std::deque<Completion> got;
  while (!order.empty()) {
    if (got.empty()) {
      std::vector<Completion> more = env_->Await(*qp, 1, absl::Seconds(30));
      ASSERT_FALSE(more.empty()) << "no completion in 30 s";
      got.insert(got.end(), more.begin(), more.end());
    }
    const Completion c = got.front();
    got.pop_front();
    if (c.status != kSuccess) {
      ASSERT_TRUE(lossy) << "round " << done << ": " << CompletionStatusName(c.status);
      ASSERT_LT(++failures, 100) << "the queue pair keeps failing";
      // Everything in flight is gone, executed or not: start afresh from
      // where the words stand.
      qp.reset();
      got.clear();
      posted -= static_cast<int>(order.size());
      for (int slot : order) release(slot);
      order.clear();
      absl::StatusOr<std::unique_ptr<QueuePair>> fresh = env_->Connect();
      for (int a = 1; !fresh.ok() && a < attempts; ++a) fresh = env_->Connect();
      ASSERT_TRUE(fresh.ok()) << fresh.status();
      qp = *std::move(fresh);
      for (int slot = 0; slot < kWindow; ++slot) {
        absl::StatusOr<uint64_t> w = read_word(slot);
        ASSERT_TRUE(w.ok()) << w.status();
        word_value[slot] = *w;
        if (posted < kRounds) {
          ASSERT_TRUE(post(slot).ok());
        }
      }
      continue;
    }
    const int slot = order.front();
    order.pop_front();
    ASSERT_EQ(c.wr_id, uint64_t(slot));
    Round& r = rounds[slot];
    ASSERT_EQ(*r.cas_result, r.cas_expect) << "round " << done << ": the CAS's old value";
    word_value[slot]++;
    for (const Read& rd : r.reads) {
      ASSERT_TRUE(
          std::all_of(rd.buf, rd.buf + rd.bytes, [&](uint8_t b) { return b == rd.place + 1; }))
          << "round " << done << ": a READ of place " << rd.place << " (" << rd.bytes
          << " bytes) holds " << int(rd.buf[0]) << "..." << int(rd.buf[rd.bytes - 1]);
    }
    release(slot);
    done++;
    if (posted < kRounds) {
      ASSERT_TRUE(post(slot).ok());
    }
  }
  EXPECT_EQ(done, kRounds);
  for (int slot = 0; slot < kWindow; ++slot) {
    absl::StatusOr<uint64_t> w = read_word(slot);
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_EQ(*w, word_value[slot]) << "word " << slot;
  }
  RecordProperty("queue_pair_failures", failures);
}

TEST_P(ConformanceTest, CompletionChannelWakesForEachOfItsQueuePairs) {
  // Four queue pairs on one channel; a request completing on any of them
  // ends a wait on the channel, whether it completed before the wait began
  // or during it.
  auto channel = env_->initiator->NewCompletionChannel();
  ASSERT_TRUE(channel.ok()) << channel.status();
  std::vector<std::unique_ptr<QueuePair>> qps;
  for (int i = 0; i < 4; ++i) {
    qps.push_back(Connect({.channel = *channel}));
    ASSERT_NE(qps.back(), nullptr);
  }
  for (int round = 0; round < 8; ++round) {
    QueuePair& qp = *qps[round % 4];
    ASSERT_TRUE(qp.Post({env_->Read(round, 0, local(), 8)}).ok());
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    std::vector<Completion> got;
    while (got.empty() && absl::Now() < deadline) {
      (*channel)->Wait(deadline - absl::Now());
      for (auto& q : qps) {
        Completion c;
        if (q->Poll({&c, 1}) == 1) got.push_back(c);
      }
    }
    ASSERT_EQ(got.size(), 1u) << "round " << round << ": the channel never woke";
    EXPECT_EQ(got[0].wr_id, uint64_t(round));
    EXPECT_EQ(got[0].status, kSuccess);
  }
  // A queue pair's own Wait still works on a channel's queue pair.
  ASSERT_TRUE(qps[0]->Post({env_->Read(99, 0, local(), 8)}).ok());
  EXPECT_EQ(env_->Await(*qps[0], 1).size(), 1u);
}

// The contract counts every completion since the previous Wait returned,
// also one that a Poll has taken meanwhile: a client polls, finds a round
// done, posts the next one later, and meanwhile waits on the channel.
TEST_P(ConformanceTest, CompletionChannelWaitEndsForACompletionAPollTook) {
  auto channel = env_->initiator->NewCompletionChannel();
  ASSERT_TRUE(channel.ok()) << channel.status();
  auto qp = Connect({.channel = *channel});
  ASSERT_NE(qp, nullptr);
  (*channel)->Wait(absl::ZeroDuration());
  ASSERT_TRUE(qp->Post({env_->Read(1, 0, local(), 8)}).ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  Completion c;
  size_t n = 0;
  while (n == 0 && absl::Now() < deadline) n = qp->Poll({&c, 1});
  ASSERT_EQ(n, 1u);
  const absl::Time t0 = absl::Now();
  (*channel)->Wait(absl::Seconds(20));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
}

// Far more bytes each way than socket buffers hold, in one doorbell. A
// target that cannot write READ responses stops reading requests; a
// transport whose Post waited to write its requests without reading those
// responses would never return from Post.
TEST_P(ConformanceTest, DeepBatchOfLargeTransfersCompletes) {
  EnvOptions o;
  o.sim.chunk_bytes = 1 << 20;  // Simulated 64-byte steps would take long.
  auto env = FabricTestEnv::Create(GetParam(), o);
  if (!env.ok()) RKV_SKIP_OR_FAIL(env.status());
  env_ = std::move(env).value();
  auto qp = Connect();
  ASSERT_NE(qp, nullptr);

  constexpr uint32_t kBytes = 4 << 20;
  constexpr int kPairs = 12;  // 48 MiB written and 48 MiB read back.
  ASSERT_GE(env_->local_mem->size(), 2 * size_t{kBytes});
  ASSERT_GE(env_->remote_mem->size(), 2 * size_t{kBytes});
  uint8_t* src = local(0);
  uint8_t* dst = local(kBytes);
  for (uint32_t i = 0; i < kBytes; ++i) src[i] = static_cast<uint8_t>(i * 13 + i / 4096);
  std::memset(dst, 0, kBytes);
  std::vector<WorkRequest> batch;
  for (int i = 0; i < kPairs; ++i) {
    const uint64_t remote_offset = uint64_t{kBytes} * (i % 2);
    batch.push_back(env_->Write(2 * i, remote_offset, src, kBytes));
    batch.push_back(env_->Read(2 * i + 1, remote_offset, dst, kBytes));
  }

  // A deadlock would hang rather than fail: bound it.
  std::atomic<bool> finished{false};
  std::thread watchdog([&finished] {
    const absl::Time deadline = absl::Now() + absl::Seconds(120);
    while (!finished.load() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(20));
    if (!finished.load()) {
      std::fprintf(stderr, "DeepBatchOfLargeTransfersCompletes: no progress in 120 s\n");
      std::abort();
    }
  });
  const absl::Status posted = qp->Post(batch);
  std::vector<Completion> got;
  if (posted.ok()) got = env_->Await(*qp, batch.size(), absl::Seconds(100));
  finished.store(true);
  watchdog.join();

  ASSERT_TRUE(posted.ok()) << posted;
  ASSERT_EQ(got.size(), batch.size());
  EXPECT_THAT(Statuses(got), Each(kSuccess));
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].wr_id, i);
  EXPECT_EQ(std::memcmp(src, dst, kBytes), 0);
}

// Completions a Post queues at once (here: flushed, in the error state)
// come with no response from the target; a thread already waiting, on the
// queue pair or on its channel, must still wake for them.
TEST_P(ConformanceTest, WaitersOnAnotherThreadWakeForCompletionsQueuedByPost) {
  auto channel = env_->initiator->NewCompletionChannel();
  ASSERT_TRUE(channel.ok()) << channel.status();
  auto qp = Connect({.channel = *channel});
  ASSERT_NE(qp, nullptr);
  WorkRequest bad = env_->Read(1, 0, local(0), 8);
  bad.rkey ^= 0x5A5A5A5A;
  ASSERT_EQ(env_->Run(*qp, {bad}, 1).size(), 1u);
  ASSERT_TRUE(qp->in_error());

  for (const bool on_channel : {false, true}) {
    SCOPED_TRACE(on_channel ? "waiting on the channel" : "waiting on the queue pair");
    std::atomic<bool> waiting{false};
    absl::Time woke = absl::InfiniteFuture();
    std::vector<Completion> got;
    std::thread waiter([&] {
      const absl::Time deadline = absl::Now() + absl::Seconds(20);
      Completion c;
      while (got.empty() && absl::Now() < deadline) {
        waiting.store(true);
        if (on_channel) {
          (*channel)->Wait(deadline - absl::Now());
          if (qp->Poll({&c, 1}) == 1) got.push_back(c);
        } else if (qp->Wait({&c, 1}, deadline - absl::Now()) == 1) {
          got.push_back(c);
        }
      }
      woke = absl::Now();
    });
    while (!waiting.load()) absl::SleepFor(absl::Milliseconds(1));
    absl::SleepFor(absl::Milliseconds(50));  // Let the waiter fall asleep.
    const absl::Time posted = absl::Now();
    ASSERT_TRUE(qp->Post({env_->Read(2, 0, local(0), 8)}).ok());
    waiter.join();
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].status, kFlushed);
    // Promptly, not at the end of the waiter's 20 s timeout, nor at some
    // periodic recheck.
    EXPECT_LT(woke - posted, absl::Milliseconds(500));
  }
}

TEST_P(ConformanceTest, ConnectWhereNobodyListensIsUnavailable) {
  const Endpoint e = env_->listener->endpoint();
  env_->listener.reset();
  auto qp = env_->initiator->Connect(e);
  EXPECT_TRUE(absl::IsUnavailable(qp.status())) << qp.status();
}

// What a fenced queue pair's requests complete with: kRetryExceeded or
// kFlushed, as when the target is lost.
bool FencedStatus(CompletionStatus s) {
  return s == CompletionStatus::kRetryExceeded || s == kFlushed;
}

TEST_P(ConformanceTest, FenceCutsOffEveryQueuePairOfThePeerAndNoOther) {
  constexpr uint64_t kPeer = 7, kOtherPeer = 8;
  auto busy = ConnectAs(kPeer);  // Has requests in flight when fenced.
  auto idle = ConnectAs(kPeer);  // Has none.
  auto other = ConnectAs(kOtherPeer);
  auto anonymous = Connect();  // Names no peer.
  ASSERT_TRUE(busy && idle && other && anonymous);
  for (QueuePair* qp : {busy.get(), idle.get(), other.get(), anonymous.get()}) {
    ASSERT_THAT(Statuses(env_->Run(*qp, {env_->Read(1, 0, local(0), 8)}, 1)),
                ElementsAre(kSuccess));
  }
  std::vector<WorkRequest> batch;
  for (int i = 0; i < 64; ++i) batch.push_back(env_->Read(i, 0, local(0), 65536));
  ASSERT_TRUE(busy->Post(batch).ok());
  ASSERT_TRUE(env_->listener->Fence(kPeer).ok());

  // Each request completes once: those that ran before the fence succeed,
  // the first one after fails, the rest are flushed.
  auto got = env_->Await(*busy, batch.size());
  ASSERT_EQ(got.size(), batch.size());
  auto first_error = std::find_if(got.begin(), got.end(),
                                  [](const Completion& c) { return c.status != kSuccess; });
  if (first_error != got.end()) {
    EXPECT_TRUE(FencedStatus(first_error->status)) << CompletionStatusName(first_error->status);
    EXPECT_TRUE(std::all_of(first_error + 1, got.end(),
                            [](const Completion& c) { return c.status == kFlushed; }));
  }
  for (QueuePair* qp : {busy.get(), idle.get()}) {
    auto after = env_->Run(*qp, {env_->Read(99, 0, local(0), 8)}, 1);
    ASSERT_EQ(after.size(), 1u);
    EXPECT_TRUE(FencedStatus(after[0].status)) << CompletionStatusName(after[0].status);
    EXPECT_TRUE(qp->in_error());
  }

  // The others are served as before: READ, WRITE and CAS.
  auto* old = reinterpret_cast<uint64_t*>(local(64));
  for (QueuePair* qp : {other.get(), anonymous.get()}) {
    const uint64_t word = qp == other.get() ? 4096 : 4104;
    ASSERT_THAT(Statuses(env_->Run(*qp,
                                   {WriteWord(1, word, 41), env_->Cas(2, word, old, 41, 42),
                                    env_->Read(3, word, local(128), 8)},
                                   3)),
                ElementsAre(kSuccess, kSuccess, kSuccess));
    EXPECT_EQ(*old, 41u);
    EXPECT_EQ(*reinterpret_cast<uint64_t*>(local(128)), 42u);
    EXPECT_FALSE(qp->in_error());
  }
}

TEST_P(ConformanceTest, NothingAFencedPeerPostsAfterTheFenceChangesMemory) {
  constexpr uint64_t kPeer = 11, kOtherPeer = 12;
  constexpr uint64_t kWritten = 8192, kSwapped = 8200;
  auto fenced = ConnectAs(kPeer);
  auto other = ConnectAs(kOtherPeer);
  ASSERT_TRUE(fenced && other);
  // Before the fence the peer could change both words.
  auto* old = reinterpret_cast<uint64_t*>(local(64));
  ASSERT_THAT(Statuses(env_->Run(
                  *fenced, {WriteWord(1, kWritten, 5), env_->Cas(2, kSwapped, old, 0, 5)}, 2)),
              ElementsAre(kSuccess, kSuccess));
  ASSERT_TRUE(env_->listener->Fence(kPeer).ok());

  ASSERT_TRUE(fenced
                  ->Post({WriteWord(3, kWritten, 0xBAD), env_->Cas(4, kSwapped, old, 5, 0xBAD),
                          env_->Faa(5, kSwapped, old, 1), WriteWord(6, kSwapped, 0xBAD)})
                  .ok());
  auto got = env_->Await(*fenced, 4);
  ASSERT_EQ(got.size(), 4u);
  for (const Completion& c : got) {
    EXPECT_TRUE(FencedStatus(c.status)) << c.wr_id << ": " << CompletionStatusName(c.status);
  }
  EXPECT_TRUE(fenced->in_error());
  EXPECT_EQ(ReadThrough(*other, kWritten), 5u);
  EXPECT_EQ(ReadThrough(*other, kSwapped), 5u);
}

// The peer keeps writing, as a paused client that resumes would: what it
// had in flight when the fence came either landed before Fence returned or
// never does.
TEST_P(ConformanceTest, RequestsInFlightAtTheFenceNeverLandAfterIt) {
  constexpr uint64_t kPeer = 13, kOtherPeer = 14;
  constexpr uint64_t kWord = 12288;
  auto fenced = ConnectAs(kPeer);
  auto other = ConnectAs(kOtherPeer);
  ASSERT_TRUE(fenced && other);
  if (GetParam() == Backend::kSoftSim) {
    // One thread drives the simulation: the fence comes between scheduler
    // steps, with WRITEs of many chunks under way.
    constexpr uint32_t kBytes = 4096;
    std::vector<WorkRequest> batch;
    for (int i = 0; i < 32; ++i) {
      std::memset(local(kBytes * i), i + 1, kBytes);
      batch.push_back(env_->Write(i, kWord, local(kBytes * i), kBytes));
    }
    ASSERT_TRUE(fenced->Post(batch).ok());
    Completion c[32];
    size_t done = 0;
    for (int i = 0; i < 40; ++i) done += fenced->Poll(absl::MakeSpan(c));  // Some steps run.
    ASSERT_TRUE(env_->listener->Fence(kPeer).ok());
    const std::string at_fence(reinterpret_cast<char*>(env_->remote_mem->data() + kWord), kBytes);
    done += env_->Await(*fenced, batch.size() - done).size();
    EXPECT_EQ(done, batch.size());
    env_->sim->RunUntilIdle();
    EXPECT_EQ(std::string(reinterpret_cast<char*>(env_->remote_mem->data() + kWord), kBytes),
              at_fence);
    EXPECT_TRUE(fenced->in_error());
    return;
  }
  // A writer thread keeps 4 rounds of 16 WRITEs of ascending values to one
  // word in flight until its queue pair fails.
  absl::Notification writing;
  std::atomic<uint64_t> successes{0};
  std::atomic<bool> failed{false};
  std::thread writer([&] {
    constexpr int kRoundsInFlight = 4;
    constexpr int kPerRound = 16;
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    auto* values = reinterpret_cast<uint64_t*>(local(0));
    for (uint64_t round = 0; absl::Now() < deadline; ++round) {
      std::vector<WorkRequest> batch;
      for (int i = 0; i < kPerRound; ++i) {
        values[i] = round * kPerRound + i + 1;
        WorkRequest w = env_->Write(i, kWord, reinterpret_cast<uint8_t*>(&values[i]), 8);
        w.flags = i == kPerRound - 1 ? kSignaled | kInline : kInline;  // Copied at Post.
        batch.push_back(w);
      }
      if (!fenced->Post(batch).ok()) break;
      if (round + 1 < kRoundsInFlight) continue;
      Completion c;
      if (fenced->Wait({&c, 1}, absl::Seconds(10)) == 0) break;
      if (c.status != kSuccess) {
        failed = true;
        break;
      }
      if (successes.fetch_add(1) + 1 == 20) writing.Notify();
    }
    if (!writing.HasBeenNotified()) writing.Notify();
  });
  ASSERT_TRUE(writing.WaitForNotificationWithTimeout(absl::Seconds(20)));
  EXPECT_GE(successes.load(), 20u) << "the writer stopped early";
  ASSERT_TRUE(env_->listener->Fence(kPeer).ok());
  const uint64_t at_fence = ReadThrough(*other, kWord);
  writer.join();  // It stops at its first error completion.
  EXPECT_TRUE(failed.load());
  EXPECT_TRUE(fenced->in_error());
  EXPECT_EQ(ReadThrough(*other, kWord), at_fence);
  EXPECT_NE(at_fence, 0u);
}

TEST_P(ConformanceTest, ConnectNamingAFencedPeerIsRefused) {
  constexpr uint64_t kPeer = 21;
  auto before = ConnectAs(kPeer);
  ASSERT_NE(before, nullptr);
  ASSERT_TRUE(env_->listener->Fence(kPeer).ok());
  auto again = env_->ConnectAs(kPeer);
  EXPECT_TRUE(absl::IsFailedPrecondition(again.status())) << again.status();
  EXPECT_THAT(std::string(again.status().message()), ::testing::HasSubstr("fenced"));
  // A new session of the same client, and queue pairs that name no peer,
  // are served.
  for (uint64_t peer_id : {kPeer + 1, uint64_t{0}}) {
    auto fresh = ConnectAs(peer_id);
    ASSERT_NE(fresh, nullptr);
    EXPECT_THAT(Statuses(env_->Run(*fresh, {env_->Read(1, 0, local(0), 8)}, 1)),
                ElementsAre(kSuccess));
  }
}

TEST_P(ConformanceTest, FencingAPeerNeverSeenRefusesItLater) {
  constexpr uint64_t kPeer = 31;
  ASSERT_TRUE(env_->listener->Fence(kPeer).ok());
  ASSERT_TRUE(env_->listener->Fence(kPeer).ok());  // Again: still fine.
  auto qp = env_->ConnectAs(kPeer);
  EXPECT_TRUE(absl::IsFailedPrecondition(qp.status())) << qp.status();
  EXPECT_TRUE(absl::IsInvalidArgument(env_->listener->Fence(0)));
  auto anonymous = Connect();
  ASSERT_NE(anonymous, nullptr);
  EXPECT_THAT(Statuses(env_->Run(*anonymous, {env_->Read(1, 0, local(0), 8)}, 1)),
              ElementsAre(kSuccess));
}

// The departures the listener collects until its peers' ids show `want`
// times in all, 10 s at most: the target learns of a close in its own time.
std::vector<uint64_t> AwaitDepartures(Listener& listener, uint64_t id, size_t want) {
  std::vector<uint64_t> all;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (static_cast<size_t>(std::count(all.begin(), all.end(), id)) < want &&
         absl::Now() < deadline) {
    for (uint64_t d : listener.TakeDeparted()) all.push_back(d);
    absl::SleepFor(absl::Milliseconds(5));
  }
  return all;
}

// How a server learns at once that a client process is gone: the listener
// names a peer once its last queue pair closed, and only then.
TEST_P(ConformanceTest, ListenerNamesAPeerOnceItsLastQueuePairClosed) {
  constexpr uint64_t kPeer = 41, kStaying = 42;
  auto first = ConnectAs(kPeer);
  auto second = ConnectAs(kPeer);
  auto staying = ConnectAs(kStaying);
  auto anonymous = Connect();
  ASSERT_TRUE(first && second && staying && anonymous);
  for (QueuePair* qp : {first.get(), second.get(), staying.get(), anonymous.get()}) {
    ASSERT_THAT(Statuses(env_->Run(*qp, {env_->Read(1, 0, local(0), 8)}, 1)),
                ElementsAre(kSuccess));
  }
  first.reset();
  anonymous.reset();
  second.reset();
  // Named once, for its last queue pair; never a peer still connected, nor
  // queue pairs that name no peer.
  std::vector<uint64_t> gone = AwaitDepartures(*env_->listener, kPeer, 1);
  absl::SleepFor(absl::Milliseconds(100));  // A second naming would come now.
  for (uint64_t d : env_->listener->TakeDeparted()) gone.push_back(d);
  EXPECT_THAT(gone, ElementsAre(kPeer));

  // Back, and gone again.
  auto again = ConnectAs(kPeer);
  ASSERT_NE(again, nullptr);
  ASSERT_THAT(Statuses(env_->Run(*again, {env_->Read(1, 0, local(0), 8)}, 1)),
              ElementsAre(kSuccess));
  EXPECT_THAT(env_->listener->TakeDeparted(), ::testing::IsEmpty());
  again.reset();
  EXPECT_THAT(AwaitDepartures(*env_->listener, kPeer, 1), ElementsAre(kPeer));
  EXPECT_THAT(Statuses(env_->Run(*staying, {env_->Read(1, 0, local(0), 8)}, 1)),
              ElementsAre(kSuccess));
}

// The listener's counters, once `done` holds of them (10 s at most): the
// target counts a close in its own time.
ListenerCounters AwaitCounters(const Listener& listener,
                               const std::function<bool(const ListenerCounters&)>& done) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  ListenerCounters c = listener.counters();
  while (!done(c) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
    c = listener.counters();
  }
  return c;
}

// What a server's metrics show of its fabric: the queue pairs it accepted
// and the requests it executed for them, by kind, with their bytes. A
// refused request is not counted. On verbs the NIC serves requests without
// the target's CPU: only the connections are counted there.
TEST_P(ConformanceTest, ListenerCountsConnectionsAndTheRequestsItServed) {
  ListenerCounters c = env_->listener->counters();
  EXPECT_EQ(c.connections, 0u);
  EXPECT_EQ(c.connections_accepted, 0u);
  auto first = ConnectAs(7);
  auto second = Connect();
  ASSERT_TRUE(first && second);
  constexpr int kWrites = 5, kReads = 3, kCas = 2, kFaa = 4;
  constexpr uint32_t kWriteBytes = 100, kReadBytes = 1000;
  std::vector<WorkRequest> batch;
  uint64_t id = 0;
  for (int i = 0; i < kWrites; ++i)
    batch.push_back(env_->Write(++id, 4096 * i, local(0), kWriteBytes));
  for (int i = 0; i < kReads; ++i) {
    batch.push_back(env_->Read(++id, 4096 * i, local(65536 * (i + 1)), kReadBytes));
  }
  ASSERT_THAT(Statuses(env_->Run(*first, batch, batch.size())), Each(kSuccess));
  batch.clear();
  auto* old = reinterpret_cast<uint64_t*>(local(1 << 20));
  for (int i = 0; i < kCas; ++i) batch.push_back(env_->Cas(++id, 64 * i, old + i, 0, 1));
  for (int i = 0; i < kFaa; ++i) batch.push_back(env_->Faa(++id, 512, old + 8 + i, 1));
  ASSERT_THAT(Statuses(env_->Run(*second, batch, batch.size())), Each(kSuccess));
  EXPECT_EQ(env_->listener->counters().connections, 2u);
  // Straddles the end of the region: refused, so it served nothing.
  auto refused = Connect();
  ASSERT_NE(refused, nullptr);
  const WorkRequest bad = env_->Read(++id, env_->remote_mem->size() - 4, local(0), 8);
  ASSERT_THAT(Statuses(env_->Run(*refused, {bad}, 1)),
              ElementsAre(CompletionStatus::kRemoteAccessError));

  c = env_->listener->counters();
  EXPECT_EQ(c.connections_accepted, 3u);
  const bool served_here = env_->backend != Backend::kVerbs;
  EXPECT_EQ(c.writes, served_here ? kWrites : 0u);
  EXPECT_EQ(c.write_bytes, served_here ? kWrites * kWriteBytes : 0u);
  EXPECT_EQ(c.reads, served_here ? kReads : 0u);
  EXPECT_EQ(c.read_bytes, served_here ? kReads * kReadBytes : 0u);
  EXPECT_EQ(c.compare_and_swaps, served_here ? kCas : 0u);
  EXPECT_EQ(c.fetch_and_adds, served_here ? kFaa : 0u);

  // The queue pairs open come and go (the target may close the one in
  // error itself); what was accepted and served stays.
  refused.reset();
  c = AwaitCounters(*env_->listener, [](const ListenerCounters& c) { return c.connections <= 2; });
  EXPECT_EQ(c.connections, 2u);
  first.reset();
  c = AwaitCounters(*env_->listener, [](const ListenerCounters& c) { return c.connections <= 1; });
  EXPECT_EQ(c.connections, 1u);
  second.reset();
  c = AwaitCounters(*env_->listener, [](const ListenerCounters& c) { return c.connections == 0; });
  EXPECT_EQ(c.connections, 0u);
  EXPECT_EQ(c.connections_accepted, 3u);
  EXPECT_EQ(c.writes, served_here ? kWrites : 0u);
  EXPECT_EQ(c.fetch_and_adds, served_here ? kFaa : 0u);
}

std::string ParamName(const ::testing::TestParamInfo<Backend>& info) {
  return BackendName(info.param);
}

INSTANTIATE_TEST_SUITE_P(Backends, ConformanceTest,
                         ::testing::Values(Backend::kSoftTcp, Backend::kSoftTcpBusyPoll,
                                           Backend::kSoftSim, Backend::kVerbs),
                         ParamName);

}  // namespace
}  // namespace rkv::fabric::testing
