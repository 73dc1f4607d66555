// The line an injected fault prints just before its rank dies or goes silent (common/fault.h):
// the kind says what the rank does, and the host's wall clock to the microsecond lets a sweep
// time how long the rest of the job takes to end (scripts/starring_results.py, FAULT_LINE). And
// parse_fault, the one reader of --fault KIND:RANK:STEP.
#include <gtest/gtest.h>

#include <chrono>
#include <regex>
#include <string>

#include "common/error.h"
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

// --fault as every reader takes it (the trainer, a parameter server, the preflight checks): one
// parser. Its ServerLoop copy (sscanf) ignored a malformed spec, the trainer's took "kill:1x:5"
// as rank 1 (std::stoi), and the preflight's split on the first and last colon.
TEST(ParseFault, KindRankAndStepOrAConfigErrorNamingTheOption) {
  EXPECT_EQ(parse_fault("").kind, "");
  const FaultSpec f = parse_fault("hang:3:17");
  EXPECT_EQ(f.kind, "hang");
  EXPECT_EQ(f.rank, 3);
  EXPECT_EQ(f.step, 17);
  EXPECT_EQ(parse_fault("stop:0:2").kind, "stop");
  EXPECT_EQ(parse_fault("kill:12:99999999999").step, 99999999999);
  for (const char* bad : {"kill", "kill:1", "kill:1x:5", "kill:1:5x", "kill:-1:5", "kill::5",
                          "crash:1:5", "kill:1:2:3", "kill:1:99999999999999999999", " kill:1:5"}) {
    try {
      parse_fault(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("--fault expects kill:RANK:STEP"), std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace starring
