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

using Change = Verifier::Change;

absl::Status Ok() { return absl::OkStatus(); }
absl::Status Unknown() { return absl::UnavailableError("outcome unknown"); }
absl::Status Exists() { return absl::AlreadyExistsError(""); }
absl::Status Absent() { return absl::NotFoundError(""); }
absl::StatusOr<std::string> NotFound() { return absl::NotFoundError(""); }

// One change of user1 from start to end, nothing overlapping it; what the
// verifier says of the change's answer.
absl::Status Do(Verifier& v, Change change, const absl::Status& result, uint64_t* version = nullptr) {
  auto t = v.StartWrite(1, change);
  if (version != nullptr) *version = t.version;
  return v.FinishWrite(1, "user1", t, result);
}

TEST(VerifierTest, AfterAnAcknowledgedDeleteAReadFindsNothing) {
  Verifier v(kNonce);
  uint64_t put;
  ASSERT_TRUE(Do(v, Change::kPut, Ok(), &put).ok());
  ASSERT_TRUE(Do(v, Change::kDelete, Ok()).ok());
  auto r = v.StartRead(1);
  EXPECT_TRUE(v.Check(1, "user1", r, NotFound()).ok());
  EXPECT_FALSE(v.Check(1, "user1", r, Value(put)).ok());  // The deleted value.
  // A later write may show once it is under way.
  auto w = v.StartWrite(1);
  EXPECT_TRUE(v.Check(1, "user1", r, Value(w.version)).ok());
}

TEST(VerifierTest, AfterAnAcknowledgedInsertTheValueMustBeThere) {
  Verifier v(kNonce);
  uint64_t put, insert;
  ASSERT_TRUE(Do(v, Change::kPut, Ok(), &put).ok());
  ASSERT_TRUE(Do(v, Change::kDelete, Ok()).ok());
  ASSERT_TRUE(Do(v, Change::kInsert, Ok(), &insert).ok());
  auto r = v.StartRead(1);
  EXPECT_TRUE(v.Check(1, "user1", r, Value(insert)).ok());
  EXPECT_FALSE(v.Check(1, "user1", r, NotFound()).ok());  // Lost.
  EXPECT_FALSE(v.Check(1, "user1", r, Value(put)).ok());
}

TEST(VerifierTest, AChangeOfUnknownOutcomeMayOrMayNotHaveHappened) {
  Verifier v(kNonce);
  uint64_t put, insert;
  ASSERT_TRUE(Do(v, Change::kPut, Ok(), &put).ok());
  ASSERT_TRUE(Do(v, Change::kDelete, Unknown()).ok());
  auto r = v.StartRead(1);
  EXPECT_TRUE(v.Check(1, "user1", r, NotFound()).ok());
  EXPECT_TRUE(v.Check(1, "user1", r, Value(put)).ok());
  // Either way, an insert or a delete may find the key absent or present.
  auto t = v.StartWrite(1, Change::kInsert);
  EXPECT_TRUE(v.FinishWrite(1, "user1", t, Exists()).ok());
  t = v.StartWrite(1, Change::kDelete);
  EXPECT_TRUE(v.FinishWrite(1, "user1", t, Absent()).ok());

  ASSERT_TRUE(Do(v, Change::kDelete, Ok()).ok());
  ASSERT_TRUE(Do(v, Change::kInsert, Unknown(), &insert).ok());
  r = v.StartRead(1);
  EXPECT_TRUE(v.Check(1, "user1", r, NotFound()).ok());
  EXPECT_TRUE(v.Check(1, "user1", r, Value(insert)).ok());
  EXPECT_FALSE(v.Check(1, "user1", r, Value(put)).ok());  // Deleted before.
}

TEST(VerifierTest, InsertAnswersSayWhetherTheKeyWasThere) {
  Verifier v(kNonce);
  // Before this run changes the key, anything goes.
  EXPECT_TRUE(Do(v, Change::kInsert, Exists()).ok());
  uint64_t insert;
  EXPECT_TRUE(Do(v, Change::kInsert, Ok(), &insert).ok());
  // Present for sure: OK would have overwritten the acknowledged insert.
  EXPECT_FALSE(Do(v, Change::kInsert, Ok()).ok());
  uint64_t refused;
  EXPECT_TRUE(Do(v, Change::kInsert, Exists(), &refused).ok());
  // An insert answered AlreadyExists wrote nothing.
  auto r = v.StartRead(1);
  EXPECT_FALSE(v.Check(1, "user1", r, Value(refused)).ok());
  EXPECT_FALSE(v.Check(1, "user1", r, Value(insert)).ok());  // The wrong OK above superseded it.
  ASSERT_TRUE(Do(v, Change::kDelete, Ok()).ok());
  // Absent for sure.
  EXPECT_FALSE(Do(v, Change::kInsert, Exists()).ok());
  EXPECT_TRUE(Do(v, Change::kInsert, Ok()).ok());
}

TEST(VerifierTest, DeleteAnswersSayWhetherTheKeyWasThere) {
  Verifier v(kNonce);
  ASSERT_TRUE(Do(v, Change::kPut, Ok()).ok());
  EXPECT_FALSE(Do(v, Change::kDelete, Absent()).ok());  // The put was acknowledged.
  EXPECT_TRUE(Do(v, Change::kDelete, Ok()).ok());
  EXPECT_TRUE(Do(v, Change::kDelete, Absent()).ok());
  EXPECT_FALSE(Do(v, Change::kDelete, Ok()).ok());  // Nothing was there to delete.
}

TEST(VerifierTest, OverlappingDeletesMayBothFindTheKeyOrNot) {
  Verifier v(kNonce);
  ASSERT_TRUE(Do(v, Change::kPut, Ok()).ok());
  auto d1 = v.StartWrite(1, Change::kDelete);
  auto d2 = v.StartWrite(1, Change::kDelete);
  EXPECT_TRUE(v.FinishWrite(1, "user1", d1, Ok()).ok());
  EXPECT_TRUE(v.FinishWrite(1, "user1", d2, Absent()).ok());  // After d1.
  // One that answered NotFound cannot be what made the key absent.
  auto p = v.StartWrite(1, Change::kPut);
  auto d3 = v.StartWrite(1, Change::kDelete);
  v.FinishWrite(1, p, true);
  auto r = v.StartRead(1);
  EXPECT_TRUE(v.FinishWrite(1, "user1", d3, Absent()).ok());  // Before p.
  EXPECT_FALSE(v.Check(1, "user1", r, NotFound()).ok());
  EXPECT_TRUE(v.Check(1, "user1", r, Value(p.version)).ok());
}

TEST(VerifierTest, AReadThatOverlappedADeleteMayFindNothingAfterLaterWrites) {
  Verifier v(kNonce);
  ASSERT_TRUE(Do(v, Change::kPut, Ok()).ok());
  auto r = v.StartRead(1);
  ASSERT_TRUE(Do(v, Change::kDelete, Ok()).ok());
  uint64_t put;
  ASSERT_TRUE(Do(v, Change::kPut, Ok(), &put).ok());
  ASSERT_TRUE(Do(v, Change::kPut, Ok()).ok());  // Supersedes the delete and the put.
  EXPECT_TRUE(v.Check(1, "user1", r, NotFound()).ok());
  EXPECT_TRUE(v.Check(1, "user1", r, Value(put)).ok());
  EXPECT_FALSE(v.Check(1, "user1", v.StartRead(1), NotFound()).ok());
  EXPECT_FALSE(v.Check(1, "user1", v.StartRead(1), Value(put)).ok());
}

}  // namespace
}  // namespace rkv::bench
