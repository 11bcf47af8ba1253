#include "common/flags.h"

#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "gtest/gtest.h"

ABSL_FLAG(std::string, region_file, "", "test flag");
ABSL_FLAG(int, lease_ms, 0, "test flag");

namespace rkv {
namespace {

TEST(FlagsTest, HyphenAndUnderscoreSpellingsAreTheSameFlag) {
  std::vector<std::string> args = {"prog", "--region-file=/tmp/r-1", "--lease_ms=250", "pos-arg"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  std::vector<char*> rest = ParseFlags(static_cast<int>(argv.size()), argv.data(), "test");
  EXPECT_EQ(absl::GetFlag(FLAGS_region_file), "/tmp/r-1");  // Value keeps its hyphen.
  EXPECT_EQ(absl::GetFlag(FLAGS_lease_ms), 250);
  ASSERT_EQ(rest.size(), 2u);
  EXPECT_EQ(std::string(rest[1]), "pos-arg");
}

}  // namespace
}  // namespace rkv
