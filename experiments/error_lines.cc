// See error_lines.h.
#include "experiments/error_lines.h"

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/fault.h"

namespace starring {
namespace {

using detail::concat;

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

}  // namespace

int exit_code_of(const std::exception& e) { return dynamic_cast<const ConfigError*>(&e) ? 2 : 1; }

std::string error_line(const std::string& what, int rank) {
  if (rank < 0) return "starring: error: " + what;
  for (const std::string p : {"rank ", "server rank "}) {
    const std::string own = p + std::to_string(rank);
    if (starts_with(what, own) &&
        (what.size() == own.size() || what[own.size()] == ':' || what[own.size()] == ' '))
      return "starring: error: " + what;
  }
  return concat("starring: error: rank ", rank, ": ", what);
}

void print_line(const std::string& line) {
  std::fflush(stdout);
  // a progress bar cut short by the error: end its line first
  if (stderr_line_open()) std::fputc('\n', stderr);
  set_stderr_line_open(false);
  std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
}

void print_all(MPI_Comm comm, const std::string& what, int rank, int size) {
  int len = static_cast<int>(what.size());
  std::vector<int> lens(size), offsets(size);
  MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, comm);
  int total = 0;
  for (int r = 0; r < size; ++r) offsets[r] = std::exchange(total, total + lens[r]);
  std::string all(rank == 0 ? total : 0, '\0');
  MPI_Gatherv(what.data(), len, MPI_CHAR, all.data(), lens.data(), offsets.data(), MPI_CHAR, 0,
              comm);
  if (rank != 0) return;
  // Each message without its own "rank R: " prefix, so that ranks that failed the same way
  // (every rank: an unavailable backend) print one line, not one each.
  std::vector<std::pair<int, std::string>> msgs;
  for (int r = 0; r < size; ++r) {
    if (lens[r] == 0) continue;
    std::string m = all.substr(offsets[r], lens[r]);
    const std::string own = concat("rank ", r, ": ");
    if (starts_with(m, own)) m.erase(0, own.size());
    msgs.emplace_back(r, m);
  }
  bool same = msgs.size() == static_cast<std::size_t>(size);
  for (const auto& m : msgs) same = same && m.second == msgs[0].second;
  for (std::size_t i = 0; i < msgs.size(); ++i) {
    const std::string& mine = msgs[i].second;
    bool seen = false;
    for (std::size_t j = 0; j < i; ++j)
      seen = seen || mine.find(msgs[j].second) != std::string::npos ||
             msgs[j].second.find(mine) != std::string::npos;
    if (seen) continue;
    std::string also;  // other ranks with the very same message
    for (std::size_t j = i + 1; !same && j < msgs.size(); ++j)
      if (msgs[j].second == mine)
        also += (also.empty() ? " (also rank " : ", ") + std::to_string(msgs[j].first);
    print_line(error_line(mine, same ? -1 : msgs[i].first) + (also.empty() ? "" : also + ")"));
  }
}

}  // namespace starring
