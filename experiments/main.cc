// starring: train | bench | bench-model | env. See README.md.
//
// Errors: every failure is an exception, reported as ONE line on stderr and a non-zero exit
// (worded and printed by experiments/error_lines.h):
//   starring: error: <what failed>           every rank failed the same way (printed once)
//   starring: error: rank R: <what failed>   rank R failed (the rank is not repeated when the
//                                            message already starts with "rank R")
// Exit codes: 2 bad input (a ConfigError: options, config or data files, output paths), 1 any
// other failure (a timeout, a dead peer, ...). Two phases, so that bad input never needs
// MPI_Abort (whose launcher banner buries the message):
//  1. Setup, before any communication: parse the options and check what each rank can check
//     alone (output paths writable plain files, data files present with sane headers, on rank 0
//     the checkpoint to resume from). Every rank gets here, so one MPI_Allreduce tells all of
//     them whether and where it failed; the first failing rank prints its line and all ranks
//     MPI_Finalize and exit together.
//  2. The command. An error may hit every rank (an unknown backend, a corrupt data file) or only
//     some (a dead or silent peer, while the others wait for it). At the end every rank takes
//     part in a non-blocking all-reduce of the outcome on a communicator of its own; a failing
//     rank waits up to kGrace for it: when every rank arrives, rank 0 prints the distinct
//     messages and all finalize; otherwise the failing rank prints its line and calls MPI_Abort,
//     which makes mpirun stop every rank. A rank whose failure another rank reported to it (a
//     parameter server's stop, starring::Relayed) waits kRelayedWait longer, so that the
//     reporting rank's line comes first and its MPI_Abort ends this one before it speaks; if
//     it speaks all the same (mpirun slow to stop it), its line is the short form. A rank that
//     succeeded waits there at most 2 x --timeout + 10 s (train, bench, env), then names the
//     ranks that did not come.
// scripts/mpirun.sh condenses what mpirun prints after that to one line.
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/blas_kernels.h"
#include "common/census.h"
#include "common/config.h"
#include "common/error.h"
#include "common/fault.h"
#include "common/mpi_comm.h"
#include "common/stall_watch.h"
#include "experiments/commands.h"
#include "experiments/error_lines.h"
#include "experiments/interrupt_wait.h"
#include "experiments/preflight.h"
#include "experiments/rank_notes.h"

