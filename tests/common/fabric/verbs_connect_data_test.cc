// The verbs backend's connect request private data (verbs_connect.h): what
// a listener accepts, and how it tells a wrong token from another format.
// Pure encoding: runs without an RDMA device.
#include <string>

#include "common/fabric/verbs/verbs_connect.h"
#include "gtest/gtest.h"

namespace rkv::fabric {
namespace {

TEST(VerbsConnectDataTest, CarriesThePeerIdAndFitsThePrivateData) {
  const std::string data = EncodeConnectData(0xABCDEF0123456789, "token");
  EXPECT_EQ(data.size(), kConnectDataBytes);
  EXPECT_LE(data.size(), 56u);  // RDMA_PS_TCP connect private data.
  auto peer = CheckConnectData(data, "token");
  ASSERT_TRUE(peer.ok()) << peer.status();
  EXPECT_EQ(*peer, 0xABCDEF0123456789u);
}

TEST(VerbsConnectDataTest, ZeroPaddingIsAccepted) {
  // The transport may pad private data to its full size.
  const std::string padded = EncodeConnectData(3, "token") + std::string(24, '\0');
  auto peer = CheckConnectData(padded, "token");
  ASSERT_TRUE(peer.ok()) << peer.status();
  EXPECT_EQ(*peer, 3u);
}

TEST(VerbsConnectDataTest, TokensOfEveryAllowedLengthFitBesideThePeerId) {
  const std::string longest(kMaxVerbsToken, 'k');
  auto peer = CheckConnectData(EncodeConnectData(8, longest), longest);
  ASSERT_TRUE(peer.ok()) << peer.status();
  EXPECT_EQ(*peer, 8u);
  std::string other = longest;
  other.back() = 'j';
  EXPECT_TRUE(
      absl::IsPermissionDenied(CheckConnectData(EncodeConnectData(8, other), longest).status()));
}

TEST(VerbsConnectDataTest, WrongTokenIsPermissionDenied) {
  auto peer = CheckConnectData(EncodeConnectData(1, "wrong"), "token");
  EXPECT_TRUE(absl::IsPermissionDenied(peer.status())) << peer.status();
  // A listener without a token accepts any.
  EXPECT_TRUE(CheckConnectData(EncodeConnectData(1, "wrong"), "").ok());
}

TEST(VerbsConnectDataTest, OlderFormatIsInvalidArgumentWhateverTheToken) {
  // Before the peer id, the private data was the bare token.
  for (const char* token : {"token", ""}) {
    auto peer = CheckConnectData(std::string("token") + std::string(51, '\0'), token);
    EXPECT_TRUE(absl::IsInvalidArgument(peer.status())) << token << ": " << peer.status();
  }
  EXPECT_TRUE(absl::IsInvalidArgument(CheckConnectData("", "").status()));
  // Not padding: bytes after the request.
  std::string trailing = EncodeConnectData(1, "token") + "x";
  EXPECT_TRUE(absl::IsInvalidArgument(CheckConnectData(trailing, "token").status()));
  std::string format2 = EncodeConnectData(1, "token");
  format2[4] = 2;
  EXPECT_TRUE(absl::IsInvalidArgument(CheckConnectData(format2, "token").status()));
}

}  // namespace
}  // namespace rkv::fabric
