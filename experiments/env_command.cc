// `starring env`: what a user checks before a run, printed by rank 0 -- the MPI library and the
// thread level it provides, the ranks and the host each runs on and the GPU each would compute
// on with --device cuda (gathered over the world Comm, so a silent rank fails with the usual
// timeout instead of hanging), whether the nccl backend would get one GPU per rank, the GPUs
// CUDA sees on rank 0's host, NCCL, OpenBLAS, and how this binary was built. It changes nothing
// and needs no data.
#include <cblas.h>
#include <mpi.h>
#include <sched.h>
#include <zlib.h>

#include <algorithm>
#include <boost/version.hpp>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "allreduce/nccl_info.h"
#include "common/blas_kernels.h"
#include "common/comm_util.h"
#include "common/device.h"
#include "common/error.h"
#include "common/fault.h"
#include "experiments/preflight.h"
#include "common/gpu_assignment.h"
#include "experiments/backend_registry.h"
#include "experiments/commands.h"
#include "starring_git_commit.h"  // generated at build time: STARRING_GIT_COMMIT

namespace starring {
namespace {

constexpr std::size_t kHostBytes = 1024;
constexpr int kEnvTag = tags::kEnvReport;

void row(const char* key, const std::string& value) {
  std::printf("  %-22s %s\n", key, value.c_str());
}

// The CPUs this process may run on, as ranges ("0-1", "0,2-3"); "?" when unknown.
std::string allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return "?";
  std::string out;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &set)) continue;
    int last = c;
    while (last + 1 < CPU_SETSIZE && CPU_ISSET(last + 1, &set)) ++last;
    if (!out.empty()) out += ',';
    out += std::to_string(c);
    if (last > c) out += '-' + std::to_string(last);
    c = last;
  }
  return out;
}

// The CPUs in a list allowed_cpus() wrote ("0-1,3" -> {0, 1, 3}); empty for "?".
std::set<int> parse_cpus(const std::string& list) {
  std::set<int> out;
  for (std::size_t at = 0; at < list.size();) {
    const std::size_t end = std::min(list.find(',', at), list.size());
    const std::string part = list.substr(at, end - at);
    const auto dash = part.find('-');
    const int a = std::atoi(part.c_str());
    const int b = dash == std::string::npos ? a : std::atoi(part.c_str() + dash + 1);
    if (std::isdigit(static_cast<unsigned char>(part[0])))
      for (int c = a; c <= b; ++c) out.insert(c);
    at = end + 1;
  }
  return out;
}

// "hostname\ncpus\nallowed cpus\nordinal\nvisible\npci\nuuid\nnote" for this rank: its host
// and the GPU it would compute on (probe_gpu_slot).
std::string this_host(int local_rank) {
  const GpuSlot g = probe_gpu_slot(local_rank);
  std::string note = g.note;
  std::replace(note.begin(), note.end(), '\n', ' ');
  return this_host_name() + "\n" + std::to_string(std::thread::hardware_concurrency()) + "\n" +
         allowed_cpus() + "\n" + std::to_string(g.ordinal) + "\n" + std::to_string(g.visible) +
         "\n" + g.pci + "\n" + g.uuid + "\n" + note;
}

// The lines of a this_host() text.
std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> out;
  std::size_t at = 0;
  for (std::size_t nl; (nl = text.find('\n', at)) != std::string::npos; at = nl + 1)
    out.push_back(text.substr(at, nl - at));
  out.push_back(text.substr(at));
  out.resize(std::max<std::size_t>(out.size(), 8));
  return out;
}

// Every rank's GPU slot, from the texts gather_hosts() collected.
std::vector<GpuSlot> gpu_slots(const std::vector<std::string>& hosts) {
  std::vector<GpuSlot> slots;
  for (const std::string& h : hosts) {
    const std::vector<std::string> f = split_lines(h);
    GpuSlot g;
    g.host = f[0];
    g.ordinal = f[3].empty() ? -1 : std::atoi(f[3].c_str());
    g.visible = std::atoi(f[4].c_str());
    g.pci = f[5];
    g.uuid = f[6];
    g.note = f[7];
    slots.push_back(g);
  }
  return slots;
}

// Variables that change how communication or compute behaves, as this rank sees them.
void print_environment() {
  static const char* const kPrefixes[] = {
      "NCCL_",         "UCX_",         "OMPI_MCA_btl",         "OMPI_MCA_pml",
      "OMPI_MCA_coll", "OMPI_MCA_osc", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS",
      "OPENBLAS_",        // threads, kernels, cache sizes
      "STARRING_TEST_"};  // test hooks (common/fault.h, common/test_hosts.h)
  std::printf("Environment (rank 0)\n");
  int shown = 0;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    for (const char* p : kPrefixes)
      if (kv.rfind(p, 0) == 0) {
        const auto eq = kv.find('=');
        row(kv.substr(0, eq).c_str(), eq == std::string::npos ? "" : kv.substr(eq + 1));
        ++shown;
        break;
      }
  }
  if (!shown)
    row("(none set)",
        "NCCL_*, UCX_*, OMPI_MCA_{btl,pml,coll,osc}*, CUDA_VISIBLE_DEVICES, "
        "OMP_NUM_THREADS, OPENBLAS_*, STARRING_TEST_*");
}

