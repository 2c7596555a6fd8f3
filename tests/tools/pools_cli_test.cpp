// cachalot-replay --pool: parsing (streams in hex or decimal, sizes, priorities, shared pools,
// errors as usage errors), routing of a trace's streams, per-pool figures in the text and JSON
// output, and a pool limit that makes one tenant fail while the other does not; sleepable pools
// and the trace's "sleep"/"wake" lines (a critical tenant that fails only without them).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cachalot/errors.hpp"
#include "trace/cli.hpp"
#include "trace/pools.hpp"

namespace cachalot::tools {
namespace {

TEST(ReplayPools, ParsesSpecs) {
  std::vector<pool_spec> specs;
  add_pool_spec(specs, "0xa0=critical,limit:4GiB,priority:2,guarantee:1GiB");
  add_pool_spec(specs, "176=critical");  // decimal, joins the pool
  add_pool_spec(specs, "0=batch,priority:-1");
  add_pool_spec(specs, "0x7=g,graph");
  ASSERT_EQ(specs.size(), 3u);
  EXPECT_EQ(specs[0].options.name, "critical");
  EXPECT_EQ(specs[0].options.limit, 4 * GiB);
  EXPECT_EQ(specs[0].options.guarantee, GiB);
  EXPECT_EQ(specs[0].options.priority, 2);
  EXPECT_EQ(specs[0].streams, (std::vector<std::uintptr_t>{0xa0, 176}));
  EXPECT_EQ(specs[1].options.priority, -1);
  EXPECT_EQ(specs[2].options.type, pool_type::graph);
  for (const char* bad :
       {"critical", "0xzz=a", "1=", "1=a,limit:lots", "1=a,priority:high", "1=a,colour:red"}) {
    EXPECT_THROW(add_pool_spec(specs, bad), invalid_argument) << bad;
  }
  EXPECT_THROW(add_pool_spec(specs, "9=critical,priority:5"), invalid_argument) << "conflict";
  add_pool_spec(specs, "0xb=nap,sleepable");
  add_pool_spec(specs, "0xc=cache,sleepable:discard");
  EXPECT_TRUE(specs[3].options.sleepable);
  EXPECT_EQ(specs[3].options.sleep_mode, sleep_mode::offload);
  EXPECT_EQ(specs[4].options.sleep_mode, sleep_mode::discard);
  EXPECT_THROW(add_pool_spec(specs, "0xd=x,sleepable:maybe"), invalid_argument);
}

/// Replays `trace` on a 64 MiB simulated device with expandable segments; the JSON output.
std::string replay_json(const std::string& trace, const std::string& name,
                        const std::vector<std::string>& pools) {
  const std::string path = ::testing::TempDir() + name;
  { std::ofstream(path) << trace; }
  std::vector<std::string> args = {
      "--json",        "--repeat", "1",
      "--no-baseline", "--config", "backend:simulated,capacity:64MiB,expandable_segments:1"};
  for (const std::string& p : pools) {
    args.push_back("--pool");
    args.push_back(p);
  }
  args.push_back(path);
  std::ostringstream out, err;
  EXPECT_EQ(replay_cli(args, out, err), 0) << err.str();
  return out.str();
}

TEST(ReplayPools, SleepablePoolGivesWayAndWakesWhenItAllocatesAgain) {
  // batch (0x2) holds 40 MiB; critical (0x1) spikes to 30 MiB on a 64 MiB device, frees it, and
  // batch allocates again afterwards (its pool woken first).
  const std::string trace =
      "Thread,Time,Action,Pointer,Size,Stream\n"
      "1,10:00:00.000001,allocate,0x1000,41943040,0x2\n"
      "1,10:00:00.000002,allocate,0x2000,31457280,0x1\n"
      "1,10:00:00.000003,free,0x2000,31457280,0x1\n"
      "1,10:00:00.000004,allocate,0x3000,1048576,0x2\n"
      "1,10:00:00.000005,free,0x3000,1048576,0x2\n"
      "1,10:00:00.000006,free,0x1000,41943040,0x2\n";
  const std::string plain =
      replay_json(trace, "sleep_plain.csv", {"0x1=critical,priority:1", "0x2=batch"});
  EXPECT_NE(plain.find("\"name\":\"critical\",\"priority\":1,\"limit_bytes\":0,"
                       "\"guarantee_bytes\":0,\"allocations\":0,\"ooms\":1"),
            std::string::npos)
      << plain;
  const std::string slept =
      replay_json(trace, "sleep_auto.csv", {"0x1=critical,priority:1", "0x2=batch,sleepable"});
  EXPECT_NE(slept.find("\"name\":\"critical\",\"priority\":1,\"limit_bytes\":0,"
                       "\"guarantee_bytes\":0,\"allocations\":1,\"ooms\":0"),
            std::string::npos)
      << slept;
  EXPECT_NE(slept.find("\"sleepable\":true,\"sleeps\":1,\"pressure_sleeps\":1,\"wakes\":1,"
                       "\"failed_wakes\":0"),
            std::string::npos)
      << slept;
  EXPECT_NE(slept.find("\"ooms\":0,\"errors\":0"), std::string::npos) << slept;
}

TEST(ReplayPools, TraceSleepAndWakeLines) {
  const std::string trace =
      "Thread,Time,Action,Pointer,Size,Stream\n"
      "1,10:00:00.000001,allocate,0x1000,41943040,0x2\n"
      "1,10:00:00.000002,sleep discard,(nil),0,0x2\n"
      "1,10:00:00.000003,allocate,0x2000,31457280,0x1\n"
      "1,10:00:00.000004,free,0x2000,31457280,0x1\n"
      "1,10:00:00.000005,wake,(nil),0,0x2\n"
      "1,10:00:00.000006,free,0x1000,41943040,0x2\n";
  const std::string json =
      replay_json(trace, "sleep_lines.csv", {"0x1=critical,priority:1", "0x2=batch"});
  EXPECT_NE(json.find("\"sleepable\":false,\"sleeps\":1,\"pressure_sleeps\":0,\"wakes\":1"),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("\"allocations\":1,\"ooms\":0"), std::string::npos) << json;
  // A sleep line on a stream in no --pool: an error of the replay, counted.
  const std::string none = replay_json(trace, "sleep_none.csv", {"0x1=critical,priority:1"});
  EXPECT_NE(none.find("\"errors\":2"), std::string::npos) << none;
  // A sleep line with a size is malformed.
  const std::string bad_path = ::testing::TempDir() + "sleep_bad.csv";
  {
    std::ofstream(bad_path) << "Thread,Time,Action,Pointer,Size,Stream\n"
                               "1,10:00:00.000001,sleep offload,(nil),5,0x2\n";
  }
  std::ostringstream out, err;
  EXPECT_NE(replay_cli({"--no-baseline", bad_path}, out, err), 0);
  EXPECT_NE(err.str().find("sleep"), std::string::npos) << err.str();
}

TEST(ReplayPools, RoutesStreamsAndReportsEachPool) {
  // Stream 0x1 allocates 30 MiB twice, stream 0x2 40 MiB; tenant "small" is limited to 40 MiB.
  const std::string trace =
      "Thread,Time,Action,Pointer,Size,Stream\n"
      "1,10:00:00.000001,allocate,0x1000,31457280,0x1\n"
      "1,10:00:00.000002,allocate,0x2000,41943040,0x2\n"
      "1,10:00:00.000003,allocate,0x3000,31457280,0x1\n"
      "1,10:00:00.000004,free,0x1000,31457280,0x1\n"
      "1,10:00:00.000005,free,0x3000,31457280,0x1\n"
      "1,10:00:00.000006,free,0x2000,41943040,0x2\n";
  const std::string path = ::testing::TempDir() + "pools_cli.csv";
  { std::ofstream(path) << trace; }
  std::ostringstream out, err;
  ASSERT_EQ(replay_cli({"--json", "--repeat", "1", "--no-baseline", "--pool",
                        "0x1=small,limit:40MiB", "--pool", "0x2=big,priority:1", path},
                       out, err),
            0)
      << err.str();
  const std::string json = out.str();
  for (const char* part : {"\"pools\":[", "\"name\":\"small\"", "\"limit_bytes\":41943040",
                           "\"name\":\"big\",\"priority\":1", "\"ooms\":1"}) {
    EXPECT_NE(json.find(part), std::string::npos) << part << " in " << json;
  }
  out.str("");
  ASSERT_EQ(replay_cli({"--repeat", "1", "--no-baseline", "--pool", "0x1=small,limit:40MiB", path},
                       out, err),
            0);
  EXPECT_NE(out.str().find("pool small"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("1 out of memory"), std::string::npos) << out.str();
  // A stream the trace never uses, and a malformed spec: usage errors (status 2).
  EXPECT_EQ(replay_cli({"--no-baseline", "--pool", "0x9=x", path}, out, err), 2);
  EXPECT_NE(err.str().find("does not appear"), std::string::npos) << err.str();
  EXPECT_EQ(replay_cli({"--pool", "nonsense", path}, out, err), 2);
}

}  // namespace
}  // namespace cachalot::tools
