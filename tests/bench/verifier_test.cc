// --verify's rules: what a read may return given the writes around it.
#include "bench/kvbench/verifier.h"

#include "client/protocol/outcome.h"
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
  // A failed write does not make the key's earlier contents go; an
  // acknowledged one does.
  auto w1 = v.StartWrite(5);
  v.FinishWrite(5, w1, false);
  r = v.StartRead(5);
  EXPECT_TRUE(v.Check(5, "user5", r, absl::NotFoundError("")).ok());
  EXPECT_TRUE(v.Check(5, "user5", r, EncodeValue("user5", 1234, 99, 100)).ok());
  auto w2 = v.StartWrite(5);
  v.FinishWrite(5, w2, true);
  r = v.StartRead(5);
  EXPECT_FALSE(v.Check(5, "user5", r, absl::NotFoundError("")).ok());
  EXPECT_FALSE(v.Check(5, "user5", r, EncodeValue("user5", 1234, 99, 100)).ok());
  // The failed write's outcome is unknown: it may still take effect.
  EXPECT_TRUE(v.Check(5, "user5", r, EncodeValue("user5", kNonce, w1.version, 100)).ok());
}

using Change = Verifier::Change;

absl::Status Ok() { return absl::OkStatus(); }
// Failed after its CAS went out: it may take effect, now or later.
absl::Status Unknown() {
  return client_internal::WithUnknownOutcome(absl::UnavailableError("connection failed"));
}
// Failed before anything went out: it changed nothing.
absl::Status Failed() { return absl::UnavailableError("connection failed"); }
absl::Status Exists() { return absl::AlreadyExistsError(""); }
absl::Status Absent() { return absl::NotFoundError(""); }
absl::StatusOr<std::string> NotFound() { return absl::NotFoundError(""); }

