// Trace: events recorded from several threads land in one Chrome trace-event file that parses as
// JSON, carries pid = rank, names every thread, and is written only when enabled; a path that
// cannot be written or a full disk is an error naming the rank, with no half-written file left.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/trace.h"

namespace starring {
namespace {

namespace fs = std::filesystem;

fs::path temp_dir() {
  fs::path dir =
      fs::temp_directory_path() / ("starring_trace_test_" + std::to_string(::getpid()) + "_" +
                                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return nlohmann::json::parse(in);
}

TEST(Trace, EventsFromSeveralThreadsFormOneValidFile) {
  const fs::path dir = temp_dir();
  constexpr int kThreads = 4, kEvents = 50, kRank = 3;
  {
    Trace trace(kRank);
    trace.open((dir / "trace.%r.json").string());
    ASSERT_TRUE(trace.enabled());
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&trace, t] {
        trace.set_thread_name("worker" + std::to_string(t));
        for (int i = 0; i < kEvents; ++i) {
          TraceScope scope(&trace, "step", "compute");
          trace.counter("bytes", t * 1000 + i);
        }
        trace.complete("bucket", "comm", 1.0, 2.5, {{"bytes", 4096.0}});
      });
    }
    for (auto& th : threads) th.join();
    trace.close();
  }
  const fs::path file = dir / "trace.3.json";
  ASSERT_TRUE(fs::exists(file));
  const nlohmann::json doc = read_json(file);
  ASSERT_TRUE(doc.contains("traceEvents"));
  int complete = 0, counters = 0;
  std::set<int> tids_with_events;
  std::set<std::string> thread_names;
  bool process_named = false;
  for (const auto& e : doc["traceEvents"]) {
    EXPECT_EQ(e["pid"].get<int>(), kRank);
    const std::string ph = e["ph"];
    if (ph == "X") {
      ++complete;
      EXPECT_GE(e["dur"].get<double>(), 0.0);
      EXPECT_GE(e["ts"].get<double>(), 0.0);
      tids_with_events.insert(e["tid"].get<int>());
    } else if (ph == "C") {
      ++counters;
    } else if (ph == "M" && e["name"] == "thread_name") {
      thread_names.insert(e["args"]["name"].get<std::string>());
    } else if (ph == "M" && e["name"] == "process_name") {
      process_named = e["args"]["name"] == "rank 3";
    }
  }
  EXPECT_EQ(complete, kThreads * (kEvents + 1));
  EXPECT_EQ(counters, kThreads * kEvents);
  EXPECT_EQ(tids_with_events.size(), static_cast<std::size_t>(kThreads));
  EXPECT_TRUE(process_named);
  for (int t = 0; t < kThreads; ++t) EXPECT_TRUE(thread_names.count("worker" + std::to_string(t)));
  // No temporary file is left behind.
  int files = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator(dir)) ++files;
  EXPECT_EQ(files, 1);
  fs::remove_all(dir);
}

TEST(Trace, ArgsAndUnnamedThreadsAreRecorded) {
  const fs::path dir = temp_dir();
  Trace trace(0);
  trace.open((dir / "t.json").string());
  trace.complete("apply", "server", 10.0, 5.0, {{"shard", 2.0}});
  trace.complete("reply", "server", 25.0, 1.0);
  trace.close();
  const nlohmann::json doc = read_json(dir / "t.json");
  bool found = false, named = false;
  double apply_ts = -1, reply_ts = -1;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "X" && e["name"] == "reply") reply_ts = e["ts"].get<double>();
    if (e["ph"] == "X" && e["name"] == "apply") {
      found = true;
      apply_ts = e["ts"].get<double>();
      EXPECT_EQ(e["cat"], "server");
      EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 5.0);
      EXPECT_DOUBLE_EQ(e["args"]["shard"].get<double>(), 2.0);
    }
    if (e["ph"] == "M" && e["name"] == "thread_name") named = true;
  }
  EXPECT_TRUE(found);
  EXPECT_TRUE(named);  // a thread without set_thread_name still gets a track name
  EXPECT_NEAR(reply_ts - apply_ts, 15.0, 1e-3);  // one origin for every event of the rank
  fs::remove_all(dir);
}

// The files of ranks created at different moments share the host's monotonic clock, so a later
// event has a later timestamp whichever rank recorded it (what lets merged traces line up).
TEST(Trace, RanksShareTheHostClock) {
  const fs::path dir = temp_dir();
  Trace early(0);
  early.open((dir / "t.%r.json").string());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  Trace late(1);
  late.open((dir / "t.%r.json").string());
  early.complete("first", "compute", early.now_us(), 1.0);
  late.complete("second", "compute", late.now_us(), 1.0);
  early.close();
  late.close();
  auto ts_of = [&](const char* file, const char* name) {
    const nlohmann::json doc = read_json(dir / file);
    for (const auto& e : doc["traceEvents"])
      if (e["name"] == name) return e["ts"].get<double>();
    return -1.0;
  };
  const double first = ts_of("t.0.json", "first"), second = ts_of("t.1.json", "second");
  EXPECT_GT(first, 0.0);
  EXPECT_GE(second, first);
  fs::remove_all(dir);
}

TEST(Trace, DisabledTraceWritesNothing) {
  const fs::path dir = temp_dir();
  {
    Trace trace(1);
    EXPECT_FALSE(trace.enabled());
    TraceScope scope(&trace, "forward", "compute");
    trace.complete("x", "y", 0, 1);
    TraceScope null_scope(nullptr, "forward", "compute");
  }
  EXPECT_TRUE(fs::is_empty(dir));
  fs::remove_all(dir);
}

TEST(Trace, CloseIsIdempotentAndStopsRecording) {
  const fs::path dir = temp_dir();
  Trace trace(0);
  trace.open((dir / "t.json").string());
  trace.complete("a", "compute", 0, 1);
  trace.close();
  EXPECT_FALSE(trace.enabled());
  trace.complete("b", "compute", 0, 1);  // ignored
  trace.close();                         // no-op
  const nlohmann::json doc = read_json(dir / "t.json");
  int complete = 0;
  for (const auto& e : doc["traceEvents"]) complete += e["ph"] == "X";
  EXPECT_EQ(complete, 1);
  fs::remove_all(dir);
}

TEST(Trace, UnwritablePathThrowsNamingTheRank) {
  Trace trace(5);
  trace.open("/nonexistent_dir_for_starring/trace.%r.json");
  trace.complete("a", "compute", 0, 1);
  try {
    trace.close();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 5"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("trace.5.json"), std::string::npos) << e.what();
  }
}

// A full disk (the temp file is /dev/full): an error naming the rank and the cause, and neither
// the temp file nor a half-written trace is left.
TEST(Trace, FullDiskLeavesNoFileAndSaysWhy) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  const fs::path dir = temp_dir();
  const fs::path path = dir / "trace.3.json";
  const fs::path tmp = path.string() + ".tmp." + std::to_string(::getpid());
  fs::create_symlink("/dev/full", tmp);
  Trace trace(3);
  trace.open((dir / "trace.%r.json").string());
  for (int i = 0; i < 2000; ++i) trace.complete("step", "compute", i, 1);  // past any buffer
  try {
    trace.close();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 3: --trace: writing"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("No space left on device"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(fs::symlink_status(tmp)));
  EXPECT_FALSE(fs::exists(path));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace starring