// Every rank's host line, on rank 0 (empty elsewhere).
std::vector<std::string> gather_hosts(Comm& world) {
  std::string mine = this_host(world.node_rank());
  mine.resize(kHostBytes, '\0');
  std::vector<std::string> all;
  if (world.rank() != 0) {
    world.send(mine.data(), kHostBytes, 0, kEnvTag, world.timeout());
    return all;
  }
  all.push_back(mine.c_str());
  std::string buf(kHostBytes, '\0');
  for (int r = 1; r < world.size(); ++r) {
    recv_exact(world, buf.data(), kHostBytes, r, kEnvTag, world.timeout(), "its host line");
    all.push_back(buf.c_str());
  }
  return all;
}

std::string thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE:
      return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
      return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
      return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE:
      return "MPI_THREAD_MULTIPLE";
    default:
      return "unknown (" + std::to_string(level) + ")";
  }
}

// CUDA encodes versions as 1000 * major + 10 * minor.
std::string cuda_version(int v) {
  if (v <= 0) return "none";
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

void print_mpi(int size, const std::vector<std::string>& hosts) {
  char lib[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int len = 0, major = 0, minor = 0, provided = 0;
  MPI_Get_library_version(lib, &len);
  MPI_Get_version(&major, &minor);
  MPI_Query_thread(&provided);
  std::string first_line(lib, static_cast<std::size_t>(len));
  first_line = first_line.substr(0, first_line.find_first_of("\n,"));
  std::printf("MPI\n");
  row("library", first_line);
  row("standard", std::to_string(major) + "." + std::to_string(minor));
  row("thread level", thread_level_name(provided) +
                          (provided < MPI_THREAD_MULTIPLE ? "  (starring needs MULTIPLE)" : ""));
  row("world size", std::to_string(size) + (size == 1 && !started_by_launcher()
                                                ? "  (started without mpirun: this process alone)"
                                                : ""));
  struct Host {
    int cpus = 0;
    std::set<int> usable;  // the CPUs some rank on it may use (empty: unknown)
    std::vector<int> ranks;
    std::string binding;  // "rank 0: cpus 0, rank 1: cpus 1"
  };
  std::map<std::string, Host> by_host;
  for (int r = 0; r < static_cast<int>(hosts.size()); ++r) {
    const std::vector<std::string> f = split_lines(hosts[r]);
    Host& h = by_host[f[0]];
    h.cpus = std::atoi(f[1].c_str());
    h.ranks.push_back(r);
    const std::set<int> allowed = parse_cpus(f[2]);
    h.usable.insert(allowed.begin(), allowed.end());
    if (!h.binding.empty()) h.binding += ", ";
    h.binding += std::to_string(r) + ": " + f[2];
  }
  for (const auto& [name, h] : by_host) {
    std::string list;
    for (int r : h.ranks) {
      if (!list.empty()) list += ',';
      list += std::to_string(r);
    }
    row(("host " + name + " (" + std::to_string(h.cpus) + " cpus)").c_str(), "ranks " + list);
    row("  cpus per rank", h.binding);
    // Ranks limited (affinity, a container's cpuset) to fewer CPUs than the host has share those.
    const int cpus = h.usable.empty() ? h.cpus : static_cast<int>(h.usable.size());
    if (static_cast<int>(h.ranks.size()) > cpus)
      row("  oversubscribed", std::to_string(h.ranks.size()) + " ranks on " + std::to_string(cpus) +
                                  " cpus: they time-share; wall-clock scaling measures the host");
  }
}

// Which GPU each rank computes on with --device cuda, per host, and whether the nccl backend
// (one GPU per rank) would accept this job's ranks.
void print_gpu_plan(const std::vector<GpuSlot>& slots) {
  const std::vector<std::string> lines = gpu_plan_lines(slots);
  for (std::size_t i = 0; i < lines.size(); ++i) row(i == 0 ? "--device cuda" : "", lines[i]);
  if (nccl_version_string() == "not built") {
    row("nccl backend", "not built");
    return;
  }
  const std::string problem = one_gpu_per_rank_problem(slots, "it");
  row("nccl backend", problem.empty() ? "every rank has a GPU of its own: usable"
                                      : "would refuse this job: " + problem);
}

void print_gpus(const GpuInfo& g, const std::vector<GpuSlot>& slots) {
  std::printf("CUDA (GPUs listed: rank 0's host)\n");
  row("built", g.built ? "yes" : "no");
  if (g.built) {
    // cudaDriverGetVersion: the newest CUDA the installed driver supports (nvidia-smi's "CUDA
    // Version"), not the driver's own release number; 0 without a driver.
    row("driver",
        g.driver_version > 0 ? "supports CUDA " + cuda_version(g.driver_version) : "none found");
    row("runtime", g.runtime_version > 0 ? "CUDA " + cuda_version(g.runtime_version) : "none");
  }
  if (g.gpus.empty()) row("GPUs", "none usable" + (g.error.empty() ? "" : ": " + g.error));
  for (std::size_t i = 0; i < g.gpus.size(); ++i) {
    const auto& d = g.gpus[i];
    char mem[64];
    std::snprintf(mem, sizeof mem, "%.1f GiB", double(d.mem_bytes) / double(1ull << 30));
    row(("GPU " + std::to_string(i)).c_str(), d.name + ", " + mem + ", compute capability " +
                                                  std::to_string(d.cc_major) + "." +
                                                  std::to_string(d.cc_minor));
  }
  // Without CUDA in the build there is no cuBLAS to try: "not built", as NCCL says.
  row("cuBLAS", g.cublas ? "available" : g.built ? "not available" : "not built");
  row("NCCL", nccl_version_string());
  row("--device auto picks", g.gpus.empty() ? "cpu" : "cuda");
  print_gpu_plan(slots);
}

// Why OpenBLAS runs `now` threads when the variable it reads (the first set of these, in its
// order) asks for more: it caps the count at the CPUs the process may use. Empty when no
// variable asks for a count or OpenBLAS runs what it asks.
std::string blas_threads_note(int now) {
  for (const char* name : {"OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"}) {
    const char* value = std::getenv(name);
    const int asked = value ? std::atoi(value) : 0;
    if (asked <= 0) continue;
    if (asked <= now) return "";
    const int cpus = static_cast<int>(parse_cpus(allowed_cpus()).size());
    return std::string(name) + "=" + value + ": OpenBLAS caps it" +
           (cpus == now ? " at the " + std::to_string(cpus) + (cpus == 1 ? " CPU" : " CPUs") +
                              " this process may use"
                        : "");
  }
  return "";
}

void print_blas_and_build(const Config& cfg, const GpuInfo& gpu) {
  std::printf("OpenBLAS\n");
  const int threads = openblas_get_num_threads();
  row("threads now", std::to_string(threads) + "  (train and bench set --threads " +
                         std::to_string(cfg.train.threads) + ")");
  if (const std::string note = blas_threads_note(threads); !note.empty()) row("", note);
  row("config", openblas_get_config());
  row("core", openblas_get_corename());
  if (const std::string note = blas_core_note(); !note.empty()) row("", note);
  std::printf("StarRing build\n");
  row("commit", build_commit());
#ifdef NDEBUG
  row("build type", "optimized (NDEBUG)");
#else
  row("build type", "debug (assertions on)");
#endif
#ifdef __clang__
  row("compiler", std::string("clang ") + __clang_version__);
#else
  row("compiler", std::string("gcc ") + __VERSION__);
#endif
  row("C++", std::to_string(__cplusplus));
  row("GPU code", std::string("CUDA ") + (gpu.built ? "yes" : "no") + ", NCCL " +
                      (nccl_version_string() == "not built" ? "no" : "yes"));
  row("Boost", std::to_string(BOOST_VERSION / 100000) + "." +
                   std::to_string(BOOST_VERSION / 100 % 1000) + "." +
                   std::to_string(BOOST_VERSION % 100));
  row("zlib", zlibVersion());
  std::string names;
  for (const auto& n : BackendRegistry::instance().names()) {
    if (!names.empty()) names += ' ';
    names += n;
  }
  row("backends", names);
}

}  // namespace

const char* build_commit() { return STARRING_GIT_COMMIT; }

int run_env(Config& cfg, std::shared_ptr<Comm> world) {
  world->set_timeout(Seconds(cfg.sync.timeout_s));
  std::vector<std::string> hosts = gather_hosts(*world);
  if (world->rank() == 0) {
    test_stop_point("env-report", 0);  // tests: rank 0 slow in its own part (common/fault.h)
    print_mpi(world->size(), hosts);
    GpuInfo gpu = query_gpus();
    std::vector<GpuSlot> slots = gpu_slots(hosts);
    print_gpus(gpu, slots);
    print_blas_and_build(cfg, gpu);
    print_environment();
    std::fflush(stdout);
  }
  // Rank 0 alone queries the GPUs (the CUDA driver's start-up: seconds on a host without
  // persistence mode) and prints: the others wait for it here, with room for that (as bench for
  // its memcpy reference), not in the end's agreement on the outcome, whose 2 x --timeout + 10 s
  // would name a healthy rank 0 at a short --timeout.
  world->barrier(Seconds(std::max(world->timeout().count(), 120.0)));
  return 0;
}

}  // namespace starring
