// The scratch arena: buffers of a small size come back from their free
// list, and what the lists hold goes back to the ranges when a larger
// allocation needs it, so that no memory is lost to them.
#include "client/session/scratch_arena.h"

#include <vector>

#include "gtest/gtest.h"

namespace rkv::client_internal {
namespace {

TEST(ScratchArenaTest, AFreedSmallBufferIsTheNextOfItsSize) {
  std::vector<uint8_t> memory(64 << 10);
  ScratchArena arena(memory.data(), memory.size());
  uint8_t* a = arena.Allocate(100);  // Two units.
  uint8_t* b = arena.Allocate(8);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  arena.Free(a);
  EXPECT_EQ(arena.Allocate(128), a);
  EXPECT_NE(arena.Allocate(100), a);
  arena.Free(b);
  EXPECT_EQ(arena.Allocate(1), b);
}

TEST(ScratchArenaTest, ListedBuffersGoBackForALargeAllocation) {
  std::vector<uint8_t> memory(64 * 64);
  ScratchArena arena(memory.data(), memory.size());
  std::vector<uint8_t*> small;
  for (int i = 0; i < 64; ++i) {
    small.push_back(arena.Allocate(64));
    ASSERT_NE(small.back(), nullptr) << i;
  }
  EXPECT_EQ(arena.Allocate(64), nullptr);  // Full.
  for (uint8_t* p : small) arena.Free(p);
  EXPECT_TRUE(arena.empty());
  // Every unit sits in the one-unit list; the whole arena is one range again.
  uint8_t* all = arena.Allocate(64 * 64);
  EXPECT_EQ(all, memory.data());
  arena.Free(all);
  EXPECT_TRUE(arena.empty());
}

TEST(ScratchArenaTest, LargeBuffersMergeWithTheirNeighbours) {
  std::vector<uint8_t> memory(1 << 20);
  ScratchArena arena(memory.data(), memory.size());
  uint8_t* a = arena.Allocate(300 << 10);
  uint8_t* b = arena.Allocate(300 << 10);
  uint8_t* c = arena.Allocate(300 << 10);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(arena.Allocate(300 << 10), nullptr);
  arena.Free(a);
  arena.Free(b);
  EXPECT_EQ(arena.Allocate(600 << 10), a);  // a and b merged.
}

TEST(ScratchArenaDeathTest, FreeingWhatWasNotAllocatedIsCaught) {
  std::vector<uint8_t> memory(4096);
  ScratchArena arena(memory.data(), memory.size());
  uint8_t* a = arena.Allocate(64);
  arena.Free(a);
  EXPECT_DEATH(arena.Free(a), "not allocated");
}

}  // namespace
}  // namespace rkv::client_internal
