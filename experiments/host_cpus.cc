// host_cpus.h: the CPUs a rank may use, and time-sharing judged host by host.
#include "experiments/host_cpus.h"

#include <sched.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <thread>

namespace starring {

std::vector<int> usable_cpu_ids() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> ids;
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) ids.push_back(c);
  return ids;
}

unsigned usable_cpus() {
  const auto n = static_cast<unsigned>(usable_cpu_ids().size());
  return n > 0 ? n : std::max(1u, std::thread::hardware_concurrency());
}

// Ranks beyond the CPUs of their host time-share them: the host with the most ranks per CPU,
// as "R ranks on C cpus of HOST", or "" when every host has a CPU per rank. Host by host (8
// ranks on 2 hosts of 4 CPUs do not time-share), and a host's CPUs are the ones any of its ranks
// may use, as `starring env` counts them (ranks[].cpu_ids): 2 ranks bound each to a core of its
// own (mpirun --bind-to core, srun --cpu-bind=cores) do not time-share either.
namespace {

struct Host {
  unsigned ranks = 0, cpus = 0;  // cpus: the most one rank may use, where ids are missing
  std::set<int> ids;
  unsigned usable() const { return ids.empty() ? cpus : static_cast<unsigned>(ids.size()); }
};

std::map<std::string, Host> by_host(const std::vector<nlohmann::json>& ranks) {
  std::map<std::string, Host> hosts;
  for (const auto& r : ranks) {
    Host& h = hosts[r.value("host", std::string())];
    ++h.ranks;
    h.cpus = std::max(h.cpus, r.value("cpus", 0u));
    for (const auto& c : r.value("cpu_ids", nlohmann::json::array())) h.ids.insert(c.get<int>());
  }
  return hosts;
}

}  // namespace

unsigned host_cpus(const std::vector<nlohmann::json>& ranks, const std::string& host) {
  const auto hosts = by_host(ranks);
  const auto it = hosts.find(host);
  return it == hosts.end() ? 0 : it->second.usable();
}

std::string oversubscription(const std::vector<nlohmann::json>& ranks) {
  std::string worst;
  double most = 1;
  for (const auto& [host, h] : by_host(ranks)) {
    const unsigned cpus = h.usable();
    if (cpus > 0 && h.ranks > cpus && double(h.ranks) / cpus > most) {
      most = double(h.ranks) / cpus;
      worst = std::to_string(h.ranks) + " ranks on " + std::to_string(cpus) + " cpus of " +
              (host.empty() ? "one host" : host);
    }
  }
  return worst;
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string one;
  if (!(in >> one)) return "n/a";
  return one;
}

}  // namespace starring
