// PagePopulator: every chunk paged in, in order, for a consumer that waits for each; the
// threads stay within `ahead` chunks of the consumer; Stop ends the waits.
#include "kv/page_populator.h"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "testing/wait_until.h"

namespace kvtier {
namespace {

// Pages of an anonymous mapping that are resident (mincore), over [base, base + bytes).
size_t ResidentPages(uint8_t* base, size_t bytes) {
  const size_t page = 4096;
  std::vector<unsigned char> in((bytes + page - 1) / page);
  if (::mincore(base, bytes, in.data()) != 0) return 0;
  size_t n = 0;
  for (unsigned char c : in) n += c & 1;
  return n;
}

class Region {
 public:
  explicit Region(size_t bytes) : bytes_(bytes) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    base_ = p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
    ::madvise(base_, bytes, MADV_NOHUGEPAGE);  // residency counted in 4 KiB pages
  }
  ~Region() {
    if (base_ != nullptr) ::munmap(base_, bytes_);
  }
  uint8_t* base() const { return base_; }

 private:
  uint8_t* base_;
  size_t bytes_;
};

constexpr size_t kChunk = 256 << 10;

TEST(PagePopulatorTest, EveryChunkIsPagedInForAConsumerInOrder) {
  const size_t bytes = 10 * kChunk + 3 * 4096;  // a short last chunk
  Region region(bytes);
  ASSERT_NE(region.base(), nullptr);
  EXPECT_EQ(ResidentPages(region.base(), bytes), 0u);
  PagePopulator populator(region.base(), bytes, kChunk, /*threads=*/3, /*ahead=*/2);
  for (size_t i = 0; i < 11; ++i) {
    ASSERT_TRUE(populator.WaitFor(i)) << i;
    const size_t begin = i * kChunk, length = std::min(kChunk, bytes - begin);
    EXPECT_EQ(ResidentPages(region.base() + begin, length), length / 4096) << i;
  }
  EXPECT_FALSE(populator.WaitFor(11));  // past the end
}

TEST(PagePopulatorTest, ThreadsStayWithinAheadOfTheConsumer) {
  const size_t bytes = 64 * kChunk;
  Region region(bytes);
  ASSERT_NE(region.base(), nullptr);
  PagePopulator populator(region.base(), bytes, kChunk, /*threads=*/2, /*ahead=*/3);
  ASSERT_TRUE(populator.WaitFor(0));
  // Chunks 0..2 may be paged in (ahead of chunk 0); give the threads time to overrun.
  ASSERT_TRUE(testing::WaitUntil([&] { return ResidentPages(region.base(), 3 * kChunk) == 3 * kChunk / 4096; },
                                 std::chrono::seconds(30)));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(ResidentPages(region.base() + 3 * kChunk, bytes - 3 * kChunk), 0u);
  ASSERT_TRUE(populator.WaitFor(10));  // the consumer moved: the threads follow
  EXPECT_EQ(ResidentPages(region.base() + 10 * kChunk, kChunk), kChunk / 4096);
}

TEST(PagePopulatorTest, StopEndsWaitsForChunksNotPagedIn) {
  const size_t bytes = 64 * kChunk;
  Region region(bytes);
  ASSERT_NE(region.base(), nullptr);
  PagePopulator populator(region.base(), bytes, kChunk, /*threads=*/1, /*ahead=*/1);
  ASSERT_TRUE(populator.WaitFor(0));
  populator.Stop();
  EXPECT_FALSE(populator.WaitFor(40));  // never reached: ahead 1 of chunk 0, then stopped
  EXPECT_TRUE(populator.WaitFor(0));    // paged in before the stop
}

TEST(PopulatePagesTest, CommitsEveryPage) {
  const size_t bytes = 37 * 4096;
  Region region(bytes);
  ASSERT_NE(region.base(), nullptr);
  PopulatePages(region.base(), bytes);
  EXPECT_EQ(ResidentPages(region.base(), bytes), 37u);
}

}  // namespace
}  // namespace kvtier
