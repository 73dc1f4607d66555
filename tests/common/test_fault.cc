// The line an injected fault prints just before its rank dies or goes silent (common/fault.h):
// the kind says what the rank does, and the host's wall clock to the microsecond lets a sweep
// time how long the rest of the job takes to end (scripts/starring_results.py, FAULT_LINE).
#include <gtest/gtest.h>

#include <chrono>
#include <regex>
#include <string>

#include "common/fault.h"

namespace starring {
namespace {

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

TEST(AnnounceFault, SaysTheKindTheStepAndTheWallClock) {
  const double before = unix_now();
  ::testing::internal::CaptureStderr();
  announce_fault("rank 1", "kill", 20);
  announce_fault("server rank 4", "hang", 7);
  const std::string err = ::testing::internal::GetCapturedStderr();
  const double after = unix_now();
  const std::regex line(
      R"(\[starring\] rank 1: --fault kill at step 20 \(unix time (\d+\.\d{6})\)\n)"
      R"(\[starring\] server rank 4: --fault hang: going silent at step 7 )"
      R"(\(unix time (\d+\.\d{6})\)\n)");
  std::smatch m;
  ASSERT_TRUE(std::regex_match(err, m, line)) << err;
  for (int i : {1, 2}) {
    const double t = std::stod(m[i].str());
    // the stamp is the wall clock when the line was written: between the two readings here
    // (to the printed microsecond)
    EXPECT_GE(t, before - 1e-6) << err;
    EXPECT_LE(t, after + 1e-6) << err;
  }
}

}  // namespace
}  // namespace starring
