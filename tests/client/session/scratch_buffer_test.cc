// ScratchBuffer hands its memory back to the arena exactly once, whatever
// becomes of the handle.
#include "client/session/scratch_buffer.h"

#include <vector>

#include "gtest/gtest.h"

namespace rkv::client_internal {
namespace {

TEST(ScratchBufferTest, FreesToItsArenaWhenItGoes) {
  std::vector<uint8_t> memory(4096);
  ScratchArena arena(memory.data(), memory.size());
  {
    ScratchBuffer a = ScratchBuffer::Allocate(arena, 100);
    ASSERT_TRUE(a);
    EXPECT_EQ(a.size(), 100u);
    EXPECT_FALSE(arena.empty());
    ScratchBuffer b = std::move(a);  // Moved: freed once, by b.
    EXPECT_FALSE(a);
    EXPECT_TRUE(b);
    ScratchBuffer c = ScratchBuffer::AllocateFor<uint64_t>(arena);
    c = std::move(b);  // c's own buffer goes back now.
    EXPECT_FALSE(arena.empty());
    c.Reset();
    EXPECT_TRUE(arena.empty());
    c.Reset();  // Twice is harmless.
  }
  EXPECT_TRUE(arena.empty());
}

TEST(ScratchBufferTest, EmptyWhenTheArenaIsShort) {
  std::vector<uint8_t> memory(256);
  ScratchArena arena(memory.data(), memory.size());
  ScratchBuffer big = ScratchBuffer::Allocate(arena, 512);
  EXPECT_FALSE(big);
  EXPECT_EQ(big.size(), 0u);
  ScratchBuffer all = ScratchBuffer::Allocate(arena, 256);
  EXPECT_TRUE(all);
  EXPECT_FALSE(ScratchBuffer::Allocate(arena, 1));
}

}  // namespace
}  // namespace rkv::client_internal
