// The soft target's port faces whatever connects to it: garbage and
// malformed frames close that connection, and well-formed peers keep being
// served. Its event loops serve many connections each: a peer that is slow,
// silent or stops reading holds up nobody else on its loop.
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "common/fabric/soft/soft_wire.h"
#include "common/random.h"
#include "common/socket.h"
#include "gtest/gtest.h"
#include "tests/common/fabric/fabric_test_env.h"

namespace rkv::fabric::testing {
namespace {

class SoftTargetRobustnessTest : public ::testing::Test {
 protected:
  explicit SoftTargetRobustnessTest(uint32_t soft_threads = 0) {
    options_.soft_threads = soft_threads;
  }

  void SetUp() override {
    auto env = FabricTestEnv::Create(Backend::kSoftTcp, options_);
    ASSERT_TRUE(env.ok()) << env.status();
    env_ = std::move(env).value();
    auto qp = env_->Connect();
    ASSERT_TRUE(qp.ok()) << qp.status();
    good_ = std::move(qp).value();
    auto hp = ParseHostPort(env_->listener->endpoint().address);
    ASSERT_TRUE(hp.ok());
    where_ = *hp;
  }

  Fd RawConnect() {
    auto fd = ConnectTcp(where_, absl::Seconds(5));
    EXPECT_TRUE(fd.ok()) << fd.status();
    EXPECT_TRUE(SetReceiveTimeout(fd->get(), absl::Seconds(10)).ok());
    return std::move(fd).value();
  }

  Fd HandshakenConnect() {
    Fd fd = RawConnect();
    const std::string hello = wire::EncodeHello({wire::kVersion, "conformance"});
    EXPECT_TRUE(WriteFull(fd.get(), hello.data(), hello.size()).ok());
    std::string reply(wire::kHelloReplyBytes, '\0');
    EXPECT_TRUE(ReadFull(fd.get(), reply.data(), reply.size()).ok());
    EXPECT_EQ(*wire::DecodeHelloReply(reply), wire::HelloStatus::kOk);
    return fd;
  }

  // The target closed the connection: reads see EOF (not a timeout).
  static void ExpectClosed(int fd) {
    char sink[256];
    for (;;) {
      ssize_t n = ::recv(fd, sink, sizeof(sink), 0);
      if (n > 0) continue;  // Drain a reply sent before closing.
      ASSERT_EQ(n, 0) << "connection still open: " << std::strerror(errno);
      return;
    }
  }

  void ExpectGoodPeerServed() {
    uint8_t* buf = env_->local_mem->data();
    auto got = env_->Run(*good_, {env_->Read(1, 0, buf, 64)}, 1);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].status, CompletionStatus::kSuccess);
  }

  static std::string ReadFrame(uint64_t remote_addr, uint32_t rkey, uint32_t length) {
    wire::RequestHeader h;
    h.request = {Opcode::kRead, length, remote_addr, rkey, 0, 0};
    uint8_t raw[wire::kRequestHeaderBytes];
    wire::EncodeRequestHeader(h, raw);
    return std::string(reinterpret_cast<char*>(raw), sizeof(raw));
  }

  EnvOptions options_;
  std::unique_ptr<FabricTestEnv> env_;
  std::unique_ptr<QueuePair> good_;
  HostPort where_;
};

// Every connection on one event loop, so that "the others" share the loop
// with the peer that misbehaves.
class OneLoopTest : public SoftTargetRobustnessTest {
 protected:
  OneLoopTest() : SoftTargetRobustnessTest(1) {}

  // Sends `frames` on a raw connection that never reads: requests for far
  // more response bytes than sockets buffer. Returns once the target has
  // started answering (the replies pile up unread).
  void StopReading(int fd, const std::string& frames) {
    size_t sent = 0;
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (sent < frames.size()) {
      ASSERT_LT(absl::Now(), deadline) << "the target stopped reading after " << sent << " of "
                                       << frames.size() << " request bytes";
      pollfd pfd{fd, POLLOUT, 0};
      ASSERT_GE(::poll(&pfd, 1, 100), 0);
      ssize_t n =
          ::send(fd, frames.data() + sent, frames.size() - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) sent += static_cast<size_t>(n);
    }
    for (;;) {
      int queued = 0;
      ASSERT_EQ(::ioctl(fd, FIONREAD, &queued), 0);
      if (queued >= (64 << 10)) return;
      ASSERT_LT(absl::Now(), deadline) << "no responses";
      pollfd pfd{fd, POLLIN, 0};
      ::poll(&pfd, 1, 100);
    }
  }
};

