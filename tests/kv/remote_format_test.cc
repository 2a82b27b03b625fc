// The remote tier's pure parts: remote_kv_url parsing, cluster hash slots, and the value
// format (a corrupt, foreign or other-token value is refused, naming why).
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "remote/redis_address.h"
#include "remote/redis_client.h"
#include "remote/remote_value.h"

namespace kvtier {
namespace {

TEST(RemoteFormatTest, ParsesUrls) {
  auto one = ParseRemoteKvUrl("redis://cache.example:7000");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(*one, (std::vector<RedisAddress>{{"cache.example", 7000}}));
  auto seeds = ParseRemoteKvUrl("redis://10.0.0.1:7000,10.0.0.2,10.0.0.3:7002/");
  ASSERT_TRUE(seeds.ok()) << seeds.status();
  EXPECT_EQ(*seeds, (std::vector<RedisAddress>{{"10.0.0.1", 7000}, {"10.0.0.2", 6379}, {"10.0.0.3", 7002}}));
  for (const char* bad : {"", "http://h:1", "redis://", "redis://h:0", "redis://h:70000", "redis://h:x",
                          "redis://user:pw@h:1", "redis://h:1/2", "redis://a:1,,b:2", "redis://:6379"}) {
    absl::StatusOr<std::vector<RedisAddress>> parsed = ParseRemoteKvUrl(bad);
    EXPECT_TRUE(absl::IsInvalidArgument(parsed.status())) << bad;
  }
}

TEST(RemoteFormatTest, KeySlotsFollowTheClusterSpecification) {
  EXPECT_EQ(KeySlot("123456789"), 0x31C3 % kRedisClusterSlots);  // CRC16/XMODEM check value
  EXPECT_EQ(KeySlot("foo"), 12182);
  EXPECT_EQ(KeySlot("{user1000}.following"), KeySlot("{user1000}.followers"));
  EXPECT_EQ(KeySlot("{user1000}.following"), KeySlot("user1000"));
  EXPECT_EQ(KeySlot("foo{}{bar}"), KeySlot("foo{}{bar}"));  // empty tag: the whole key
  EXPECT_NE(KeySlot("foo{}{bar}"), KeySlot("bar"));
}

class RemoteValueTest : public ::testing::Test {
 protected:
  RemoteValueTest() : block_(format_.block_bytes) {
    for (size_t i = 0; i < block_.size(); ++i) block_[i] = static_cast<uint8_t>(i * 7);
    key_.bytes[3] = 9;
  }
  absl::Status Decode(const std::string& value, std::vector<int32_t> tokens) {
    std::vector<uint8_t> out(format_.block_bytes);
    absl::Status s = DecodeRemoteValue(format_, value, key_, tokens, out.data());
    if (s.ok()) {
      EXPECT_EQ(out, block_);
    }
    return s;
  }
  const RemoteValueFormat format_{0x1234, 256, 4};
  std::vector<uint8_t> block_;
  Sha256Digest key_;
  const std::vector<int32_t> tokens_ = {5, 6, 7, 8};
};

TEST_F(RemoteValueTest, RoundTrips) {
  const std::string value = EncodeRemoteValue(format_, key_, tokens_, block_.data());
  EXPECT_EQ(value.size(), RemoteValueBytes(format_));
  EXPECT_TRUE(Decode(value, tokens_).ok());
  EXPECT_EQ(RemoteKeyOf(key_).rfind("kvtier:block:", 0), 0u);
  EXPECT_EQ(RemoteKeyOf(key_).size(), 13u + 64u);
}

TEST_F(RemoteValueTest, RefusesCorruptForeignAndOtherTokenValues) {
  const std::string value = EncodeRemoteValue(format_, key_, tokens_, block_.data());
  std::string flipped = value;
  flipped[flipped.size() - 3] ^= 1;
  EXPECT_TRUE(absl::IsDataLoss(Decode(flipped, tokens_)));
  std::string header_flip = value;
  header_flip[20] ^= 1;
  EXPECT_TRUE(absl::IsDataLoss(Decode(header_flip, tokens_)));
  EXPECT_TRUE(absl::IsDataLoss(Decode(value.substr(0, value.size() - 1), tokens_)));
  EXPECT_TRUE(absl::IsDataLoss(Decode("", tokens_)));
  EXPECT_TRUE(absl::IsFailedPrecondition(Decode(value, {5, 6, 7, 9})));
  Sha256Digest other_key = key_;
  other_key.bytes[0] = 1;
  EXPECT_TRUE(absl::IsDataLoss(Decode(EncodeRemoteValue(format_, other_key, tokens_, block_.data()), tokens_)));
  RemoteValueFormat other_model = format_;
  other_model.model_fingerprint = 1;
  const absl::Status foreign = Decode(EncodeRemoteValue(other_model, key_, tokens_, block_.data()), tokens_);
  EXPECT_TRUE(absl::IsDataLoss(foreign));
  EXPECT_NE(foreign.message().find("fingerprint"), std::string::npos) << foreign;
}

}  // namespace
}  // namespace kvtier
