// Trace: events recorded from several threads land in one Chrome trace-event file that parses as
// JSON, carries pid = rank, names every thread, and is written only when enabled; a path that
// cannot be written or a full disk is an error naming the rank, with no half-written file left.
// While the trace is open its events stream to "<file>.partial", which parses as JSON once the
// optional ']' of Chrome's JSON Array Format is appended; close() leaves only the file itself.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/trace.h"
#include "tests/common/trace_test_util.h"

namespace starring {
namespace {

using namespace trace_test;

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
  bool process_named = false, process_sorted = false;
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
    } else if (ph == "M" && e["name"] == "process_sort_index") {
      process_sorted = e["args"]["sort_index"] == kRank;
    }
  }
  EXPECT_EQ(complete, kThreads * (kEvents + 1));
  EXPECT_EQ(counters, kThreads * kEvents);
  EXPECT_EQ(tids_with_events.size(), static_cast<std::size_t>(kThreads));
  EXPECT_TRUE(process_named);
  // Merged, the ranks are listed in rank order (a sort index of 0 on every rank passed every
  // other test: helper-112's mutation test).
  EXPECT_TRUE(process_sorted);
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

// The files of ranks created at different moments share the host's clock, so a later event has a
// later timestamp whichever rank recorded it (what lets merged traces line up): an event of the
// later rank read between two of the earlier one lies between them. Each rank reads the wall
// clock once beside its steady clock, the best of 5 tries (about 0.1 us apart here), and the wall
// clock may be slewed by NTP (at most 500 ppm: 10 us over the 20 ms between the two creations),
// so 50 us is ample. Rank 1 skewed by -900 or +900 us (origin_us_ -/+ rank_ * 900 in trace.cc),
// or by +100, fails it; the check before (an event 2 ms later at least 1 ms later) passed -900.
TEST(Trace, RanksShareTheHostClock) {
  const fs::path dir = temp_dir();
  Trace early(0);
  early.open((dir / "t.%r.json").string());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  Trace late(1);
  late.open((dir / "t.%r.json").string());
  const double a = early.now_us(), b = late.now_us(), c = early.now_us();
  early.complete("a", "compute", a, 1.0);
  late.complete("b", "compute", b, 1.0);
  early.complete("c", "compute", c, 1.0);
  early.close();
  late.close();
  // microseconds since 1970: ts counts from the file's utc_day (midnight may fall between ranks)
  auto ts_of = [&](const char* file, const char* name) {
    const nlohmann::json doc = read_json(dir / file);
    double day = -1, ts = -1;
    for (const auto& e : doc["traceEvents"]) {
      if (e["ph"] == "M" && e["name"] == "process_name") day = e["args"].value("utc_day", -1.0);
      if (e["name"] == name) ts = e["ts"].get<double>();
    }
    EXPECT_GE(day, 0.0) << file;
    EXPECT_GE(ts, 0.0) << file << " " << name;
    return day * 86400e6 + ts;
  };
  const double ts_a = ts_of("t.0.json", "a"), ts_b = ts_of("t.1.json", "b"),
               ts_c = ts_of("t.0.json", "c");
  constexpr double kMarginUs = 50.0;
  EXPECT_GE(ts_b - ts_a, -kMarginUs) << "rank 1's clock is behind rank 0's";
  EXPECT_GE(ts_c - ts_b, -kMarginUs) << "rank 1's clock is ahead of rank 0's";
  fs::remove_all(dir);
}

