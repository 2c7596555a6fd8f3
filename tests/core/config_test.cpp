// Tests of the config string: every key, units, round trips, and every kind of bad input
// (unknown keys, bad units, overflow, missing values, duplicates, broken relations).
#include "cachalot/config.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "cachalot/errors.hpp"

namespace cachalot {
namespace {

std::string error_of(const std::string& text) {
  try {
    (void)config::parse(text);
  } catch (const invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(config, EmptyGivesDefaults) {
  const config c = config::parse("");
  EXPECT_EQ(c.backend, backend_kind::automatic);
  EXPECT_EQ(c.granularity, 512u);
  EXPECT_EQ(c.small_size, MiB);
  EXPECT_EQ(c.small_segment_size, 2 * MiB);
  EXPECT_EQ(c.large_segment_size, 20 * MiB);
  EXPECT_EQ(c.mid_size_limit, 10 * MiB);
  EXPECT_EQ(c.max_split_size, 32 * MiB);
  EXPECT_FALSE(c.expandable_segments);
  EXPECT_EQ(c.memory_limit, 0u);
  EXPECT_TRUE(c.caching);
  EXPECT_FALSE(c.debug);
  EXPECT_EQ(config::parse("   ").capacity, 80 * GiB);
}

TEST(config, ParsesEveryKey) {
  const config c = config::parse(
      "backend:simulated, device:1,capacity:16GiB,host_backing:true,granularity:1KiB,"
      "small_size:512KiB,small_segment:4MiB,large_segment:32MiB,mid_size:16MiB,"
      "segment_rounding:4MiB,small_split_min:1KiB,large_split_min:2MiB,max_split_size:256MiB,"
      "memory_limit:12GiB,trace_file:/tmp/t.csv,debug:1,caching:0");
  EXPECT_EQ(c.backend, backend_kind::simulated);
  EXPECT_EQ(c.device, 1);
  EXPECT_EQ(c.capacity, 16 * GiB);
  EXPECT_TRUE(c.host_backing);
  EXPECT_EQ(c.granularity, KiB);
  EXPECT_EQ(c.small_size, 512 * KiB);
  EXPECT_EQ(c.small_segment_size, 4 * MiB);
  EXPECT_EQ(c.large_segment_size, 32 * MiB);
  EXPECT_EQ(c.mid_size_limit, 16 * MiB);
  EXPECT_EQ(c.segment_rounding, 4 * MiB);
  EXPECT_EQ(c.small_split_remainder, KiB);
  EXPECT_EQ(c.large_split_remainder, 2 * MiB);
  EXPECT_EQ(c.max_split_size, 256 * MiB);
  EXPECT_EQ(c.memory_limit, 12 * GiB);
  EXPECT_EQ(c.trace_file, "/tmp/t.csv");
  EXPECT_TRUE(c.debug);
  EXPECT_FALSE(c.caching);
}

TEST(config, SizesAndUnits) {
  EXPECT_EQ(parse_size("0"), 0u);
  EXPECT_EQ(parse_size("123"), 123u);
  EXPECT_EQ(parse_size("123B"), 123u);
  EXPECT_EQ(parse_size("4KiB"), 4096u);
  EXPECT_EQ(parse_size("2 MiB"), 2 * MiB);
  EXPECT_EQ(parse_size("80gib"), 80 * GiB);
  EXPECT_EQ(parse_size("1TiB"), std::size_t{1} << 40);
  EXPECT_EQ(parse_size("18446744073709551615"), SIZE_MAX);
  EXPECT_THROW(parse_size("18446744073709551616"), invalid_argument);
  EXPECT_THROW(parse_size("16777216TiB"), invalid_argument);
  EXPECT_THROW(parse_size("4KB"), invalid_argument);
  EXPECT_THROW(parse_size("4 K"), invalid_argument);
  EXPECT_THROW(parse_size("-4"), invalid_argument);
  EXPECT_THROW(parse_size("1.5GiB"), invalid_argument);
  EXPECT_THROW(parse_size("MiB"), invalid_argument);
  EXPECT_THROW(parse_size(""), invalid_argument);
}

TEST(config, MemoryLimitAsPercentOrFraction) {
  EXPECT_DOUBLE_EQ(config::parse("memory_limit:90%").memory_fraction, 0.9);
  EXPECT_DOUBLE_EQ(config::parse("memory_fraction:0.25").memory_fraction, 0.25);
  EXPECT_EQ(config::parse("memory_limit:none").memory_limit, 0u);
  EXPECT_NE(error_of("memory_limit:0%").find("memory_limit"), std::string::npos);
  EXPECT_NE(error_of("memory_limit:101%").find("percentage"), std::string::npos);
  EXPECT_NE(error_of("memory_fraction:1.5").find("memory_fraction"), std::string::npos);
  EXPECT_NE(error_of("memory_fraction:abc").find("abc"), std::string::npos);
}

TEST(config, ErrorsNameTheKeyOrValue) {
  EXPECT_NE(error_of("bogus:1").find("unknown key 'bogus'"), std::string::npos);
  EXPECT_NE(error_of("capacity:12XB").find("unknown unit 'XB'"), std::string::npos);
  EXPECT_NE(error_of("capacity:99999999999999999999").find("overflows"), std::string::npos);
  EXPECT_NE(error_of("capacity:").find("'capacity': missing value"), std::string::npos);
  EXPECT_NE(error_of("capacity").find("has no value"), std::string::npos);
  EXPECT_NE(error_of(":5").find("has no key"), std::string::npos);
  EXPECT_NE(error_of("device:1,,capacity:1GiB").find("empty entry"), std::string::npos);
  EXPECT_NE(error_of("device:1,device:2").find("given twice"), std::string::npos);
  EXPECT_NE(error_of("backend:tpu").find("'tpu'"), std::string::npos);
  EXPECT_NE(error_of("host_backing:maybe").find("not a boolean"), std::string::npos);
  EXPECT_NE(error_of("device:-1").find("device"), std::string::npos);
  EXPECT_NE(error_of("capacity:0").find("capacity"), std::string::npos);
}

TEST(config, RelationsAreValidated) {
  EXPECT_NE(error_of("granularity:768").find("power of two"), std::string::npos);
  EXPECT_NE(error_of("small_size:1000").find("multiple of the granularity"), std::string::npos);
  EXPECT_NE(error_of("small_size:4MiB").find("exceeds small_segment"), std::string::npos);
  EXPECT_NE(error_of("max_split_size:20MiB").find("max_split_size"), std::string::npos);
  EXPECT_NE(error_of("mid_size:64MiB").find("mid_size"), std::string::npos);
  EXPECT_NO_THROW((void)config::parse("max_split_size:21MiB"));
}

TEST(config, RoundTripsThroughToString) {
  const config c = config::parse(
      "backend:simulated,capacity:3GiB,max_split_size:64MiB,memory_limit:1GiB,debug:1");
  const config d = config::parse(c.to_string());
  EXPECT_EQ(d.to_string(), c.to_string());
  EXPECT_EQ(d.max_split_size, 64 * MiB);
  EXPECT_EQ(d.memory_limit, GiB);
  const config e = config::parse(config::parse("memory_limit:50%").to_string());
  EXPECT_DOUBLE_EQ(e.memory_fraction, 0.5);
}

TEST(config, EnvironmentVariable) {
  ::setenv("CACHALOT_CONF", "backend:simulated,capacity:2GiB", 1);
  EXPECT_EQ(config::from_environment().capacity, 2 * GiB);
  ::setenv("CACHALOT_CONF", "capacity:2XiB", 1);
  try {
    (void)config::from_environment();
    ADD_FAILURE();
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("CACHALOT_CONF"), std::string::npos);
  }
  ::unsetenv("CACHALOT_CONF");
  EXPECT_EQ(config::from_environment().capacity, 80 * GiB);
}

TEST(config, FormatsBytesForPeople) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(80 * GiB), "80.00 GiB");
}

}  // namespace
}  // namespace cachalot
