#include "common/hash.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace rkv {
namespace {

// Published known answers: these functions are part of rkv's formats.
TEST(HashTest, Xxh64KnownAnswers) {
  EXPECT_EQ(XXH64("", 0), 0xEF46DB3751D8E999ULL);
  EXPECT_EQ(XXH64("a", 0), 0xD24EC4F1A98C6E5BULL);
  EXPECT_EQ(XXH64("abc", 0), 0x44BC2CF5AD770999ULL);
}

TEST(HashTest, Xxh64CoversEveryTailLengthAndSeed) {
  std::string s;
  for (int i = 0; i < 100; ++i) s.push_back(static_cast<char>(i));
  // Each prefix hashes differently, and the seed matters.
  for (size_t n = 1; n < s.size(); ++n) {
    EXPECT_NE(XXH64(s.substr(0, n)), XXH64(s.substr(0, n - 1))) << n;
    EXPECT_NE(XXH64(s.substr(0, n), 1), XXH64(s.substr(0, n), 2)) << n;
  }
}

TEST(HashTest, Fnv1a64KnownAnswers) {
  EXPECT_EQ(Fnv1a64(""), 0xCBF29CE484222325ULL);
  EXPECT_EQ(Fnv1a64("a"), 0xAF63DC4C8601EC8CULL);
  EXPECT_EQ(Fnv1a64("foobar"), 0x85944171F73967E8ULL);
}

TEST(HashTest, Crc32cKnownAnswersAndChaining) {
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(Crc32c(""), 0u);
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(Crc32c("6789", Crc32c("12345")), Crc32c("123456789"));
}

// Each implementation Crc32c may choose, on its own.
struct Crc32cImpl {
  const char* name;
  uint32_t (*fn)(absl::string_view, uint32_t);
};

std::vector<Crc32cImpl> Crc32cImpls() {
  std::vector<Crc32cImpl> impls = {{"portable", &hash_internal::Crc32cPortable}};
  if (hash_internal::Crc32cHardwareAvailable()) {
    impls.push_back({"hardware", &hash_internal::Crc32cHardware});
  }
  return impls;
}

std::string Bytes(std::initializer_list<int> bytes) {
  std::string s;
  for (int b : bytes) s.push_back(static_cast<char>(b));
  return s;
}

// RFC 3720 (iSCSI), appendix B.4, and the check value of the CRC catalogue.
TEST(HashTest, Crc32cImplementationsMatchPublishedVectors) {
  std::string ascending, descending;
  for (int i = 0; i < 32; ++i) {
    ascending.push_back(static_cast<char>(i));
    descending.push_back(static_cast<char>(31 - i));
  }
  const std::string read_pdu =
      Bytes({0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
             0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00,
             0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18, 0x28, 0x00, 0x00, 0x00,
             0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00});
  const struct {
    std::string data;
    uint32_t crc;
  } vectors[] = {
      {"123456789", 0xE3069283u},
      {std::string(32, '\0'), 0x8A9136AAu},
      {std::string(32, '\xff'), 0x62A8AB43u},
      {ascending, 0x46DD794Eu},
      {descending, 0x113FDB5Cu},
      {read_pdu, 0xD9963A56u},
  };
  for (const Crc32cImpl& impl : Crc32cImpls()) {
    SCOPED_TRACE(impl.name);
    for (const auto& v : vectors) EXPECT_EQ(impl.fn(v.data, 0), v.crc) << v.data.size() << " bytes";
    EXPECT_EQ(impl.fn("", 0), 0u);
    EXPECT_EQ(impl.fn("6789", impl.fn("12345", 0)), 0xE3069283u);
  }
}

// The hardware path must give the table's results exactly (blocks in
// regions on disk carry them): every length from 0 to 300, at every start
// within an 8-byte word, and chained from a non-zero CRC.
TEST(HashTest, Crc32cHardwareMatchesPortableOnRandomInputs) {
  if (!hash_internal::Crc32cHardwareAvailable()) {
    GTEST_SKIP() << "this CPU has no CRC-32C instruction";
  }
  std::mt19937_64 rng(42);
  std::string buffer(300 + 16, '\0');
  for (int round = 0; round < 4; ++round) {
    for (char& c : buffer) c = static_cast<char>(rng());
    for (size_t start = 0; start < 16; ++start) {
      for (size_t n = 0; n <= 300; ++n) {
        const absl::string_view data(buffer.data() + start, n);
        const uint32_t seed = round == 0 ? 0 : static_cast<uint32_t>(rng());
        ASSERT_EQ(hash_internal::Crc32cHardware(data, seed),
                  hash_internal::Crc32cPortable(data, seed))
            << "start " << start << ", " << n << " bytes, crc " << seed;
        ASSERT_EQ(Crc32c(data, seed), hash_internal::Crc32cPortable(data, seed));
      }
    }
  }
}

}  // namespace
}  // namespace rkv
