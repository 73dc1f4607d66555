// INI files for `--config` (see config.cc's header for the scheme): the reader, and the
// "did you mean" suggestion shared with the command line's unknown options.
#include "common/config_ini.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "common/error.h"

namespace starring {
namespace po = boost::program_options;
namespace {

// Levenshtein distance (insertions, deletions, substitutions), for did_you_mean.
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// `t` without its comment: from the first '#' or ';' that begins the line or follows a blank
// ("lr = 0.1 ; note", "lr = 0.1 # note"). Elsewhere both are part of the value, as on the command
// line: run-name = exp#1, metrics-file = out#2.jsonl. `line_start`: t[0] begins the line (else it
// follows '=', and a '#' there is text: run-name =#1).
std::string strip_comment(const std::string& t, bool line_start = true) {
  for (std::size_t i = 0; i < t.size(); ++i)
    if ((t[i] == '#' || t[i] == ';') && (i == 0 ? line_start : t[i - 1] == ' ' || t[i - 1] == '\t'))
      return trim(t.substr(0, i));
  return trim(t);
}

// The value of a `key = value` line from the text after its '=' (`where`: "file:line: key"): the
// text without its comment, or, where it begins with a quote, what lies between that quote and the
// next one of the same kind ("exp #1" or 'exp #1': exp #1), '#' and ';' included, as configparser
// users and shells expect; a comment may follow, after a blank as anywhere ("x"#y is text after
// the quote: it was read as x and a comment). Before, `"exp #1"` read '"exp'. Quotes elsewhere
// in a value are text (a"b). An unclosed quote, or other text after the closing one, is an error.
std::string ini_value(const std::string& after_eq, const std::string& where) {
  const std::size_t at = after_eq.find_first_not_of(" \t\r");
  if (at == std::string::npos || (after_eq[at] != '"' && after_eq[at] != '\''))
    return strip_comment(after_eq, false);
  const char q = after_eq[at];
  const std::size_t close = after_eq.find(q, at + 1);
  STARRING_CONFIG_CHECK(close != std::string::npos, where, ": the value's opening quote ", q,
                        " is not closed");
  const std::string after = after_eq.substr(close + 1);
  const std::string rest = trim(after);
  STARRING_CONFIG_CHECK(strip_comment(after, false).empty(), where, ": '", rest,
                        "' after the closing quote (only a comment may follow it, after a blank)");
  return after_eq.substr(at + 1, close - at - 1);
}

}  // namespace

std::string trim(const std::string& s) {
  auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

// "; did you mean --NAME?" for the option of `opts` a mistyped `name` most likely meant: the
// nearest (git's way: at most 2 edits, and fewer than half its letters), else the only one it
// begins (--segment: --segment-bytes; prefixes are not accepted as the option itself); "" if none.
// `refused`: names never suggested (an INI file's: config and help, which it may not hold).
std::string did_you_mean(std::string name, const po::options_description& opts,
                         const std::string& dashes, std::vector<std::string> refused) {
  name.erase(0, name.find_first_not_of('-'));
  std::string best, prefix_of;
  std::size_t best_d = 3;
  int prefixes = 0;
  for (const auto& o : opts.options()) {
    const std::string& cand = o->long_name();
    if (cand.empty() || cand == name ||
        std::find(refused.begin(), refused.end(), cand) != refused.end())
      continue;
    const std::size_t d = edit_distance(name, cand);
    if (d < best_d) best_d = d, best = cand;
    if (name.size() >= 3 && cand.compare(0, name.size(), name) == 0) ++prefixes, prefix_of = cand;
  }
  if (best.empty() || 2 * best_d >= name.size()) best = prefixes == 1 ? prefix_of : "";
  return best.empty() ? "" : detail::concat("; did you mean ", dashes, best, "?");
}

// Reads the INI file, drops section headers and comments, and checks every key against the
// known options so an unknown key is reported with its line number. The options are built here,
// as Boost's parse_config_file builds them from `key=value` lines, which it cannot be given: it
// cuts a value at any '#' ('exp#1' read as 'exp', without a word).
po::parsed_options parse_ini(const std::string& path, const po::options_description& all) {
  std::error_code ec;  // a folder opens as an empty stream: every option would stay at its default
  STARRING_CONFIG_CHECK(!std::filesystem::is_directory(path, ec), "--config: '", path,
                        "' is a folder, not an INI file");
  std::ifstream in(path);
  STARRING_CONFIG_CHECK(in.good(), "--config: cannot read '", path, "' (missing or unreadable)");
  po::parsed_options parsed(&all);
  std::map<std::string, int> line_of;  // key -> its line, for errors found by the parser
  std::string sweep_file;              // a hint once the file shows a sweep file's sections
  std::string line;
  for (int no = 1; std::getline(in, line); ++no) {
    // Control bytes (a UTF-16 file's NULs, a binary file) are not text: echoed in the message
    // below they cut it at the first NUL or printed raw bytes. UTF-8 (bytes >= 0x80) is text.
    for (std::size_t i = 0; i < line.size(); ++i) {
      const auto c = static_cast<unsigned char>(line[i]);
      if ((c >= 0x20 && c != 0x7f) || c == '\t' || c == '\r') continue;
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02x", c);
      throw ConfigError(detail::concat(path, ":", no, ": byte ", hex, " at column ", i + 1,
                                       " is not text (an INI file is plain text: UTF-8 or ASCII)"));
    }
    const std::string t = trim(line);
    if (t.empty() || t.front() == '#' || t.front() == ';') continue;
    if (t.front() == '[') {
      const std::string h = strip_comment(t);
      STARRING_CONFIG_CHECK(h.back() == ']', path, ":", no, ": bad section header '", h, "'");
      const std::string name = trim(h.substr(1, h.size() - 2));
      if (name == "sweep" || name == "grid" || name.rfind("variant ", 0) == 0)
        sweep_file = " (a sweep file: run it with scripts/sweep.sh)";
      continue;
    }
    // The key ends at the first '='; a comment before it leaves the line without one.
    const auto eq = t.find('=');
    STARRING_CONFIG_CHECK(
        eq != std::string::npos && strip_comment(t.substr(0, eq)) == trim(t.substr(0, eq)), path,
        ":", no, ": expected 'key = value', got '", strip_comment(t), "'");
    std::string key = trim(t.substr(0, eq));
    STARRING_CONFIG_CHECK(
        key != "config" && key != "help" && all.find_nothrow(key, false), path, ":", no,
        ": unknown option '", key, "'",
        sweep_file.empty() ? did_you_mean(key, all, "", {"config", "help"}) : sweep_file);
    STARRING_CONFIG_CHECK(!line_of.count(key), path, ":", no, ": '", key,
                          "' given twice (first on line ", line_of[key], ")");
    line_of[key] = no;
    po::option o;
    o.string_key = key;
    o.value = {ini_value(t.substr(eq + 1), detail::concat(path, ":", no, ": ", key))};
    o.original_tokens = {key, o.value[0]};
    parsed.options.push_back(std::move(o));
  }
  try {
    po::variables_map scratch;  // converts every value now, so a bad one is named with its line
    po::store(parsed, scratch);
    return parsed;
  } catch (const po::error_with_option_name& e) {
    std::string key = e.get_option_name();
    key.erase(0, key.find_first_not_of('-'));
    const auto at = line_of.find(key);
    if (at == line_of.end()) throw ConfigError(detail::concat(path, ": ", e.what()));
    throw ConfigError(detail::concat(path, ":", at->second, ": ", e.what()));
  } catch (const po::error& e) {
    throw ConfigError(detail::concat(path, ": ", e.what()));
  }
}

}  // namespace starring
