// Rank 0's run output (trainer/metrics.h):
//   - Progress in "lines" mode (stderr not a terminal: logs, CI): one line every --log-every steps
//     and at the last step, with step/total, epoch, loss, samples/s and an m:ss ETA; "bar" mode
//     redraws one line with \r (at most every 100 ms, and always the last step) and message()
//     starts a fresh line; "off" and a disabled rank print nothing; "auto" is lines when stderr
//     is not a terminal (as under ctest);
//   - MetricsWriter: lines go to FILE.partial, renamed to FILE only by finish(); a write that fails
//     (a full disk: /dev/full) is reported once on stderr and makes finish() throw, leaving no
//     complete-looking FILE.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "trainer/metrics.h"

namespace starring {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

std::string run_progress(const std::string& mode, bool enabled, int total, int every) {
  testing::internal::CaptureStderr();
  Progress p(mode, total, every, enabled);
  for (int s = 1; s <= total; ++s) p.update(s, (s - 1) / 4, 2.5 / s, 1000.0 * s);
  p.done();
  return testing::internal::GetCapturedStderr();
}

TEST(Progress, LinesEveryNStepsAndAtTheLast) {
  const auto got = lines_of(run_progress("lines", true, 10, 4));
  ASSERT_EQ(got.size(), 3u);
  const std::regex line(
      R"(step (\d+)/10 epoch (\d+) loss ([0-9.]+) (\d+) samples/s ETA (\d+):([0-5]\d))");
  const int steps[] = {4, 8, 10};
  for (std::size_t i = 0; i < got.size(); ++i) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(got[i], m, line)) << got[i];
    const int s = std::stoi(m[1]);
    EXPECT_EQ(s, steps[i]);
    EXPECT_EQ(std::stoi(m[2]), (s - 1) / 4);
    EXPECT_NEAR(std::stod(m[3]), 2.5 / s, 1e-4);
    EXPECT_EQ(std::stoi(m[4]), 1000 * s);
  }
  EXPECT_EQ(got.back().substr(got.back().size() - 8), "ETA 0:00");  // nothing left
}

// The ETA is this run's time per step times the steps left, counted from resume_at: one step in
// at least 20 ms with 499 left is at least 10 s, printed as m:ss. Only a lower bound is checked
// (a loaded machine makes the step slower, never faster). Dividing by all steps since step 0 (a
// resumed run's ETA near 0:00) or printing minutes in the seconds field passed every other test.
TEST(Progress, EtaCountsThisRunsStepsAfterAResume) {
  testing::internal::CaptureStderr();
  Progress p("lines", 1000, 1, true);
  p.resume_at(500);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  p.update(501, 3, 1.0, 100.0);
  const auto got = lines_of(testing::internal::GetCapturedStderr());
  ASSERT_EQ(got.size(), 1u);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(got[0], m, std::regex(R"(ETA (\d+):([0-5]\d)$)"))) << got[0];
  EXPECT_GE(std::stoi(m[1]) * 60 + std::stoi(m[2]), 10) << got[0];
}

TEST(Progress, AutoIsLinesWhenStderrIsNotATerminal) {
  if (isatty(fileno(stderr))) GTEST_SKIP() << "stderr is a terminal";
  const std::string out = run_progress("auto", true, 6, 3);
  EXPECT_EQ(out.find('\r'), std::string::npos) << out;
  EXPECT_EQ(lines_of(run_progress("auto", true, 6, 3)).size(), 2u);
}

TEST(Progress, OffAndDisabledRanksPrintNothing) {
  EXPECT_EQ(run_progress("off", true, 10, 1), "");
  EXPECT_EQ(run_progress("lines", false, 10, 1), "");
  EXPECT_EQ(run_progress("bar", false, 10, 1), "");
}

TEST(Progress, BarRedrawsOneLineAndMessagesStartAFreshOne) {
  testing::internal::CaptureStderr();
  Progress p("bar", 4, 1, true);
  std::this_thread::sleep_for(std::chrono::milliseconds(120));  // redraws at most every 100 ms
  p.update(1, 0, 1.0, 10.0);
  p.update(2, 0, 0.8, 10.0);  // within 100 ms of the last draw: not drawn
  p.message("evaluation: accuracy 0.5");
  p.update(4, 0, 0.5, 20.0);  // the last step is always drawn
  p.done();
  const std::string out = testing::internal::GetCapturedStderr();
  ASSERT_EQ(out.rfind("\r[", 0), 0u) << out;
  EXPECT_NE(out.find("] step 1/4  epoch 0  loss 1.0000  10 samples/s  ETA "), std::string::npos)
      << out;
  EXPECT_NE(out.find(" \nevaluation: accuracy 0.5\n\r["), std::string::npos) << out;
  EXPECT_NE(out.find("[############################] step 4/4"), std::string::npos) << out;
  EXPECT_EQ(out.find("step 2/4"), std::string::npos) << out;
  EXPECT_EQ(out.back(), '\n');
}

