// What every rank of a `starring bench` job must agree on before anything is measured, checked
// together (each rank's own checks are preflight's, experiments/preflight.h).
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "common/comm.h"
#include "common/config.h"

namespace starring {

// The options that set what a bench job's ranks do together (sizes, iterations, check, backends
// and their settings), as "name value" lines in a fixed order, for agree_on_bench_options.
std::vector<std::string> bench_schedule(const Config& cfg);

// Every rank compares its bench_schedule with rank 0's, and all throw the same ConfigError (exit
// 2) when one differs, naming the lowest such rank and the first option, both values: ranks
// started with other options (mpirun's MPMD `a : b`, a --config file that differs between hosts)
// ran other sizes or iterations, and failed late, each with a misleading line ("corrupt
// shared-memory ring message", a timeout after --timeout, MPI_ERR_TRUNCATE).
void agree_on_bench_options(const Config& cfg, Comm& world);

// One rank's memory at the bench's largest message: the bytes it will hold there at least, and
// its host's name and physical memory.
struct RankMemory {
  std::string host;
  double host_memory = 0;  // bytes; 0 when the system does not say
  double holds = 0;        // bytes
};

// The problem with `ranks` (one entry per rank, by rank), or "" when every host can hold its ranks'
// buffers together: the first host whose ranks' `holds` add up to more than its memory.
std::string host_memory_problem(const std::vector<RankMemory>& ranks, std::size_t max_bytes);

// Every rank sends rank 0 its RankMemory (`holds`: this rank's bytes at -e), and all throw the same
// ConfigError when host_memory_problem finds one: preflight refuses an -e that one rank cannot
// hold, but every rank on a host holds its own buffers, and 2 ranks at 9G each on a 23.6 GiB
// machine passed it and were killed by the kernel (SIGKILL) in the first row.
void check_bench_host_memory(Comm& world, double holds, std::size_t max_bytes);

}  // namespace starring