// One change of user1 from start to end, nothing overlapping it; what the
// verifier says of the change's answer.
absl::Status Do(Verifier& v, Change change, const absl::Status& result,
                uint64_t* version = nullptr) {
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

// A change of unknown outcome may take effect long after its call returned
// (a claim it left pending is committed by the next writer of the key that
// finds it), after later acknowledged changes: its version lingers.
TEST(VerifierTest, AFailedPutMayShowAfterLaterAcknowledgedChanges) {
  Verifier v(kNonce);
  uint64_t first, failed, last;
  ASSERT_TRUE(Do(v, Change::kPut, Ok(), &first).ok());
  ASSERT_TRUE(Do(v, Change::kPut, Unknown(), &failed).ok());
  ASSERT_TRUE(Do(v, Change::kPut, Ok(), &last).ok());
  ASSERT_TRUE(Do(v, Change::kDelete, Ok()).ok());
  auto r = v.StartRead(1);
  EXPECT_TRUE(v.Check(1, "user1", r, Value(failed)).ok());
  EXPECT_TRUE(v.Check(1, "user1", r, NotFound()).ok());
  EXPECT_FALSE(v.Check(1, "user1", r, Value(first)).ok());
  EXPECT_FALSE(v.Check(1, "user1", r, Value(last)).ok());
  // And again after more changes, in answers and in a read-back.
  ASSERT_TRUE(Do(v, Change::kInsert, Ok(), &last).ok());
  ASSERT_TRUE(Do(v, Change::kDelete, Ok()).ok());
  EXPECT_TRUE(Do(v, Change::kDelete, Ok()).ok());  // It came back, and this removed it.
  r = v.StartRead(1);
  EXPECT_TRUE(v.Check(1, "user1", r, Value(failed)).ok());
  EXPECT_FALSE(v.Check(1, "user1", r, Value(last)).ok());
  // A failed insert lingers the same way.
  uint64_t insert;
  ASSERT_TRUE(Do(v, Change::kInsert, Unknown(), &insert).ok());
  ASSERT_TRUE(Do(v, Change::kPut, Ok()).ok());
  EXPECT_TRUE(v.Check(1, "user1", v.StartRead(1), Value(insert)).ok());
}

TEST(VerifierTest, AnInsertFindsAKeyAfterItsDeleteOnlyIfAFailedWriteOfItLingers) {
  Verifier v(kNonce);
  // Key 1: a put of unknown outcome, then an acknowledged put and delete.
  ASSERT_TRUE(Do(v, Change::kPut, Ok()).ok());
  ASSERT_TRUE(Do(v, Change::kPut, Unknown()).ok());
  ASSERT_TRUE(Do(v, Change::kDelete, Ok()).ok());
  EXPECT_TRUE(Do(v, Change::kInsert, Exists()).ok());
  EXPECT_TRUE(Do(v, Change::kDelete, Ok()).ok());
  EXPECT_TRUE(Do(v, Change::kInsert, Ok()).ok());

  // Key 2: the same without the failed put.
  auto change = [&v](Change c, const absl::Status& result) {
    auto t = v.StartWrite(2, c);
    return v.FinishWrite(2, "user2", t, result);
  };
  ASSERT_TRUE(change(Change::kPut, Ok()).ok());
  ASSERT_TRUE(change(Change::kDelete, Ok()).ok());
  EXPECT_FALSE(change(Change::kInsert, Exists()).ok());
  EXPECT_FALSE(change(Change::kDelete, Ok()).ok());
  // A put that failed before anything went out changed nothing.
  ASSERT_TRUE(change(Change::kPut, Failed()).ok());
  EXPECT_FALSE(change(Change::kInsert, Exists()).ok());
  // Nor do failed inserts and deletes of unknown outcome make the key present.
  ASSERT_TRUE(change(Change::kDelete, Unknown()).ok());
  EXPECT_FALSE(change(Change::kInsert, Exists()).ok());
}

TEST(VerifierTest, AnOverwrittenVersionStaysGoneWhateverLingers) {
  Verifier v(kNonce);
  uint64_t acked, put, insert, last;
  ASSERT_TRUE(Do(v, Change::kPut, Ok(), &acked).ok());
  ASSERT_TRUE(Do(v, Change::kPut, Unknown(), &put).ok());
  ASSERT_TRUE(Do(v, Change::kInsert, Unknown(), &insert).ok());
  ASSERT_TRUE(Do(v, Change::kPut, Ok(), &last).ok());
  ASSERT_TRUE(Do(v, Change::kPut, Ok()).ok());
  auto r = v.StartRead(1);
  EXPECT_TRUE(v.Check(1, "user1", r, Value(put)).ok());
  EXPECT_TRUE(v.Check(1, "user1", r, Value(insert)).ok());
  EXPECT_FALSE(v.Check(1, "user1", r, Value(acked)).ok());
  EXPECT_FALSE(v.Check(1, "user1", r, Value(last)).ok());
  EXPECT_FALSE(v.Check(1, "user1", r, NotFound()).ok());  // No delete lingers.
  EXPECT_FALSE(v.Check(1, "user1", r, Value(v.StartWrite(1).version + 1)).ok());  // Never issued.
  EXPECT_FALSE(v.Check(1, "user1", r, Value(put, kNonce + 1)).ok());
  EXPECT_FALSE(v.Check(1, "user1", r, EncodeValue("user2", kNonce, put, 100)).ok());
  std::string torn = *Value(put);
  torn[torn.size() - 1] ^= 1;
  EXPECT_FALSE(v.Check(1, "user1", r, torn).ok());
  // A failed delete lets the key be absent, not an overwritten value back.
  ASSERT_TRUE(Do(v, Change::kDelete, Unknown()).ok());
  EXPECT_FALSE(v.Check(1, "user1", v.StartRead(1), Value(acked)).ok());
}

TEST(VerifierTest, AFailedDeleteMayLeaveTheKeyAbsentLater) {
  Verifier v(kNonce);
  uint64_t put;
  ASSERT_TRUE(Do(v, Change::kPut, Ok()).ok());
  ASSERT_TRUE(Do(v, Change::kDelete, Unknown()).ok());
  ASSERT_TRUE(Do(v, Change::kPut, Ok()).ok());
  ASSERT_TRUE(Do(v, Change::kPut, Ok(), &put).ok());
  auto r = v.StartRead(1);
  EXPECT_TRUE(v.Check(1, "user1", r, NotFound()).ok());
  EXPECT_TRUE(v.Check(1, "user1", r, Value(put)).ok());
  EXPECT_TRUE(Do(v, Change::kDelete, Absent()).ok());
  EXPECT_TRUE(Do(v, Change::kInsert, Ok()).ok());

  // A delete that failed before anything went out did not happen.
  Verifier strict(kNonce);
  auto change = [&strict](Change c, const absl::Status& result) {
    auto t = strict.StartWrite(1, c);
    return strict.FinishWrite(1, "user1", t, result);
  };
  ASSERT_TRUE(change(Change::kPut, Ok()).ok());
  ASSERT_TRUE(change(Change::kDelete, Failed()).ok());
  EXPECT_FALSE(strict.Check(1, "user1", strict.StartRead(1), NotFound()).ok());
  EXPECT_FALSE(change(Change::kDelete, Absent()).ok());
  EXPECT_FALSE(change(Change::kInsert, Ok()).ok());
}

TEST(VerifierTest, AChangeThatFailedBeforeItsCasWentOutIsNeverRead) {
  Verifier v(kNonce);
  uint64_t acked, failed;
  ASSERT_TRUE(Do(v, Change::kPut, Ok(), &acked).ok());
  ASSERT_TRUE(Do(v, Change::kPut, Failed(), &failed).ok());
  auto r = v.StartRead(1);
  EXPECT_TRUE(v.Check(1, "user1", r, Value(acked)).ok());
  EXPECT_FALSE(v.Check(1, "user1", r, Value(failed)).ok());
  ASSERT_TRUE(Do(v, Change::kInsert, Failed(), &failed).ok());
  EXPECT_FALSE(v.Check(1, "user1", v.StartRead(1), Value(failed)).ok());
}

TEST(VerifierTest, AKeyRemembersItsNewestLingeringValues) {
  Verifier v(kNonce);
  std::vector<uint64_t> failed(36);
  ASSERT_TRUE(Do(v, Change::kPut, Ok()).ok());
  for (uint64_t& f : failed) ASSERT_TRUE(Do(v, Change::kPut, Unknown(), &f).ok());
  ASSERT_TRUE(Do(v, Change::kPut, Ok()).ok());
  auto r = v.StartRead(1);
  for (size_t i = 4; i < failed.size(); ++i) {
    EXPECT_TRUE(v.Check(1, "user1", r, Value(failed[i])).ok()) << i;
  }
  // The oldest are forgotten, and a read of one says so.
  absl::Status s = v.Check(1, "user1", r, Value(failed[3]));
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("4 older values of unknown outcome forgotten"),
            absl::string_view::npos)
      << s;
}

}  // namespace
}  // namespace rkv::bench
