// INI files for `--config` and what the command line shares with them (common/config.cc):
// the reader, the suggestion for a mistyped option, and trimming.
#pragma once
#include <boost/program_options.hpp>
#include <string>
#include <vector>

namespace starring {

// `s` without leading and trailing blanks (spaces, tabs, CR, LF).
std::string trim(const std::string& s);

// "; did you mean --NAME?" for the option of `opts` a mistyped `name` most likely meant: the
// nearest (git's way: at most 2 edits, and fewer than half its letters), else the only one it
// begins (--segment: --segment-bytes; prefixes are not accepted as the option itself); "" if none.
// `refused`: names never suggested (an INI file's: config and help, which it may not hold).
std::string did_you_mean(std::string name, const boost::program_options::options_description& opts,
                         const std::string& dashes, std::vector<std::string> refused = {});

// Reads the INI file `path`: section headers are labels and dropped; a comment starts with '#'
// or ';' at the start of a line or after a blank; a value that begins with a quote runs to the
// next quote of the same kind. Every key is checked against `all`, and every value converted,
// so an unknown key or a bad value is one ConfigError naming the file and line.
boost::program_options::parsed_options parse_ini(
    const std::string& path, const boost::program_options::options_description& all);

}  // namespace starring
