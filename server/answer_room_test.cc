// AnswerRoom (server/answer_room.h): faulted in when made, taken in parts
// until used up, and kept alive by the slices over it.
#include "server/answer_room.h"

#include <sys/mman.h>

#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace pstrain {
namespace {

TEST(AnswerRoomTest, ItIsFaultedInWhenMade) {
  AnswerRoom room(64 << 10);
  char* p = room.Take(64 << 10);
  ASSERT_NE(p, nullptr);
  std::vector<unsigned char> pages(16);
  ASSERT_EQ(mincore(p, 64 << 10, pages.data()), 0);
  for (unsigned char v : pages) EXPECT_TRUE(v & 1);
}

TEST(AnswerRoomTest, PartsAreTakenUntilItIsUsedUp) {
  AnswerRoom room(8192);
  char* a = room.Take(5000);
  char* b = room.Take(3000);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b, a + 5000);
  EXPECT_EQ(room.Take(1000), nullptr);  // 192 bytes left
  EXPECT_NE(room.Take(192), nullptr);
  AnswerRoom none(0);
  EXPECT_EQ(none.Take(1), nullptr);
  EXPECT_GE(AnswerRoom::ChunkBytes(1000, 4), 1000 + 4 * 10);
}

TEST(AnswerRoomTest, ASliceKeepsTheRoomAlive) {
  auto room = std::make_shared<AnswerRoom>(4096);
  char* p = room->Take(6);
  std::memcpy(p, "answer", 6);
  grpc::Slice slice = AnswerRoom::SliceOf(room, p, 6);
  std::weak_ptr<AnswerRoom> watch = room;
  room.reset();
  ASSERT_FALSE(watch.expired());
  EXPECT_EQ(std::memcmp(slice.begin(), "answer", 6), 0);
  slice = grpc::Slice();
  EXPECT_TRUE(watch.expired());
}

}  // namespace
}  // namespace pstrain
