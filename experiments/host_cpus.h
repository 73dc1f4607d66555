// The CPUs a rank may use and whether the ranks of a job time-share CPUs, for `starring train`'s
// summary (experiments/train_command.cc; the host name is common/gpu_assignment.h's
// this_host_name()); the host's load, for the benchmarks' headers.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace starring {

// The CPUs this rank may run on (its affinity, as `starring env` lists them); empty if unknown.
std::vector<int> usable_cpu_ids();
// How many: usable_cpu_ids()'s, or the hardware's where the affinity is unknown.
unsigned usable_cpus();
// The CPUs the ranks on `host` may use together (the union of their cpu_ids); 0 if none ran there.
unsigned host_cpus(const std::vector<nlohmann::json>& ranks, const std::string& host);
// The host whose ranks time-share its CPUs most, as "R ranks on C cpus of HOST", or "" when
// every host has a CPU per rank; `ranks` are the summary's (host, cpus, cpu_ids).
std::string oversubscription(const std::vector<nlohmann::json>& ranks);
// The 1-minute load average as /proc/loadavg writes it ("n/a" where there is none), so that a
// benchmark's reader can tell a quiet machine from a busy one.
std::string load_average();

}  // namespace starring