// Many queue pairs, more than loops: each is served, in order, and atomics
// from all of them add up.
class ThreeLoopsTest : public SoftTargetRobustnessTest {
 protected:
  ThreeLoopsTest() : SoftTargetRobustnessTest(3) {}
};

TEST_F(SoftTargetRobustnessTest, GarbageInsteadOfHelloClosesTheConnection) {
  Rng rng(1);
  for (int round = 0; round < 20; ++round) {
    Fd fd = RawConnect();
    std::string junk(16 + rng.Uniform(2000), '\0');
    for (char& c : junk) c = static_cast<char>(rng.Next());
    (void)WriteFull(fd.get(), junk.data(), junk.size());
    ExpectClosed(fd.get());
  }
  ExpectGoodPeerServed();
}

TEST_F(SoftTargetRobustnessTest, OlderVersionHelloIsAnsweredAndClosed) {
  // Version 2: magic, version, token length, token; no peer id.
  Fd fd = RawConnect();
  std::string hello("RKVF", 4);
  hello += std::string("\x02\x00\x0b\x00", 4);
  hello += "conformance";
  ASSERT_TRUE(WriteFull(fd.get(), hello.data(), hello.size()).ok());
  std::string reply(wire::kHelloReplyBytes, '\0');
  ASSERT_TRUE(ReadFull(fd.get(), reply.data(), reply.size()).ok());
  EXPECT_EQ(*wire::DecodeHelloReply(reply), wire::HelloStatus::kBadVersion);
  ExpectClosed(fd.get());
  ExpectGoodPeerServed();
}

TEST_F(SoftTargetRobustnessTest, FencedPeerHelloIsAnsweredAndClosed) {
  ASSERT_TRUE(env_->listener->Fence(5).ok());
  Fd fd = RawConnect();
  const std::string hello = wire::EncodeHello({wire::kVersion, "conformance", 5});
  ASSERT_TRUE(WriteFull(fd.get(), hello.data(), hello.size()).ok());
  std::string reply(wire::kHelloReplyBytes, '\0');
  ASSERT_TRUE(ReadFull(fd.get(), reply.data(), reply.size()).ok());
  EXPECT_EQ(*wire::DecodeHelloReply(reply), wire::HelloStatus::kFenced);
  ExpectClosed(fd.get());
  ExpectGoodPeerServed();
}

TEST_F(SoftTargetRobustnessTest, WrongTokenIsAnsweredAndClosed) {
  Fd fd = RawConnect();
  const std::string hello = wire::EncodeHello({wire::kVersion, "wrong"});
  ASSERT_TRUE(WriteFull(fd.get(), hello.data(), hello.size()).ok());
  std::string reply(wire::kHelloReplyBytes, '\0');
  ASSERT_TRUE(ReadFull(fd.get(), reply.data(), reply.size()).ok());
  EXPECT_EQ(*wire::DecodeHelloReply(reply), wire::HelloStatus::kBadToken);
  ExpectClosed(fd.get());
  ExpectGoodPeerServed();
}

// Initiators refuse misaligned atomics at Post; a peer that sends one anyway
// gets what a NIC answers, an invalid-request error, and the word is untouched.
TEST_F(SoftTargetRobustnessTest, MisalignedAtomicFromAPeerIsRemoteInvalidRequest) {
  Fd fd = HandshakenConnect();
  wire::RequestHeader h;
  h.request = {Opcode::kCas64,       8, env_->remote->remote_base() + 1028,
               env_->remote->rkey(), 0, ~uint64_t{0}};
  uint8_t raw[wire::kRequestHeaderBytes];
  wire::EncodeRequestHeader(h, raw);
  ASSERT_TRUE(WriteFull(fd.get(), raw, sizeof(raw)).ok());
  std::string reply(wire::kResponseHeaderBytes, '\0');
  ASSERT_TRUE(ReadFull(fd.get(), reply.data(), reply.size()).ok());
  auto response = wire::DecodeResponseHeader(reply);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, CompletionStatus::kRemoteInvalidRequest);
  EXPECT_EQ(*env_->ReadWord(1024), 0u);
  EXPECT_EQ(*env_->ReadWord(1032), 0u);
  ExpectGoodPeerServed();
}

