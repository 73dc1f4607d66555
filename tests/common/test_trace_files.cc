// Trace: what a trace leaves on disk when writing it goes wrong (a path that cannot be written, a
// close that cannot complete the file, a full disk), the events streamed to "<file>.partial"
// while the trace is open, and a rerun over a stale .partial. Split from test_trace.cc (same
// binary).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/trace.h"
#include "tests/common/trace_test_util.h"

namespace starring {
namespace {

using namespace trace_test;

TEST(Trace, UnwritablePathThrowsNamingTheRank) {
  Trace trace(5);
  try {
    trace.open("/nonexistent_dir_for_starring/trace.%r.json");  // the .partial is created here
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 5"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("trace.5.json.partial"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(trace.enabled());
  trace.close();  // nothing to write
}

// Opens `trace` (rank 3) as dir/trace.%r.json, records 2000 events and closes it: what close()
// threw, or "" (and a failure) when it did not throw.
std::string failed_close(Trace& trace, const fs::path& dir) {
  trace.open((dir / "trace.%r.json").string());
  for (int i = 0; i < 2000; ++i) trace.complete("step", "compute", i, 1);
  try {
    trace.close();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected close() to throw";
  return "";
}

// A close() that cannot complete the file (here the name is taken by a folder): an error naming
// the rank, the file and the cause that says where the events are, and the .partial keeps them.
TEST(Trace, AFailedCloseSaysTheEventsStayInThePartial) {
  const fs::path dir = temp_dir();
  const fs::path path = dir / "trace.3.json";
  fs::create_directories(path / "taken");
  Trace trace(3);
  const std::string what = failed_close(trace, dir);
  EXPECT_NE(what.find("rank 3: --trace: cannot rename"), std::string::npos) << what;
  EXPECT_NE(what.find("stay in " + path.string() + ".partial"), std::string::npos) << what;
  EXPECT_TRUE(fs::is_directory(path));
  EXPECT_EQ(count_phase(read_json(path.string() + ".partial")["traceEvents"], "X"), 2000);
  fs::remove_all(dir);
}

// A full disk (the .partial is /dev/full): close() fails naming the rank, the .partial and the
// cause, and leaves no trace file.
TEST(Trace, FullDiskLeavesNoFileAndSaysWhy) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  const fs::path dir = temp_dir();
  fs::create_symlink("/dev/full", dir / "trace.3.json.partial");
  Trace trace(3);
  const std::string what = failed_close(trace, dir);
  EXPECT_NE(what.find("rank 3: --trace: writing " + (dir / "trace.3.json.partial").string()),
            std::string::npos)
      << what;
  EXPECT_NE(what.find("No space left on device"), std::string::npos) << what;
  EXPECT_EQ(files_in(dir), std::vector<std::string>{"trace.3.json.partial"});
  fs::remove_all(dir);
}

// While the trace is open its events are in the .partial: the writer appends a full buffer on
// its own (no flush() call here), and what it wrote parses as Chrome's JSON Array Format without
// the closing ']' (as Perfetto and chrome://tracing read it), with the process and the threads
// named. close() then leaves only the trace file, the JSON object it was before the events
// streamed, holding every event once and each thread's name once.
TEST(Trace, EventsStreamToThePartialBeforeClose) {
  const fs::path dir = temp_dir();
  const fs::path partial = dir / "t.2.json.partial";
  constexpr int kEvents = 2 * static_cast<int>(Trace::kFlushEvents) + 7;
  Trace trace(2);
  trace.open((dir / "t.%r.json").string());
  ASSERT_TRUE(fs::exists(partial));
  std::thread([&trace] {
    trace.set_thread_name("comm");
    for (int i = 0; i < kEvents; ++i) trace.complete("bucket", "comm", i, 1, {{"bytes", i}});
  }).join();
  int streamed = 0;  // the writer runs on its own schedule: wait for it (bounded)
  for (const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
       std::chrono::steady_clock::now() < deadline;
       std::this_thread::sleep_for(std::chrono::milliseconds(10))) {
    std::ifstream in(partial);
    std::stringstream text;
    text << in.rdbuf() << "]";
    const auto events = nlohmann::json::parse(text.str(), nullptr, false);  // may be mid-write
    if (!events.is_discarded() &&
        (streamed = count_phase(events, "X")) >= static_cast<int>(Trace::kFlushEvents))
      break;
  }
  EXPECT_GE(streamed, static_cast<int>(Trace::kFlushEvents));
  trace.flush();
  const nlohmann::json events = read_partial(partial);
  EXPECT_EQ(count_phase(events, "X"), kEvents);
  EXPECT_EQ(count_phase(events, "M", "process_name"), 1);
  int comm_named = 0;
  double last_bytes = -1;
  for (const auto& e : events) {
    comm_named += e["name"] == "thread_name" && e["args"]["name"] == "comm";
    if (e["ph"] == "X") last_bytes = e["args"]["bytes"].get<double>();
  }
  EXPECT_EQ(comm_named, 1);
  EXPECT_EQ(last_bytes, static_cast<double>(kEvents - 1));  // in the order recorded
  trace.complete("after_flush", "compute", 0, 1);           // the main thread: tid 1, unnamed
  trace.close();
  EXPECT_EQ(files_in(dir), std::vector<std::string>{"t.2.json"});
  const nlohmann::json doc = read_json(dir / "t.2.json");
  EXPECT_EQ(doc["displayTimeUnit"], "ms");
  const nlohmann::json& all = doc["traceEvents"];
  EXPECT_EQ(count_phase(all, "X"), kEvents + 1);
  std::set<std::string> names;
  for (const auto& e : all)
    if (e["name"] == "thread_name") names.insert(e["args"]["name"].get<std::string>());
  EXPECT_EQ(names, (std::set<std::string>{"comm", "thread 1"}));
  EXPECT_EQ(count_phase(all, "M"), 4);  // the process's name and sort index, 2 threads
  fs::remove_all(dir);
}

// A run into the path of an earlier run that was killed: the stale .partial (cut in the middle
// of an event here) is emptied at open(), and after close() only this run's file is left.
TEST(Trace, RerunReplacesAStalePartial) {
  const fs::path dir = temp_dir();
  const fs::path partial = dir / "t.json.partial";
  std::ofstream(partial) << "[\n{\"ph\":\"X\",\"name\":\"stale\"},\n{\"ph\":\"X\",\"na";
  Trace trace(0);
  trace.open((dir / "t.json").string());
  trace.complete("fresh", "compute", 0, 1);
  trace.flush();
  const nlohmann::json events = read_partial(partial);  // parses: the stale bytes are gone
  EXPECT_EQ(count_phase(events, "X", "fresh"), 1);
  EXPECT_EQ(count_phase(events, "X"), 1);
  trace.close();
  EXPECT_EQ(files_in(dir), std::vector<std::string>{"t.json"});
  const nlohmann::json doc = read_json(dir / "t.json");
  EXPECT_EQ(count_phase(doc["traceEvents"], "X", "fresh"), 1);
  EXPECT_EQ(count_phase(doc["traceEvents"], "X"), 1);
  fs::remove_all(dir);
}

// Ctrl-C closes the trace on the interrupt thread while the training thread goes on recording:
// the file is whole, with the events recorded until then, and later events are dropped.

}  // namespace
}  // namespace starring
