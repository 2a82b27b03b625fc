// main of the GGUF tests: the kvtier CLI they run (convert, mkmodel) is their argument.
#include <gtest/gtest.h>

#include <cstdio>

#include "gguf_models.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s PATH_TO_KVTIER_CLI\n", argv[0]);
    return 2;
  }
  kvtier::testing::KvtierCli() = argv[1];
  const int status = RUN_ALL_TESTS();
  kvtier::testing::RemoveGgufScratch();
  return status;
}