TEST_F(SoftTargetRobustnessTest, MalformedRequestsCloseTheConnection) {
  const auto valid = [&] {
    wire::RequestHeader h;
    h.request = {Opcode::kRead, 8, env_->remote->remote_base(), env_->remote->rkey(), 0, 0};
    uint8_t raw[wire::kRequestHeaderBytes];
    wire::EncodeRequestHeader(h, raw);
    return std::string(reinterpret_cast<char*>(raw), sizeof(raw));
  };
  std::vector<std::string> frames;
  std::string f = valid();
  f[0] = 0x00;  // Bad magic.
  frames.push_back(f);
  f = valid();
  f[1] = 9;  // Unknown opcode.
  frames.push_back(f);
  f = valid();
  f[4] = f[5] = f[6] = f[7] = '\xFF';  // Length of 4 GiB.
  frames.push_back(f);
  f = valid();
  f[1] = static_cast<char>(Opcode::kCas64);  // Atomic with length 8 is fine...
  f[4] = 16;                                 // ...with 16 it is not.
  frames.push_back(f);
  frames.push_back(valid().substr(0, 20));  // Truncated, then the peer leaves.
  for (size_t i = 0; i < frames.size(); ++i) {
    SCOPED_TRACE(i);
    Fd fd = HandshakenConnect();
    ASSERT_TRUE(WriteFull(fd.get(), frames[i].data(), frames[i].size()).ok());
    if (i + 1 == frames.size()) ::shutdown(fd.get(), SHUT_WR);
    ExpectClosed(fd.get());
  }
  ExpectGoodPeerServed();
}

TEST_F(SoftTargetRobustnessTest, PeerThatVanishesMidWriteDoesNotDisturbOthers) {
  Fd fd = HandshakenConnect();
  wire::RequestHeader h;
  h.request = {Opcode::kWrite, 1 << 20, env_->remote->remote_base(), env_->remote->rkey(), 0, 0};
  uint8_t raw[wire::kRequestHeaderBytes];
  wire::EncodeRequestHeader(h, raw);
  ASSERT_TRUE(WriteFull(fd.get(), raw, sizeof(raw)).ok());
  ASSERT_TRUE(WriteFull(fd.get(), std::string(1000, 'x').data(), 1000).ok());
  fd.Reset();  // Gone, 1 MiB short.
  ExpectGoodPeerServed();
  // The half-sent WRITE never executed.
  EXPECT_EQ(*env_->ReadWord(0), 0u);
}

TEST_F(ThreeLoopsTest, ManyQueuePairsOnFewLoopsAreAllServed) {
  constexpr int kQueuePairs = 40;
  constexpr int kRounds = 8;
  constexpr uint32_t kBytes = 4096;
  constexpr uint64_t kCounter = 0;
  std::vector<std::unique_ptr<QueuePair>> qps;
  for (int i = 0; i < kQueuePairs; ++i) {
    auto qp = env_->Connect();
    ASSERT_TRUE(qp.ok()) << i << ": " << qp.status();
    qps.push_back(std::move(qp).value());
  }
  uint8_t* local = env_->local_mem->data();
  // Per queue pair: a source, a read-back buffer and FAA results.
  auto source = [&](int i) { return local + (2 * i) * kBytes; };
  auto back = [&](int i) { return local + (2 * i + 1) * kBytes; };
  auto olds = [&](int i) {
    return reinterpret_cast<uint64_t*>(local + 2 * kQueuePairs * kBytes + i * 8 * kRounds);
  };
  for (int i = 0; i < kQueuePairs; ++i) std::memset(source(i), 'a' + i % 26, kBytes);
  // All queue pairs post before any is awaited, so the loops serve them
  // side by side. A WRITE then a READ of the same range: order within a
  // queue pair.
  for (int i = 0; i < kQueuePairs; ++i) {
    const uint64_t offset = 4096 + static_cast<uint64_t>(i) * kBytes;
    std::vector<WorkRequest> batch;
    batch.push_back(env_->Write(1, offset, source(i), kBytes));
    for (int r = 0; r < kRounds; ++r) batch.push_back(env_->Faa(2, kCounter, olds(i) + r, 1));
    batch.push_back(env_->Read(3, offset, back(i), kBytes));
    for (WorkRequest& wr : batch) wr.flags |= kSignaled;
    ASSERT_TRUE(qps[i]->Post(batch).ok()) << i;
  }
  for (int i = 0; i < kQueuePairs; ++i) {
    auto got = env_->Await(*qps[i], kRounds + 2);
    ASSERT_EQ(got.size(), size_t{kRounds + 2}) << i;
    for (const Completion& c : got) EXPECT_EQ(c.status, CompletionStatus::kSuccess) << i;
    EXPECT_EQ(std::memcmp(back(i), source(i), kBytes), 0) << i;
    // A queue pair's FAAs execute in order: its old values increase.
    for (int r = 1; r < kRounds; ++r) EXPECT_LT(olds(i)[r - 1], olds(i)[r]) << i;
  }
  EXPECT_EQ(*env_->ReadWord(kCounter), uint64_t{kQueuePairs * kRounds});
}

