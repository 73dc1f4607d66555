// The plain-data half of common/gpu_assignment.h (the CUDA probe is in common/cuda/).
#include "common/gpu_assignment.h"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>

#include "common/error.h"
#include "common/test_hosts.h"

namespace starring {

int gpu_for_local_rank(int local_rank, int gpu_count) {
  STARRING_CHECK(local_rank >= 0 && gpu_count > 0, "gpu_for_local_rank: local rank ", local_rank,
                 " with ", gpu_count, " GPUs");
  return local_rank % gpu_count;
}

std::string gpu_uuid_text(const unsigned char* u) {
  char buf[48];
  std::snprintf(buf, sizeof buf,
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
                u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
                u[14], u[15]);
  return buf;
}

std::string this_host_name() {
  std::string real;
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (init && !fin) {
    char name[MPI_MAX_PROCESSOR_NAME] = {0};
    int len = 0;
    if (MPI_Get_processor_name(name, &len) == MPI_SUCCESS && len > 0) real.assign(name, len);
  }
  if (real.empty()) {  // no MPI (yet, or any more)
    char name[256] = {0};
    real = gethostname(name, sizeof name - 1) == 0 ? name : "?";
  }
  const int test_host = test_host_index();
  return test_host < 0 ? real : real + "~test-host-" + std::to_string(test_host);
}

namespace {

// Ranks on `host`, and the GPUs they see (the most any of them sees).
std::pair<int, int> host_counts(const std::vector<GpuSlot>& slots, const std::string& host) {
  int ranks = 0, gpus = 0;
  for (const GpuSlot& s : slots)
    if (s.host == host) {
      ++ranks;
      gpus = std::max(gpus, s.visible);
    }
  return {ranks, gpus};
}

std::string plural(int n, const char* word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

}  // namespace

std::string one_gpu_per_rank_problem(const std::vector<GpuSlot>& slots, const std::string& what) {
  for (std::size_t r = 0; r < slots.size(); ++r)
    if (!slots[r].has_gpu())
      return detail::concat(what, " needs a GPU on every rank, but rank ", r, " (host ",
                            slots[r].host, ") has none (",
                            slots[r].note.empty() ? "no GPU" : slots[r].note,
                            "): run it with --device cuda on hosts with a GPU per rank");
  // The first rank seen on each GPU; a later rank on it is the first pair to report.
  std::map<std::tuple<std::string, std::string, std::string>, std::size_t> first;
  for (std::size_t r = 0; r < slots.size(); ++r) {
    const GpuSlot& s = slots[r];
    auto [it, fresh] = first.emplace(std::make_tuple(s.host, s.pci, s.uuid), r);
    if (fresh) continue;
    const auto [ranks, gpus] = host_counts(slots, s.host);
    return detail::concat(what, " needs one GPU per rank, but ranks ", it->second, " and ", r,
                          " both use cuda:", slots[it->second].ordinal, " on host ", s.host, " (",
                          s.pci, ", ", s.uuid, "); ", plural(ranks, "rank"), " there, ",
                          plural(gpus, "GPU"),
                          " visible: start at most as many ranks per node as it has GPUs");
  }
  return "";
}

std::vector<std::string> gpu_plan_lines(const std::vector<GpuSlot>& slots) {
  std::vector<std::string> hosts;  // in order of first rank
  for (const GpuSlot& s : slots)
    if (std::find(hosts.begin(), hosts.end(), s.host) == hosts.end()) hosts.push_back(s.host);
  std::vector<std::string> lines;
  for (const std::string& h : hosts) {
    std::string ranks;
    int on_gpu = 0;
    std::set<std::string> notes;
    std::set<std::tuple<std::string, std::string>> gpus_used;
    for (std::size_t r = 0; r < slots.size(); ++r) {
      const GpuSlot& s = slots[r];
      if (s.host != h) continue;
      ranks +=
          detail::concat(" ", r, "->", s.has_gpu() ? "cuda:" + std::to_string(s.ordinal) : "cpu");
      if (s.has_gpu()) {
        ++on_gpu;
        gpus_used.emplace(s.pci, s.uuid);
      } else {
        notes.insert(s.note);
      }
    }
    const int visible = host_counts(slots, h).second;
    const int gpus = static_cast<int>(gpus_used.size());
    std::string line = h + ": ranks" + ranks;
    if (gpus > 0)
      line += detail::concat(" (", gpus < on_gpu ? detail::concat(on_gpu, " ranks on ") : "",
                             plural(gpus, "GPU"), "; a rank sees ", visible, ")");
    for (const std::string& n : notes)
      if (!n.empty()) line += " [" + n + "]";
    lines.push_back(line);
  }
  // train keeps dedicated server ranks off the GPU (experiments/train_run.cc device_for_rank);
  // env is not told --backend or --servers, so it says so for any job that could have one
  if (slots.size() >= 2)
    lines.push_back("--backend ps --servers S: the last S ranks are servers, on the CPU");
  return lines;
}

}  // namespace starring
