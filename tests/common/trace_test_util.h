// Helpers of the Trace tests (test_trace.cc, test_trace_files.cc): a fresh folder per test, and
// the trace files read back as JSON.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/scratch_dir.h"

namespace starring::trace_test {

namespace fs = std::filesystem;

// This process's own (tests/scratch_dir.h: its user id and pid in the name, removed at exit even
// when an ASSERT returned early): a folder named after the pid alone, left by a failed run of
// another user, stood in the way of a later process that got the same pid.
inline fs::path temp_dir() {
  return testing::scratch_dir(std::string("trace_") +
                              ::testing::UnitTest::GetInstance()->current_test_info()->name());
}

inline nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return nlohmann::json::parse(in);
}

// A .partial as Perfetto and chrome://tracing read it: the array with its closing ']' added.
inline nlohmann::json read_partial(const fs::path& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  std::stringstream text;
  text << in.rdbuf() << "]";
  return nlohmann::json::parse(text.str());
}

inline int count_phase(const nlohmann::json& events, const char* ph, const char* name = nullptr) {
  int n = 0;
  for (const auto& e : events) n += e["ph"] == ph && (!name || e["name"] == name);
  return n;
}

inline std::vector<std::string> files_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace starring::trace_test
