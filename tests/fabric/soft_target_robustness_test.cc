// The soft target's port faces whatever connects to it: garbage and
// malformed frames close that connection, and well-formed peers keep being
// served.
#include <sys/socket.h>

#include <cstring>
#include <string>

#include "absl/strings/numbers.h"
#include "common/fabric/soft_wire.h"
#include "common/random.h"
#include "common/socket.h"
#include "gtest/gtest.h"
#include "tests/fabric/fabric_test_env.h"

namespace rkv::fabric::testing {
namespace {

class SoftTargetRobustnessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto env = FabricTestEnv::Create(Backend::kSoftTcp);
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

  std::unique_ptr<FabricTestEnv> env_;
  std::unique_ptr<QueuePair> good_;
  HostPort where_;
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
  h.request = {Opcode::kCas64, 8, env_->remote->remote_base() + 1028, env_->remote->rkey(), 0,
               ~uint64_t{0}};
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
  f[4] = 16;                                  // ...with 16 it is not.
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

}  // namespace
}  // namespace rkv::fabric::testing
