// The source of kvtier_test_pch (tests/CMakeLists.txt, KVTIER_PCH): the target exists to
// build the precompiled header the gtest binaries reuse; this file compiles it once.