TEST_F(OneLoopTest, PeerThatStopsReadingDoesNotStallOthers) {
  // 64 KiB READs of a patterned region: 256 MiB of responses, far beyond
  // what the sockets hold, so the target must hold back rather than block.
  constexpr uint32_t kBytes = 64 << 10;
  constexpr int kReads = 4096;
  uint8_t* remote = env_->remote_mem->data();
  for (size_t i = 0; i < env_->remote_mem->size(); ++i) remote[i] = static_cast<uint8_t>(i * 7);
  const uint64_t span = env_->remote_mem->size() / kBytes;
  std::string frames;
  for (int i = 0; i < kReads; ++i) {
    frames +=
        ReadFrame(env_->remote->remote_base() + (i % span) * kBytes, env_->remote->rkey(), kBytes);
  }
  Fd stuck = HandshakenConnect();
  StopReading(stuck.get(), frames);
  // The loop keeps serving the others: round trips and new handshakes.
  for (int i = 0; i < 20 && !HasFailure(); ++i) ExpectGoodPeerServed();
  auto fresh = env_->Connect();
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  auto got = env_->Run(**fresh, {env_->Read(1, 64, env_->local_mem->data(), 8)}, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, CompletionStatus::kSuccess);

  // Once the peer reads again, it gets every response, whole and in order.
  std::vector<uint8_t> payload(kBytes);
  for (int i = 0; i < kReads; ++i) {
    std::string header(wire::kResponseHeaderBytes, '\0');
    ASSERT_TRUE(ReadFull(stuck.get(), header.data(), header.size()).ok()) << i;
    auto h = wire::DecodeResponseHeader(header);
    ASSERT_TRUE(h.ok()) << h.status();
    ASSERT_EQ(h->status, CompletionStatus::kSuccess) << i;
    ASSERT_EQ(h->length, kBytes) << i;
    ASSERT_TRUE(ReadFull(stuck.get(), payload.data(), payload.size()).ok()) << i;
    ASSERT_EQ(std::memcmp(payload.data(), remote + (i % span) * kBytes, kBytes), 0) << i;
  }
}

