#include "common/security.h"

#include "gtest/gtest.h"

namespace pstrain {
namespace {

TEST(SecurityTest, LoopbackListenAddresses) {
  for (const char* listen : {"127.0.0.1:5000", "127.0.0.2:0", "localhost:0", "[::1]:5000"}) {
    EXPECT_TRUE(IsLoopbackListen(listen)) << listen;
  }
  for (const char* listen :
       {"0.0.0.0:5000", ":5000", "[::]:0", "10.1.2.3:7000", "node-7:7000", "128.0.0.1:1"}) {
    EXPECT_FALSE(IsLoopbackListen(listen)) << listen;
  }
}

}  // namespace
}  // namespace pstrain
