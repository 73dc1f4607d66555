// Helpers shared by the config tests (test_config, test_config_use, test_input_checks): a command
// line parsed as main() passes it, and the one line of the ConfigError a parse or check throws.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "common/config.h"
#include "common/error.h"

namespace starring::test {

// parse_config on {command, args...} (argv[0] is the command name); --help prints nothing.
inline Config parse(const std::string& command, std::vector<std::string> args) {
  args.insert(args.begin(), command);
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  Config cfg;
  parse_config(command, static_cast<int>(argv.size()), argv.data(), cfg, nullptr);
  return cfg;
}

// The message of the ConfigError that f() throws, or "" when it throws none.
template <typename F>
std::string config_error(F&& f) {
  try {
    std::forward<F>(f)();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace starring::test