TEST_F(OneLoopTest, DestroyingTheListenerClosesABackloggedConnection) {
  std::string frames;
  for (int i = 0; i < 1024; ++i) {
    frames += ReadFrame(env_->remote->remote_base(), env_->remote->rkey(), 1 << 20);
  }
  Fd stuck = HandshakenConnect();
  StopReading(stuck.get(), frames);
  env_->listener.reset();  // Returns although the loop holds unsent output.
  ExpectClosed(stuck.get());
  auto got = env_->Run(*good_, {env_->Read(1, 0, env_->local_mem->data(), 8)}, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_NE(got[0].status, CompletionStatus::kSuccess);  // Retry exceeded or flushed.
}

TEST_F(OneLoopTest, UnfinishedHandshakesDoNotStallOthersAndTimeOut) {
  const std::string hello = wire::EncodeHello({wire::kVersion, "conformance"});
  Fd silent = RawConnect();
  Fd half_fixed = RawConnect();
  ASSERT_TRUE(WriteFull(half_fixed.get(), hello.data(), 4).ok());
  Fd no_token = RawConnect();
  ASSERT_TRUE(WriteFull(no_token.get(), hello.data(), wire::kHelloFixedBytes).ok());
  // Others on the loop are served, new queue pairs included.
  ExpectGoodPeerServed();
  auto fresh = env_->Connect();
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  // The handshake timeout (5 s) closes the three; RawConnect's receive
  // timeout (10 s) bounds the wait.
  ExpectClosed(silent.get());
  ExpectClosed(half_fixed.get());
  ExpectClosed(no_token.get());
  ExpectGoodPeerServed();
}

TEST_F(OneLoopTest, LargeWriteArrivingInPiecesExecutesWholeAndStallsNobody) {
  constexpr uint32_t kBytes = 4 << 20;
  std::string payload(kBytes, '\0');
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<char>(1 + i % 251);
  Fd fd = HandshakenConnect();
  wire::RequestHeader h;
  h.request = {Opcode::kWrite, kBytes, env_->remote->remote_base(), env_->remote->rkey(), 0, 0};
  uint8_t raw[wire::kRequestHeaderBytes];
  wire::EncodeRequestHeader(h, raw);
  ASSERT_TRUE(WriteFull(fd.get(), raw, sizeof(raw)).ok());
  constexpr size_t kPiece = kBytes / 4;
  for (size_t at = 0; at < kBytes; at += kPiece) {
    // Between pieces the others are served, and the WRITE has not executed.
    ExpectGoodPeerServed();
    EXPECT_EQ(*env_->ReadWord(0), 0u);
    ASSERT_TRUE(WriteFull(fd.get(), payload.data() + at, kPiece).ok());
  }
  std::string reply(wire::kResponseHeaderBytes, '\0');
  ASSERT_TRUE(ReadFull(fd.get(), reply.data(), reply.size()).ok());
  auto response = wire::DecodeResponseHeader(reply);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, CompletionStatus::kSuccess);
  EXPECT_EQ(std::memcmp(env_->remote_mem->data(), payload.data(), kBytes), 0);
}

// A WRITE whose payload is still arriving when its peer is fenced never
// executes, not even in part: soft TCP executes a WRITE once it is whole.
TEST_F(OneLoopTest, WriteArrivingWhenItsPeerIsFencedNeverExecutes) {
  constexpr uint64_t kPeer = 9;
  constexpr uint32_t kBytes = 1 << 20;
  Fd fd = RawConnect();
  const std::string hello = wire::EncodeHello({wire::kVersion, "conformance", kPeer});
  ASSERT_TRUE(WriteFull(fd.get(), hello.data(), hello.size()).ok());
  std::string reply(wire::kHelloReplyBytes, '\0');
  ASSERT_TRUE(ReadFull(fd.get(), reply.data(), reply.size()).ok());
  ASSERT_EQ(*wire::DecodeHelloReply(reply), wire::HelloStatus::kOk);
  wire::RequestHeader h;
  h.request = {Opcode::kWrite, kBytes, env_->remote->remote_base(), env_->remote->rkey(), 0, 0};
  uint8_t raw[wire::kRequestHeaderBytes];
  wire::EncodeRequestHeader(h, raw);
  const std::string payload(kBytes, 'x');
  ASSERT_TRUE(WriteFull(fd.get(), raw, sizeof(raw)).ok());
  ASSERT_TRUE(WriteFull(fd.get(), payload.data(), kBytes / 2).ok());
  // Most likely taken in by now: the good peer, behind it on the same loop,
  // is served. Whether or not, it must never execute.
  ExpectGoodPeerServed();
  ASSERT_TRUE(env_->listener->Fence(kPeer).ok());
  (void)WriteFull(fd.get(), payload.data() + kBytes / 2, kBytes / 2);  // May find it closed.
  // Closed (FIN, or a reset for the bytes it never read), not a timeout.
  char sink[256];
  ssize_t n;
  do {
    n = ::recv(fd.get(), sink, sizeof(sink), 0);
  } while (n > 0);
  EXPECT_TRUE(n == 0 || errno == ECONNRESET) << std::strerror(errno);
  EXPECT_EQ(*env_->ReadWord(0), 0u);
  EXPECT_EQ(env_->remote_mem->data()[kBytes - 1], 0);
  ExpectGoodPeerServed();
}

TEST(SoftTargetOptionsTest, TooManyThreadsIsInvalidArgument) {
  auto fabric = OpenFabric({FabricKind::kSoft});
  ASSERT_TRUE(fabric.ok()) << fabric.status();
  ListenOptions options;
  options.soft_threads = 100000;
  auto listener = (*fabric)->Listen(options);
  EXPECT_TRUE(absl::IsInvalidArgument(listener.status())) << listener.status();
}

}  // namespace
}  // namespace rkv::fabric::testing