// Times are in microseconds, the unit of Chrome's "ts" and "dur", of the UTC day on the wall
// clock: an event's ts lies between two readings of that clock taken around it (as microseconds
// since that day's 00:00 UTC, the day the process_name event's args.utc_day names), and a scope
// held for 20 ms lasts about 20000. The host's monotonic clock, used before, counts from each
// host's boot, so ranks on different hosts did not line up, and after weeks of uptime its
// microseconds kept too few bits below the nanosecond for Perfetto (which reads llround(ts * 1000)
// ns) to see an interval that ends where the next starts as not overlapping it (a simulation:
// 6% of such pairs at 30 days, 30% at 104 days), and it drops one of an overlapping pair.
TEST(Trace, TimesAreMicrosecondsOfTheUtcDay) {
  const fs::path dir = temp_dir();
  constexpr double kDayUs = 86400e6;
  const auto wall_us = [] {
    return std::chrono::duration<double, std::micro>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  // read before the Trace is created: read after it, a midnight between the two put them on
  // different days (the test failed there; with the wall clock set to run into midnight 0.24-0.35
  // ms after its first read, 8 of 101 offsets from 0 to 1 ms)
  const double before = wall_us();
  Trace trace(0);
  trace.open((dir / "t.json").string());
  {
    TraceScope scope(&trace, "nap", "compute");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const double after = wall_us();
  trace.close();
  const nlohmann::json doc = read_json(dir / "t.json");
  double day = -1;
  for (const auto& e : doc["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "process_name") day = e["args"].value("utc_day", -1.0);
  // the day of the Trace's creation: that of `before`, or of `after` if midnight fell between
  ASSERT_GE(day, std::floor(before / kDayUs));
  ASSERT_LE(day, std::floor(after / kDayUs));
  int found = 0;
  for (const auto& e : doc["traceEvents"]) {
    if (e["name"] != "nap") continue;
    ++found;
    const double ts = e["ts"].get<double>() + day * kDayUs, dur = e["dur"].get<double>();
    EXPECT_GE(ts, before - 1000.0);  // the wall clock is read once, beside the steady clock
    EXPECT_LE(ts + dur, after + 1000.0);
    EXPECT_GE(dur, 20000.0);
    EXPECT_LT(e["ts"].get<double>(), 2 * kDayUs);
  }
  EXPECT_EQ(found, 1);
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

TEST(Trace, CloseWhileAnotherThreadRecords) {
  const fs::path dir = temp_dir();
  Trace trace(1);
  trace.open((dir / "t.%r.json").string());
  std::atomic<bool> go{true};
  std::atomic<int> recorded{0};
  std::thread training([&] {
    trace.set_thread_name("compute");
    while (go) {
      TraceScope scope(&trace, "step", "compute");
      ++recorded;
    }
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (recorded < 3 * static_cast<int>(Trace::kFlushEvents) &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  trace.close();
  const int at_close = recorded;
  go = false;
  training.join();
  EXPECT_EQ(files_in(dir), std::vector<std::string>{"t.1.json"});
  const int written = count_phase(read_json(dir / "t.1.json")["traceEvents"], "X");
  EXPECT_GE(written, 3 * static_cast<int>(Trace::kFlushEvents));
  EXPECT_LE(written, at_close + 1);  // one more may have passed enabled() as close() began
  fs::remove_all(dir);
}

// Intervals that overlap on one thread (a PS worker's chunks in flight together) go on rows of
// their own with complete_on: Perfetto drops an interval that starts inside another of its row
// and ends after it. Each named row gets its own tid, named once, apart from the threads' tids,
// and the same name gives the same row.
TEST(Trace, OverlappingIntervalsGoOnRowsOfTheirOwn) {
  const fs::path dir = temp_dir();
  Trace trace(0);
  trace.open((dir / "t.json").string());
  trace.set_thread_name("comm");
  trace.complete("step", "compute", 0.0, 100.0);
  trace.complete_on("push_pull chunk 0", "push_pull", "comm", 10.0, 50.0);
  trace.complete_on("push_pull chunk 1", "push_pull", "comm", 20.0, 50.0);  // overlaps chunk 0's
  trace.complete_on("push_pull chunk 0", "push_pull", "comm", 70.0, 20.0);
  trace.close();
  const nlohmann::json events = read_json(dir / "t.json")["traceEvents"];
  std::map<int, std::string> rows;
  std::map<std::string, std::set<int>> tids_of;
  for (const auto& e : events) {
    if (e["ph"] == "M" && e["name"] == "thread_name") {
      EXPECT_EQ(rows.count(e["tid"].get<int>()), 0u) << e;  // named once
      rows[e["tid"].get<int>()] = e["args"]["name"].get<std::string>();
    }
    if (e["ph"] == "X") tids_of[e["name"].get<std::string>()].insert(e["tid"].get<int>());
  }
  ASSERT_EQ(tids_of["step"].size(), 1u);
  EXPECT_EQ(rows[*tids_of["step"].begin()], "comm");
  ASSERT_EQ(tids_of["push_pull"].size(), 2u);
  std::set<std::string> push_rows;
  for (int tid : tids_of["push_pull"]) push_rows.insert(rows[tid]);
  EXPECT_EQ(push_rows, (std::set<std::string>{"push_pull chunk 0", "push_pull chunk 1"}));
  EXPECT_EQ(rows.size(), 3u);
  fs::remove_all(dir);
}

// The process row says the rank and, given one, its part (a PS server's row read "rank 2" only).
TEST(Trace, TheProcessNameSaysTheRankAndItsPart) {
  const fs::path dir = temp_dir();
  for (const char* role : {"", "server 0"}) {
    Trace trace(2, role);
    trace.open((dir / "t.json").string());
    trace.close();
    const nlohmann::json doc = read_json(dir / "t.json");
    std::string name;
    for (const auto& e : doc["traceEvents"])
      if (e["ph"] == "M" && e["name"] == "process_name") name = e["args"]["name"];
    EXPECT_EQ(name, *role ? "rank 2 (server 0)" : "rank 2");
  }
  fs::remove_all(dir);
}

// Numbers are written in plain decimals, as nlohmann wrote them when the file was one JSON dump
// at the end: 1000000 as "1000000.0", not the shortest form "1e+06" (valid JSON, but a viewer's
// hand-written number reader need not take exponents); values too long for that keep exponents.
TEST(Trace, NumbersAreWrittenAsPlainDecimals) {
  const fs::path dir = temp_dir();
  {
    Trace trace(0);
    trace.open((dir / "t.json").string());
    trace.counter("bytes", 1000000.0);
    trace.complete("bucket", "comm", 0.0, 2.5e-7, {{"big", 1e300}, {"bytes", 4194304.0}});
    trace.close();
  }
  std::ifstream in(dir / "t.json");
  std::stringstream text;
  text << in.rdbuf();
  const std::string s = text.str();
  EXPECT_NE(s.find(":1000000.0"), std::string::npos) << s;
  EXPECT_NE(s.find(":4194304.0"), std::string::npos) << s;
  EXPECT_NE(s.find(":0.00000025"), std::string::npos) << s;
  EXPECT_EQ(s.find("e+06"), std::string::npos) << s;
  const nlohmann::json doc = read_json(dir / "t.json");
  bool big = false;
  for (const auto& e : doc["traceEvents"])
    if (e.contains("args") && e["args"].contains("big")) big = e["args"]["big"] == 1e300;
  EXPECT_TRUE(big);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace starring
