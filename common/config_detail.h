// Value conversions shared by the option parser (config.cc) and its checks (config_check.cc).
// Each throws ConfigError naming `option` when the text is not a valid value. Exposed for tests
// and for commands that print sizes the way they are written on the command line.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace starring {

// "4096", "4K", "1M", "64M", "2G" (binary: K = 1024), optional trailing "B" or "iB",
// case-insensitive.
std::size_t parse_bytes(const std::string& option, const std::string& text);
// The shortest exact form parse_bytes reads back: 1048576 -> "1M", 1536 -> "1536".
std::string format_bytes(std::size_t bytes);
// The shortest text that reads back as v in its own type: 0.05 (not 0.0500000007 for a float),
// 1000000.1 (not 1e+06), 2000000 (not 2e+06); scientific outside [1e-4, 1e15): 1e-08.
std::string format_number(float v);
std::string format_number(double v);
// "256,128" -> {256, 128}. Entries must be integers; empty entries are an error.
std::vector<int> parse_int_list(const std::string& option, const std::string& text);
std::string join_ints(const std::vector<int>& v);
// "ring,mpi" -> {"ring", "mpi"}; surrounding spaces trimmed, empty entries an error.
std::vector<std::string> split_list(const std::string& option, const std::string& text);
// Hidden widths of a model preset: "default" {256, 128}, "wide" {4096, 4096}; {} otherwise.
std::vector<int> preset_hidden(const std::string& preset);
// This machine's physical memory in bytes (0 when the system does not say), for the checks that
// refuse a model or a bench message it cannot hold.
double physical_memory_bytes();
// "on"/"off" (also true/false, yes/no, 1/0).
bool parse_on_off(const std::string& option, const std::string& text);

}  // namespace starring
