// --verify's rules: what a read may return given the writes around it.
#include "bench/kvbench/verifier.h"

#include "gtest/gtest.h"

namespace rkv::bench {
namespace {

constexpr uint64_t kNonce = 0xfeedface;

absl::StatusOr<std::string> Value(uint64_t version, uint64_t nonce = kNonce) {
  return EncodeValue("user1", nonce, version, 100);
}

TEST(ValueTest, RoundTripsAndCatchesDamage) {
  const std::string v = EncodeValue("user42", kNonce, 7, 1000);
  EXPECT_EQ(v.size(), 1000u);
  auto d = DecodeValue(v);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->key, "user42");
  EXPECT_EQ(d->nonce, kNonce);
  EXPECT_EQ(d->version, 7u);
  for (size_t at : {size_t{0}, size_t{10}, size_t{500}, size_t{999}}) {
    std::string bad = v;
    bad[at] ^= 1;
    auto b = DecodeValue(bad);
    EXPECT_TRUE(!b.ok() || b->key != "user42" || b->version != 7) << at;
  }
  EXPECT_FALSE(DecodeValue(v.substr(0, 600)).ok() && DecodeValue(v.substr(0, 600))->version != 7);
  EXPECT_FALSE(DecodeValue("garbage").ok());
  // A value shorter than its header grows to hold it.
  EXPECT_TRUE(DecodeValue(EncodeValue("user1", 1, 2, 1)).ok());
}

TEST(VerifierTest, SequentialWritesMustBeSeen) {
  Verifier v(kNonce);
  auto w1 = v.StartWrite(1);
  v.FinishWrite(1, w1, true);
  auto w2 = v.StartWrite(1);
  v.FinishWrite(1, w2, true);
  auto r = v.StartRead(1);
  EXPECT_TRUE(v.Check(1, "user1", r, Value(w2.version)).ok());
  EXPECT_FALSE(v.Check(1, "user1", r, Value(w1.version)).ok());  // Overwritten before the read.
  EXPECT_FALSE(v.Check(1, "user1", r, absl::NotFoundError("")).ok());
  EXPECT_FALSE(v.Check(1, "user1", r, Value(w2.version, kNonce + 1)).ok());
  EXPECT_FALSE(v.Check(1, "user1", r, Value(w2.version + 1)).ok());  // Never written.
  EXPECT_FALSE(v.Check(1, "user1", r, EncodeValue("user2", kNonce, w2.version, 100)).ok());
}

TEST(VerifierTest, OverlappingWritesMayLandInEitherOrder) {
  Verifier v(kNonce);
  auto w1 = v.StartWrite(1);
  auto w2 = v.StartWrite(1);  // Overlaps w1.
  v.FinishWrite(1, w2, true);
  v.FinishWrite(1, w1, true);
  auto r = v.StartRead(1);
  EXPECT_TRUE(v.Check(1, "user1", r, Value(w1.version)).ok());
  EXPECT_TRUE(v.Check(1, "user1", r, Value(w2.version)).ok());
  // A write that started after both finished supersedes both.
  auto w3 = v.StartWrite(1);
  v.FinishWrite(1, w3, true);
  r = v.StartRead(1);
  EXPECT_FALSE(v.Check(1, "user1", r, Value(w1.version)).ok());
  EXPECT_FALSE(v.Check(1, "user1", r, Value(w2.version)).ok());
  EXPECT_TRUE(v.Check(1, "user1", r, Value(w3.version)).ok());
  // A write still in flight when the read ends may already show.
  auto w4 = v.StartWrite(1);
  EXPECT_TRUE(v.Check(1, "user1", r, Value(w4.version)).ok());
}

TEST(VerifierTest, BeforeThisRunWritesAnythingOfTheKeyGoes) {
  Verifier v(kNonce);
  auto r = v.StartRead(5);
  EXPECT_TRUE(v.Check(5, "user5", r, absl::NotFoundError("")).ok());
  EXPECT_TRUE(v.Check(5, "user5", r, EncodeValue("user5", 1234, 99, 100)).ok());
  EXPECT_FALSE(v.Check(5, "user5", r, EncodeValue("user6", 1234, 99, 100)).ok());
  EXPECT_FALSE(v.Check(5, "user5", r, absl::UnavailableError("down")).ok());
  // A failed write does not raise the floor, but a later one that saw it
  // finish does.
  auto w1 = v.StartWrite(5);
  v.FinishWrite(5, w1, false);
  r = v.StartRead(5);
  EXPECT_TRUE(v.Check(5, "user5", r, absl::NotFoundError("")).ok());
  auto w2 = v.StartWrite(5);
  v.FinishWrite(5, w2, true);
  r = v.StartRead(5);
  EXPECT_FALSE(v.Check(5, "user5", r, EncodeValue("user5", kNonce, w1.version, 100)).ok());
}

}  // namespace
}  // namespace rkv::bench
