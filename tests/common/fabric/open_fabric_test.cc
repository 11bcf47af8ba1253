// Choosing a backend, and what happens where RDMA is missing.
#include <infiniband/verbs.h>

#include "absl/strings/match.h"
#include "common/fabric/fabric.h"
#include "common/fabric/faulty_fabric.h"
#include "gtest/gtest.h"

namespace rkv::fabric {
namespace {

bool HostHasRdmaDevice() {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list != nullptr) ibv_free_device_list(list);
  return list != nullptr && n > 0;
}

TEST(OpenFabricTest, VerbsWithoutDeviceNamesTheSoftFabric) {
  absl::StatusOr<std::unique_ptr<Fabric>> f = OpenFabric({.kind = FabricKind::kVerbs});
  if (HostHasRdmaDevice()) {
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ((*f)->kind(), FabricKind::kVerbs);
    return;
  }
  ASSERT_FALSE(f.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(f.status())) << f.status();
  EXPECT_TRUE(absl::StrContains(f.status().message(), "--fabric=soft")) << f.status();
  EXPECT_TRUE(absl::StrContains(f.status().message(), "no RDMA device")) << f.status();
  std::cout << "verbs backend here: " << f.status().message() << "\n";
}

TEST(OpenFabricTest, AutoPicksVerbsWhenPresentElseSoft) {
  absl::StatusOr<std::unique_ptr<Fabric>> f = OpenFabric({.kind = FabricKind::kAuto});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->kind(), HostHasRdmaDevice() ? FabricKind::kVerbs : FabricKind::kSoft);
}

TEST(OpenFabricTest, UnknownDeviceNameIsNotFound) {
  if (!HostHasRdmaDevice()) GTEST_SKIP() << "no RDMA device: device selection cannot run";
  auto f = OpenFabric({.kind = FabricKind::kVerbs, .rdma_device = "no_such_device9"});
  EXPECT_TRUE(absl::IsNotFound(f.status())) << f.status();
}

TEST(OpenFabricTest, ParsesFabricKinds) {
  EXPECT_EQ(*ParseFabricKind("auto"), FabricKind::kAuto);
  EXPECT_EQ(*ParseFabricKind("verbs"), FabricKind::kVerbs);
  EXPECT_EQ(*ParseFabricKind("soft"), FabricKind::kSoft);
  absl::StatusOr<FabricKind> bad = ParseFabricKind("rxe");
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "auto, verbs or soft"));
}

TEST(OpenFabricTest, ParsesFaultSpecs) {
  auto f = ParseFaultOptions("delay=0.25,max_delay=3ms,drop=0.001,fail=0.5,seed=77");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_DOUBLE_EQ(f->delay_probability, 0.25);
  EXPECT_EQ(f->max_delay, absl::Milliseconds(3));
  EXPECT_DOUBLE_EQ(f->drop_probability, 0.001);
  EXPECT_DOUBLE_EQ(f->fail_probability, 0.5);
  EXPECT_EQ(f->seed, 77u);
  EXPECT_FALSE(ParseFaultOptions("").value().any());
  for (const char* bad :
       {"delay", "delay=2", "drop=-0.1", "explode=0.1", "max_delay=soon", "seed=x"}) {
    EXPECT_TRUE(absl::IsInvalidArgument(ParseFaultOptions(bad).status())) << bad;
  }
}

TEST(OpenFabricTest, RegistrationRulesMatchVerbs) {
  auto f = OpenFabric({.kind = FabricKind::kSoft});
  ASSERT_TRUE(f.ok());
  char buf[64];
  EXPECT_TRUE(
      absl::IsInvalidArgument((*f)->RegisterMemory(buf, sizeof(buf), kRemoteWrite).status()));
  EXPECT_TRUE(absl::IsInvalidArgument((*f)->RegisterMemory(buf, 0, kRemoteRead).status()));
  auto a = (*f)->RegisterMemory(buf, sizeof(buf), kRemoteRead);
  auto b = (*f)->RegisterMemory(buf, sizeof(buf), kRemoteRead);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE((*a)->rkey(), (*b)->rkey());  // Keys are never reused.
}

}  // namespace
}  // namespace rkv::fabric
