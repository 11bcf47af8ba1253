#include "common/fabric/soft/soft_wire.h"

#include <string>

#include "common/random.h"
#include "gtest/gtest.h"

namespace rkv::fabric::wire {
namespace {

TEST(SoftWireTest, RequestHeaderRoundTrips) {
  RequestHeader h;
  h.request = {Opcode::kCas64, 8, 0x7F00DEADBEEF, 0xCAFEBABE, 17, 42};
  uint8_t raw[kRequestHeaderBytes];
  EncodeRequestHeader(h, raw);
  auto back = DecodeRequestHeader({reinterpret_cast<char*>(raw), sizeof(raw)});
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->request.opcode, Opcode::kCas64);
  EXPECT_EQ(back->request.length, 8u);
  EXPECT_EQ(back->request.remote_addr, 0x7F00DEADBEEFu);
  EXPECT_EQ(back->request.rkey, 0xCAFEBABEu);
  EXPECT_EQ(back->request.compare_add, 17u);
  EXPECT_EQ(back->request.swap, 42u);
}

TEST(SoftWireTest, ResponseHeaderRoundTrips) {
  ResponseHeader h{CompletionStatus::kRemoteAccessError, 0, 99};
  uint8_t raw[kResponseHeaderBytes];
  EncodeResponseHeader(h, raw);
  auto back = DecodeResponseHeader({reinterpret_cast<char*>(raw), sizeof(raw)});
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->status, CompletionStatus::kRemoteAccessError);
  EXPECT_EQ(back->value, 99u);
}

TEST(SoftWireTest, HelloCarriesThePeerIdAndTheToken) {
  const std::string hello = EncodeHello({kVersion, "secret", 0x1122334455667788});
  Hello h;
  auto rest = DecodeHelloFixed(hello.substr(0, kHelloFixedBytes), &h);
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_EQ(h.version, kVersion);
  ASSERT_EQ(*rest, kHelloPeerIdBytes + 6);
  ASSERT_EQ(hello.size(), kHelloFixedBytes + *rest);
  ASSERT_TRUE(DecodeHelloRest(hello.substr(kHelloFixedBytes), &h).ok());
  EXPECT_EQ(h.peer_id, 0x1122334455667788u);
  EXPECT_EQ(h.token, "secret");
  // No token, no peer: the peer id is still there.
  const std::string bare = EncodeHello({kVersion, "", 0});
  ASSERT_EQ(*DecodeHelloFixed(bare.substr(0, kHelloFixedBytes), &h), kHelloPeerIdBytes);
  ASSERT_TRUE(DecodeHelloRest(bare.substr(kHelloFixedBytes), &h).ok());
  EXPECT_EQ(h.peer_id, 0u);
  EXPECT_EQ(h.token, "");
}

TEST(SoftWireTest, HelloRejectsOversizedTokensAndShortRests) {
  Hello h;
  std::string big = EncodeHello({kVersion, std::string(kMaxTokenBytes + 1, 't')});
  EXPECT_FALSE(DecodeHelloFixed(big.substr(0, kHelloFixedBytes), &h).ok());
  std::string most = EncodeHello({kVersion, std::string(kMaxTokenBytes, 't')});
  EXPECT_TRUE(DecodeHelloFixed(most.substr(0, kHelloFixedBytes), &h).ok());
  EXPECT_FALSE(DecodeHelloRest("1234567", &h).ok());  // Shorter than a peer id.
}

// A version 2 Hello (magic, version, token length, token) says in its fixed
// part how many bytes follow, as every version does, so a target reads it
// whole and answers kBadVersion (soft_target_robustness_test checks the
// answer).
TEST(SoftWireTest, OlderHelloIsReadWholeAndIsNotThisVersion) {
  std::string v2("RKVF", 4);
  v2 += std::string("\x02\x00\x06\x00", 4);
  v2 += "secret";
  Hello h;
  auto rest = DecodeHelloFixed(v2.substr(0, kHelloFixedBytes), &h);
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_EQ(h.version, 2);
  EXPECT_NE(h.version, kVersion);
  EXPECT_EQ(*rest, 6u);
  EXPECT_EQ(kHelloFixedBytes + *rest, v2.size());
}

TEST(SoftWireTest, HelloReplyRoundTripsEveryStatus) {
  for (HelloStatus status :
       {HelloStatus::kOk, HelloStatus::kBadVersion, HelloStatus::kBadToken, HelloStatus::kFenced}) {
    auto back = DecodeHelloReply(EncodeHelloReply(status));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, status);
  }
  std::string unknown = EncodeHelloReply(HelloStatus::kOk);
  unknown[4] = 4;
  EXPECT_FALSE(DecodeHelloReply(unknown).ok());
}

// Random bytes never crash a decoder, and what decodes is well-formed.
TEST(SoftWireTest, RandomBytesDecodeSafely) {
  Rng rng(7);
  int accepted = 0;
  for (int i = 0; i < 200000; ++i) {
    char raw[kRequestHeaderBytes];
    for (char& c : raw) c = static_cast<char>(rng.Next());
    // Half the time make the shallow fields plausible so deeper checks run.
    if (rng.Uniform(2)) {
      raw[0] = static_cast<char>(0xA5);
      raw[1] = static_cast<char>(rng.Uniform(5));
      raw[2] = raw[3] = 0;
      raw[6] = raw[7] = 0;    // length < 64 KiB
      raw[22] = raw[23] = 0;  // delay < 64 ms
    }
    auto h = DecodeRequestHeader({raw, sizeof(raw)});
    if (!h.ok()) continue;
    accepted++;
    EXPECT_LE(static_cast<int>(h->request.opcode), static_cast<int>(Opcode::kFaa64));
    EXPECT_LE(h->request.length, kMaxMessageBytes);
  }
  EXPECT_GT(accepted, 0);
  EXPECT_FALSE(DecodeRequestHeader("short").ok());
  EXPECT_FALSE(DecodeResponseHeader("").ok());
  EXPECT_FALSE(DecodeHelloReply("12345678").ok());
}

}  // namespace
}  // namespace rkv::fabric::wire
