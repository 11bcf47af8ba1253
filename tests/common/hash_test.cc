#include "common/hash.h"

#include <string>

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

}  // namespace
}  // namespace rkv
