#include "common/census.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

namespace starring {

std::string rank_list(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (i) s += i + 1 == ranks.size() ? " and " : ", ";
    s += std::to_string(ranks[i]);
  }
  return s;
}

void census_announce(Comm& comm, int tag) {
  // The note outlives this call and the calling thread (a send to a silent peer may never
  // complete, and the communication thread that timed out exits right after).
  static const int note = 1;
  for (int p = 0; p < comm.size(); ++p)
    if (p != comm.rank()) comm.isend(&note, sizeof note, p, tag).reset();  // released
}

std::string census_heard(Comm& comm, int tag, Seconds grace, const char* did, const char* not_do) {
  const int n = comm.size(), me = comm.rank();
  if (n < 2) return "";
  try {
    std::vector<char> heard(static_cast<std::size_t>(n), 0);
    heard[static_cast<std::size_t>(me)] = 1;
    int missing = n - 1, in = 0;
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::nanoseconds>(grace);
    auto req = comm.irecv(&in, sizeof in, kAnySource, tag);
    while (missing > 0 && std::chrono::steady_clock::now() < deadline) {
      if (!req->test()) {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        continue;
      }
      const int src = req->status().source;
      if (src >= 0 && src < n && !heard[static_cast<std::size_t>(src)]) {
        heard[static_cast<std::size_t>(src)] = 1;
        --missing;
      }
      req = comm.irecv(&in, sizeof in, kAnySource, tag);
    }
    req.reset();  // cancels the receive still posted
    std::vector<int> stuck, quiet;
    for (int p = 0; p < n; ++p)
      if (p != me) (heard[static_cast<std::size_t>(p)] ? stuck : quiet).push_back(p);
    if (quiet.empty()) return "";
    if (stuck.empty())
      return "; " + rank_list(quiet) + " did not " + not_do + " (silent, slow or elsewhere)";
    return "; " + rank_list(stuck) + " " + did + " too, " + rank_list(quiet) +
           " did not (silent, slow or elsewhere)";
  } catch (...) {
    return "";
  }
}

void census_join(Comm& comm) {
  try {
    census_announce(comm, tags::kCensus);
  } catch (...) {
  }
}

std::string census(Comm& comm, Seconds grace) {
  if (comm.size() < 2) return "";
  try {
    census_announce(comm, tags::kCensus);
  } catch (...) {
    return "";
  }
  return census_heard(comm, tags::kCensus, grace, "timed out here", "time out here");
}

}  // namespace starring