namespace {

using starring::Comm;
using starring::Config;
using starring::ConfigError;
using starring::error_line;
using starring::exit_code_of;
using starring::Notes;
using starring::print_all;
using starring::print_line;
using starring::detail::concat;
using Command = int (*)(Config&, std::shared_ptr<Comm>);
using Clock = std::chrono::steady_clock;

constexpr std::chrono::seconds kGrace{3};          // failing ranks wait this long for the others
constexpr std::chrono::seconds kRelayedWait{2};    // ... and a rank told of another's failure more
constexpr std::chrono::seconds kFinalize{10};      // MPI_Finalize after a failure: exit if stuck
constexpr std::chrono::seconds kInterruptWait{2};  // Ctrl-C: for the host's other ranks' hooks
constexpr double kInitAllowance = 10;  // the options agreement: --timeout plus this, as MPI_Init
constexpr int kExitTag = 1;            // the exit notes (leave_together), on the `agree` comm
constexpr int kArriveTag = 2;          // the notes of the outcome's agreement, on `agree` too
// train, bench, env: a rank that finished waits at most 2 x --timeout plus this for the others
// at the outcome's agreement (see run).
constexpr double kEndAllowance = 10;
// The start-up notes (setup), on MPI_COMM_WORLD before any other message: a tag no other
// message on it uses (common/comm.h: tags), all received before setup returns.
constexpr int kSetupTag = starring::tags::kStartup;
constexpr double kResumeAllowance = 60;  // setup with --resume: rank 0 reads the checkpoint

const std::map<std::string, Command>& commands() {
  static const std::map<std::string, Command> table{
      {"train", starring::run_train},
      {"bench", starring::run_bench},
      {"bench-model", starring::run_bench_model},
      {"env", starring::run_env},
  };
  return table;
}

void usage(FILE* to) {
  std::fprintf(to,
               "usage: starring <command> [options]   (starring <command> --help for options)\n"
               "  train        train the model with a gradient-sync backend (--backend)\n"
               "  bench        nccl-tests-style bandwidth benchmark of the sync backends\n"
               "  bench-model  single-worker compute throughput (samples/s, GEMM FLOP/s)\n"
               "  env          what this machine offers: MPI, ranks and hosts, GPUs, NCCL, BLAS\n"
               "launch several ranks with scripts/mpirun.sh -np N build/bin/starring ...;\n"
               "sweeps of runs and their report: scripts/sweep.sh NAME (scripts/sweep.sh --help);\n"
               "starring --version prints the commit it was built from\n");
}

// MPI_Finalize and exit with `code`; a finalize that hangs (a peer still owes a message) is cut
// short after kFinalize.
[[noreturn]] void finalize_and_exit(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  std::thread([code] {
    std::this_thread::sleep_for(kFinalize);
    std::_Exit(code);
  }).detach();
  MPI_Finalize();
  std::exit(code);
}

// Prints `line` and stops the whole job (mpirun ends every rank): for a rank whose peers are not
// there to agree with. MPI_Abort should not return; if it hangs, this rank leaves anyway.
[[noreturn]] void abort_job(const std::string& line, int code) {
  print_line(line);
  std::thread([code] {
    std::this_thread::sleep_for(kFinalize);
    std::_Exit(code);
  }).detach();
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

// --timeout as given on the command line (before MPI_Init, when the options are not parsed yet;
// an INI file's value is not seen here), else its default.
double timeout_from_argv(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const char* v = nullptr;
    if (!std::strcmp(argv[i], "--timeout") && i + 1 < argc) v = argv[i + 1];
    if (!std::strncmp(argv[i], "--timeout=", 10)) v = argv[i] + 10;
    if (!v) continue;
    char* end = nullptr;
    const double t = std::strtod(v, &end);
    if (end != v && *end == '\0' && t > 0 && t <= 1e6) return t;
  }
  return Config{}.sync.timeout_s;
}

// MPI_Init_thread waits for every rank of the job (Open MPI 4.1: a fence through mpirun, without
// a time limit): a rank stopped before it (SIGSTOP) or stuck left every other rank there for
// good, and mpirun with them. Bounded by a StallWatch (--timeout + 10 s, as MPI's other
// set-up calls): this rank then says so and exits 1, and mpirun stops the job (the stopped rank
// too).
void init_within(int& argc, char**& argv, int& provided) {
  starring::set_stall_limit(timeout_from_argv(argc, argv));  // until the options are parsed
  starring::StallWatch watch("MPI_Init",
                             "another rank of the job did not start, or is stopped or stuck "
                             "before it");
  const char* env_rank = std::getenv("OMPI_COMM_WORLD_RANK");
  starring::test_stop_point("init", env_rank ? std::atoi(env_rank) : -1);
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
}

// MPI_Finalize and return `code`; a finalize still waiting after --timeout + kGrace (a rank
// stopped or stuck after the exit notes below, which Open MPI's finalize waits for without a
// limit) ends this rank with exit 1 and a line that says so.
int finalize_within(double timeout_s, int rank, int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  const double limit = timeout_s + static_cast<double>(kGrace.count());
  std::thread([limit, rank] {
    std::this_thread::sleep_for(std::chrono::duration<double>(limit));
    print_line(error_line(
        concat("MPI_Finalize did not complete within ", limit, " s (--timeout + ", kGrace.count(),
               " s): another rank is stopped or stuck at its exit (this "
               "rank's outputs are complete)"),
        rank));
    std::_Exit(1);
  }).detach();
  MPI_Finalize();
  return code;
}

// --- phase 1: checks each rank can make alone (experiments/preflight.h), then agreement -------

// Ranks `missing` did not come: the lowest rank that is here prints `says(who)` ("rank 1",
// "ranks 1 and 3") and calls MPI_Abort (the others do too, kGrace later, should it be stuck as
// well).
[[noreturn]] void abort_naming(const std::vector<int>& missing, int rank,
                               const std::function<std::string(const std::string&)>& says) {
  int lowest_here = 0;  // this rank at the latest: it is not missing
  while (std::find(missing.begin(), missing.end(), lowest_here) != missing.end()) ++lowest_here;
  if (lowest_here != rank) std::this_thread::sleep_for(kGrace);  // its abort comes first
  abort_job(error_line(says(starring::rank_list(missing)), rank), 1);
}

// The ranks meet (Notes) within `limit_s`, where the next step is a collective that waits without
// a time limit (MPI_Allreduce, MPI_Finalize): a rank stopped or stuck before it (SIGSTOP, a
// debugger) would hold every other rank there for good. A rank whose note does not come is named
// (abort_naming).
void meet_within(MPI_Comm comm, int tag, int rank, int size, double limit_s,
                 const std::function<std::string(const std::string&)>& says) {
  if (size < 2) return;
  Notes notes(comm, tag, rank, size);
  const auto deadline = Clock::now() + std::chrono::duration<double>(limit_s);
  while (!notes.all_in()) {
    if (Clock::now() > deadline) {
      const std::vector<int> missing = notes.missing();
      if (missing.empty()) break;  // every note came after all (this rank was the late one)
      abort_naming(missing, rank, says);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  notes.finish();
}

// The ranks agreed on the outcome, and every rank goes on to MPI_Finalize, which waits for all
// of them without a time limit: a rank stopped or stuck in between left the others in it for
// good. So the ranks first meet, within --timeout (kExitTag on the outcome's own communicator).
void leave_together(MPI_Comm comm, int rank, int size, double timeout_s) {
  meet_within(comm, kExitTag, rank, size, timeout_s, [timeout_s](const std::string& who) {
    return concat("the job finished, but ", who, " did not reach its exit within --timeout (",
                  timeout_s,
                  " s): stopped, stuck or slow; stopping the job (this rank's outputs are "
                  "complete)");
  });
}

// Parses and checks on every rank, then agrees. Returns -1 to go on, else the exit code
// (0 after --help).
int setup(int argc, char** argv, int rank, int size, Config& cfg) {
  std::string what;
  int code = 0;
  try {
    if (!starring::parse_config(argv[1], argc - 1, argv + 1, cfg, rank == 0 ? &std::cout : nullptr))
      return 0;  // --help: the same on every rank
    starring::preflight(cfg, rank, size);
  } catch (const std::exception& e) {
    what = e.what();
    code = exit_code_of(e);
  }
  starring::set_stall_limit(cfg.sync.timeout_s);
  // The agreement below waits without a time limit: the ranks meet first, within --timeout plus
  // kInitAllowance (plus kResumeAllowance with --resume, whose checkpoint rank 0 reads and checks
  // in its preflight: 240 MB, the wide model's, take about a second here). A rank stopped there
  // (rank 0 reading a --resume checkpoint) held the others in MPI_Allreduce for good.
  starring::test_stop_point("setup", rank);
  const double allowance = kInitAllowance + (cfg.ckpt.resume.empty() ? 0.0 : kResumeAllowance);
  const double limit = cfg.sync.timeout_s + allowance;
  meet_within(MPI_COMM_WORLD, kSetupTag, rank, size, limit, [&](const std::string& who) {
    return concat(
        "timeout after ", limit, " s (--timeout + ", allowance,
        " s) while every rank "
        "checked its options and files before starting: ",
        who, " did not get there (stopped, stuck or slow",
        cfg.ckpt.resume.empty() ? "" : "; rank 0 reads and checks the --resume checkpoint there",
        ")");
  });
  starring::StallWatch watch("MPI_Allreduce (the agreement on the options)");
  int first = code ? rank : size, failed = code ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (first == size) return -1;
  if (rank == first) print_line(error_line(what, failed == size ? -1 : rank));
  MPI_Allreduce(MPI_IN_PLACE, &code, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return code;
}

// --- phase 2: errors while the command runs ------------------------------------------------

// Completes `req`, waiting at most `limit` (none: as long as it takes). False on time-out; the
// request then stays pending (MPI_Abort follows).
bool wait_for(MPI_Request& req, const Clock::duration* limit) {
  const auto deadline = limit ? Clock::now() + *limit : Clock::time_point::max();
  for (int done = 0;;) {
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (done) return true;
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// What the command printed must reach its standard output: a full disk (`bench --json > rows` on
// a full file system, /dev/full) failed silently with exit 0 and an empty or cut file, as stdio
// reports a failed write only to the flush that makes it (here, at exit, unchecked).
void check_stdout() {
  errno = 0;
  std::cout.flush();  // fflush(stdout) where cout shares stdio's buffer (the default)
  const bool flushed = std::fflush(stdout) == 0;
  const int err = errno;
  if (flushed && !std::ferror(stdout) && std::cout) return;
  std::clearerr(stdout);  // the error is reported once, here; MPI_Finalize's flush adds nothing
  throw starring::Error(concat("writing the standard output failed",
                               err ? concat(": ", std::strerror(err)) : std::string(),
                               " (what this command printed there is incomplete)"));
}

// Runs the command; on failure returns its message and exit code instead of throwing, and in
// `brief` the short line of a failure another rank reported (starring::Relayed; else empty).
int run_command(Command command, Config& cfg, int provided, std::string& what, std::string& brief) {
  try {
    if (provided < MPI_THREAD_MULTIPLE)
      throw starring::Error("the MPI library does not provide MPI_THREAD_MULTIPLE");
    auto world = std::make_shared<starring::MpiComm>(MPI_COMM_WORLD);
    const int code = command(cfg, world);
    check_stdout();
    return code;
  } catch (const std::bad_alloc&) {
    what = "out of memory (std::bad_alloc): ask for less (--max-bytes, --hidden, --batch)";
    return 1;
  } catch (const std::exception& e) {
    what = *e.what() ? e.what() : "error without a message";
    if (const auto* r = dynamic_cast<const starring::Relayed*>(&e)) brief = r->brief();
    return exit_code_of(e);
  } catch (...) {
    what = "unknown exception";
    return 1;
  }
}

// Runs the command, then every rank agrees on the outcome (MPI_Iallreduce on a communicator of
// its own): a rank that succeeded waits for the others as MPI_Finalize would; a failing rank
// waits kGrace. When every rank arrives, any failure is printed by rank 0 and all ranks finalize
// with the job's exit code. When a failing rank's grace runs out (the others wait for it
// elsewhere), it prints its own line and calls MPI_Abort: never while the others sit in
// MPI_Finalize, which can deadlock Open MPI 4.1's mpirun.
// `ends_together` (train, bench, env): the ranks' last exchanges end within 2 x --timeout of each
// other (train: the backend's close, each rank's figures sent to rank 0; bench: each row's
// figures gathered to rank 0, the ops' close; env: the host lines gathered to rank 0), after which
// a rank has only its own output left (rank 0: the summary, the table's last rows, env's GPU
// query), so a rank that succeeded waits that plus kEndAllowance and then names the ranks that
// did not come (stopped, stuck or slow after their last message: rank 0 stopped after the others'
// figures had left held them here for good). bench-model waits without a limit: rank 0 alone
// measures, as long as it takes, while the others wait here from the start.
int run(const std::string& name, Command command, Config& cfg, int provided, int rank, int size,
        bool ends_together) {
  MPI_Comm agree = MPI_COMM_NULL;
  // Ctrl-C while the command runs: no rank ends before the other ranks of its host have run
  // their interrupt hooks (written their --trace), or mpirun SIGKILLs the slower ones at once.
  std::unique_ptr<starring::HostInterruptWait> host_wait;
  {
    starring::test_stop_point("comm-setup", rank);
    starring::StallWatch watch(
        "MPI_Comm_dup, MPI_Comm_split_type and MPI_Allgather (the job's "
        "set-up)");
    MPI_Comm_dup(MPI_COMM_WORLD, &agree);
    if (size > 1 && provided >= MPI_THREAD_MULTIPLE)
      host_wait = std::make_unique<starring::HostInterruptWait>(MPI_COMM_WORLD, kInterruptWait);
  }
  std::string what, brief;
  const int code = run_command(command, cfg, provided, what, brief);
  starring::test_stop_point("command-end", rank);
  host_wait.reset();
  const bool failed = !what.empty();
  // Any failure, the failed ranks' highest code, every rank's highest code. A failure's code wins
  // over a stopped train's kStoppedExit ("resume me") on the ranks that did not fail.
  int mine[3] = {failed ? 1 : 0, failed ? code : 0, code}, job[3] = {0, 0, 0};
  Notes arrived(agree, kArriveTag, rank, size);
  MPI_Request req;
  MPI_Iallreduce(mine, job, 3, MPI_INT, MPI_MAX, agree, &req);
  const double end_s = 2 * cfg.sync.timeout_s + kEndAllowance;
  const Clock::duration grace = brief.empty() ? kGrace : kGrace + kRelayedWait,
                        end = std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(end_s));
  if (!wait_for(req, failed ? &grace : ends_together ? &end : nullptr)) {
    if (failed) abort_job(error_line(brief.empty() ? what : brief, rank), code);
    const std::vector<int> missing = arrived.missing();
    if (!missing.empty())
      abort_naming(missing, rank, [&](const std::string& who) {
        return concat("this rank finished starring ", name, ", but ", who,
                      " did not finish within ", end_s, " s (2 x --timeout + ", kEndAllowance,
                      " s) after it, where the ranks agree on the job's outcome: stopped, stuck "
                      "or slow; stopping the job");
      });
    wait_for(req, nullptr);  // every rank came after all: the all-reduce completes
  }
  arrived.finish();
  if (job[0]) {
    print_all(agree, what, rank, size);
    finalize_and_exit(job[1]);  // 2 when bad input anywhere caused the other failures
  }
  starring::test_stop_point("exit", rank);
  leave_together(agree, rank, size, cfg.sync.timeout_s);
  MPI_Comm_free(&agree);
  return job[2];  // the job's code on every rank (a stopped train: kStoppedExit on servers too)
}

}  // namespace

int main(int argc, char** argv) {
  // SIGUSR1 before training starts (a preemption notice during start-up, reading a checkpoint)
  // is kept for the first step instead of ending the rank: accepted before MPI_Init, which takes
  // a second or more on a loaded host (mpirun passes the signal on to ranks still in it, and
  // its default action ended them). Blocked across the BLAS re-execution, which keeps a
  // pending signal and resets handlers, so none arrives without one.
  sigset_t usr1;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  sigprocmask(SIG_BLOCK, &usr1, nullptr);
  starring::use_faster_blas_kernels(argv);  // may re-execute this program, before MPI starts
  if (argc >= 2 && !std::strcmp(argv[1], "train")) starring::accept_stop_requests();
  sigprocmask(SIG_UNBLOCK, &usr1, nullptr);
  int provided = 0;
  init_within(argc, argv, provided);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc >= 2 && !std::strcmp(argv[1], "train"))
    starring::announce_interrupts(rank == 0, rank);
  else  // nothing of a bench or env is kept: no word of checkpoints and metrics
    starring::announce_interrupts(rank == 0, rank, "");

  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    if (rank == 0 && argc < 2) print_line("starring: error: no command given");
    if (rank == 0) usage(argc < 2 ? stderr : stdout);
    MPI_Finalize();
    return argc < 2 ? 2 : 0;
  }
  if (!std::strcmp(argv[1], "--version")) {  // the commit, as a run summary's "git" records it
    if (rank == 0) std::printf("starring %s\n", starring::build_commit());
    MPI_Finalize();
    return 0;
  }
  auto it = commands().find(argv[1]);
  if (it == commands().end()) {
    if (rank == 0) {
      print_line(concat("starring: error: unknown command '", argv[1], "'"));
      usage(stderr);
    }
    MPI_Finalize();
    return 2;
  }

  Config cfg;
  if (int rc = setup(argc, argv, rank, size, cfg); rc >= 0) {
    MPI_Finalize();
    return rc;
  }
  int rc = run(it->first, it->second, cfg, provided, rank, size, it->first != "bench-model");
  return finalize_within(cfg.sync.timeout_s, rank, rc);
}