struct TempDir {
  fs::path path;
  TempDir() {
    std::string t = (fs::temp_directory_path() / "starring_metrics_XXXXXX").string();
    path = ::mkdtemp(t.data());
  }
  ~TempDir() { fs::remove_all(path); }
};

// --lr 0.05 was written as 0.05000000074505806 (the float widened to double) in the summary and
// every metrics line: now the double of the float's shortest decimal form, which reads back as
// the same float.
TEST(JsonFloat, ShortestFormThatReadsBackAsTheSameFloat) {
  EXPECT_EQ(nlohmann::json(json_float(0.05f)).dump(), "0.05");
  EXPECT_EQ(nlohmann::json(json_float(0.02f * 4)).dump(), "0.08");
  for (float f : {0.05f, 1e-8f, 0.1f * 3, 3.4028235e38f, 1.17549435e-38f, 0.0f, -2.5f})
    EXPECT_EQ(static_cast<float>(json_float(f)), f) << f;
}

// A resumed run: the earlier run's lines are copied as they were, and every later line's time_s
// goes on from the later of earlier_s and the largest time_s among those lines, so the file's
// clock never runs back (lines not in time order included); lines without time_s are untouched.
// Writing later lines unshifted, or taking the last line's time instead of the largest, passed
// every other test.
TEST(MetricsWriter, ResumedLinesContinueTheEarlierClock) {
  TempDir d;
  auto run = [&](const std::vector<std::string>& earlier, double earlier_s) {
    const std::string file = (d.path / "r.jsonl").string();
    MetricsWriter w(file);
    w.write_earlier(earlier, earlier_s);
    w.write({{"step", 9}, {"time_s", 0.5}});
    w.write({{"step", 10}});
    w.finish();
    std::ifstream in(file);
    std::vector<nlohmann::json> got;
    for (std::string l; std::getline(in, l);) got.push_back(nlohmann::json::parse(l));
    return got;
  };
  // The checkpoint's seconds are later than the last line: they set the clock.
  auto got = run({R"({"step":1,"time_s":1.0})", R"({"step":2,"time_s":2.0})"}, 5.0);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_DOUBLE_EQ(got[0]["time_s"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(got[1]["time_s"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(got[2]["time_s"].get<double>(), 5.5);
  EXPECT_FALSE(got[3].contains("time_s"));
  // An earlier line later than the checkpoint's seconds, and not the last line: the largest.
  got = run({R"({"step":1,"time_s":7.0})", R"({"step":2,"time_s":3.0})"}, 4.0);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_DOUBLE_EQ(got[1]["time_s"].get<double>(), 3.0);
  EXPECT_DOUBLE_EQ(got[2]["time_s"].get<double>(), 7.5);
}

// A step's line is formatted without a JSON object (per-step cost on worker 0): every number
// reads back as the same double, integers stay integers, an integral double keeps its ".0" (as
// nlohmann::json writes it), not-a-number and infinities are null, keys keep their order, and a
// resumed run's time_s goes on from the earlier clock as a JSON record's does.
TEST(MetricsLine, NumbersReadBackExactly) {
  const std::vector<double> values = {0.1,    0.1 + 0.2,  1e-7,    2.0,      -0.0, 1e300,
                                      5e-324, 123456.789, -3.5e-5, 0.75 / 3, 1e21, 1.0 / 3};
  MetricsLine l;
  l.add_int("step", 12);
  l.add_int("bytes_sent", std::int64_t{1} << 40);
  for (std::size_t i = 0; i < values.size(); ++i) l.add("v" + std::to_string(i), values[i]);
  l.add("nan", std::nan(""));
  l.add("inf", -HUGE_VAL);
  std::string text;
  l.format(text);
  ASSERT_EQ(text.back(), '\n');
  EXPECT_EQ(text.rfind(R"({"step":12,"bytes_sent":1099511627776,"v0":0.1,)", 0), 0u) << text;
  EXPECT_NE(text.find(R"("v3":2.0,"v4":-0.0,)"), std::string::npos) << text;
  const auto j = nlohmann::json::parse(text);
  EXPECT_TRUE(j["step"].is_number_integer());
  EXPECT_EQ(j["bytes_sent"].get<std::int64_t>(), std::int64_t{1} << 40);
  for (std::size_t i = 0; i < values.size(); ++i) {
    const auto& v = j["v" + std::to_string(i)];
    EXPECT_TRUE(v.is_number_float()) << i << ": " << text;
    EXPECT_EQ(v.get<double>(), values[i]) << i;
  }
  EXPECT_TRUE(j["nan"].is_null());
  EXPECT_TRUE(j["inf"].is_null());

  TempDir d;
  const std::string file = (d.path / "l.jsonl").string();
  MetricsWriter w(file);
  w.write_earlier({R"({"step":1,"time_s":4.0})"}, 0);
  MetricsLine later;
  later.add_int("step", 2);
  later.add("time_s", 0.5);
  w.write(later);
  w.finish();
  std::ifstream in(file);
  std::vector<nlohmann::json> got;
  for (std::string s; std::getline(in, s);) got.push_back(nlohmann::json::parse(s));
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1]["step"], 2);
  EXPECT_DOUBLE_EQ(got[1]["time_s"].get<double>(), 4.5);
}

TEST(MetricsWriter, PartialUntilFinished) {
  TempDir d;
  const std::string file = (d.path / "m.jsonl").string();
  {
    MetricsWriter w(file);
    ASSERT_TRUE(w.enabled());
    w.write({{"step", 1}, {"loss", 2.0}});
    w.flush();
    EXPECT_FALSE(fs::exists(file));
    std::ifstream partial(file + ".partial");
    std::string line;
    ASSERT_TRUE(std::getline(partial, line));
    EXPECT_EQ(nlohmann::json::parse(line)["step"], 1);
    w.write({{"step", 2}});
    w.finish();
  }
  EXPECT_FALSE(fs::exists(file + ".partial"));
  std::ifstream in(file);
  std::vector<std::string> got;
  for (std::string l; std::getline(in, l);) got.push_back(l);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(nlohmann::json::parse(got[1])["step"], 2);
  EXPECT_FALSE(MetricsWriter("").enabled());
}

TEST(MetricsWriter, AFullDiskFailsAtFinishAndLeavesNoCompleteFile) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  TempDir d;
  const std::string file = (d.path / "m.jsonl").string();
  fs::create_symlink("/dev/full", file + ".partial");  // every write: ENOSPC
  testing::internal::CaptureStderr();
  std::string error;
  {
    MetricsWriter w(file);
    for (int s = 0; s < 3; ++s) {
      w.write({{"step", s}, {"pad", std::string(4096, 'x')}});
      w.flush();  // the run goes on: a failed write does not throw mid-step
    }
    try {
      w.finish();
    } catch (const Error& e) {
      error = e.what();
    }
  }
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(error.find("--metrics-file: "), std::string::npos) << error;
  EXPECT_NE(error.find("No space left on device"), std::string::npos) << error;
  EXPECT_FALSE(fs::exists(file));
  // Reported once, when it happened.
  const auto first = err.find("(the run goes on and fails at its end)");
  ASSERT_NE(first, std::string::npos) << err;
  EXPECT_EQ(err.find("(the run goes on", first + 1), std::string::npos) << err;
}

// The rename that completes the file can fail too (the folder made read-only during the run, or
// here, as root also sees it, a folder now standing at the file's name): a starring::Error the
// trainer turns into a failed run after its summary, like a full disk; std::filesystem's own
// exception escaped the trainer, and the summary (accuracy, throughput) was never printed.
TEST(MetricsWriter, AFailedRenameIsAnErrorAndKeepsThePartial) {
  TempDir d;
  const std::string file = (d.path / "m.jsonl").string();
  std::string error;
  {
    MetricsWriter w(file);
    w.write({{"step", 1}});
    fs::create_directories(fs::path(file) / "in_the_way");
    try {
      w.finish();
      ADD_FAILURE() << "finish() did not throw";
    } catch (const Error& e) {
      error = e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not a starring::Error: " << e.what();
    }
  }
  EXPECT_EQ(error.rfind("--metrics-file: ", 0), 0u) << error;
  EXPECT_NE(error.find(file + ".partial"), std::string::npos) << error;
  EXPECT_TRUE(fs::exists(file + ".partial"));
}

}  // namespace
}  // namespace starring
