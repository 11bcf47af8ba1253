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

TEST(SoftWireTest, HelloRoundTripsAndRejectsOversizedTokens) {
  const std::string hello = EncodeHello({kVersion, "secret"});
  Hello h;
  auto len = DecodeHelloFixed(hello.substr(0, kHelloFixedBytes), &h);
  ASSERT_TRUE(len.ok());
  EXPECT_EQ(*len, 6u);
  EXPECT_EQ(hello.substr(kHelloFixedBytes), "secret");
  std::string big = EncodeHello({kVersion, std::string(kMaxTokenBytes + 1, 't')});
  EXPECT_FALSE(DecodeHelloFixed(big.substr(0, kHelloFixedBytes), &h).ok());
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
