// Injected faults (--fault kill:RANK:STEP | hang:RANK:STEP) announce themselves on stderr just
// before the rank dies or goes silent, with the host's wall clock, so a sweep can measure how long
// the rest of the job takes to notice and end (scripts/starring_results.py, fault_outcome):
//   [starring] rank 1: --fault kill at step 20 (unix time 1764430000.123456)
//   [starring] server rank 4: --fault hang: going silent at step 20 (unix time 1764430000.123456)
#pragma once
#include <cstdint>
#include <functional>
#include <string>

namespace starring {

// `who`: "rank 1" / "server rank 4"; `kind`: "kill" or "hang".
void announce_fault(const std::string& who, const std::string& kind, std::int64_t step);

// --fault KIND:RANK:STEP, as the trainer (trainer/straggler.h), a parameter server and the
// preflight checks read it: kill, hang (RANK a world rank) or stop (RANK a worker's index), STEP
// an optimizer step. parse_config has checked its form (common/config_check.cc).
struct FaultSpec {
  std::string kind;  // empty: no fault
  std::int64_t rank = -1, step = -1;
};
// An empty spec: no fault. ConfigError naming --fault and its form for anything else malformed.
FaultSpec parse_fault(const std::string& spec);

// A test hook, no option: with STARRING_TEST_STOP=<where>:<rank> in the environment, world rank
// <rank> stops itself (SIGSTOP: alive and silent, as a debugger or a stopped job leaves it) when it
// reaches `where`, a point no --fault step reaches, after a line on stderr as announce_fault's
// ("[starring] rank 1: STARRING_TEST_STOP at exit (unix time ...)"): "init" (before MPI_Init),
// "setup" (after its own option and file checks, before the ranks agree on them), "comm-setup"
// (after that agreement, before the job's communicators are set up), "load" (a rank that trains,
// before it loads its data), "backend-setup" (after the ranks agreed that every rank loaded its
// data, before the backend sets up its communicators), "bench-loop" (bench, before each timed loop,
// after the barrier that starts it), "checkpoint-write" (worker 0 before it writes a checkpoint's
// file), "sync-end" (a worker after its last step and evaluation, before its backend's shutdown),
// "server-start" (a parameter server before its start acknowledgement), "server-end" (a parameter
// server before its goodbye to the workers), "summary" (train, after the figures of every rank went
// to rank 0 and it wrote the summary: the ranks have nothing left to exchange), "command-end"
// (any command, once it has returned or failed, before the ranks agree on the outcome), "exit"
// (after the ranks agreed on the outcome, before MPI_Finalize). test_cli_stopped.py (in
// tests/experiments) times the others' exit at each ("load": they wait --timeout plus an
// allowance by the data's size, experiments/train_run.h: 5 s for a small set).
void test_stop_point(const char* where, int rank);

// SIGINT, SIGTERM and SIGHUP (Ctrl-C, mpirun passing one on, a batch system's time limit) print
// one line on stderr where `announce` is true (rank 0: mpirun signals every rank at once), run
// the InterruptHook in force (if any), wait at the InterruptBarrier in force (if any), then end
// the process by the same signal as before, so the exit status still says which signal it was:
//   starring: rank 0: stopped by SIGINT; checkpoints written so far are whole, metrics stay in
//   their .partial file[; NOTE]
// The handler only writes the signal number to a pipe; a helper thread started here does the
// rest, outside the signal context. A second signal while the hook runs ends the process at once.
// A signal the process inherited as ignored (nohup) stays ignored.
// `kept`: what a stopped run leaves behind, said after the signal ("" for a command that writes
// no checkpoints or metrics: bench, env).
void announce_interrupts(bool announce, int rank,
                         const std::string& kept =
                             "checkpoints written so far are whole, metrics "
                             "stay in their .partial file");

// While it lives, an interrupt adds `note` to the line and then runs `fn` (on the helper thread;
// it must not wait for the training thread, and has about a second under mpirun, which kills
// ranks that outstay that, or less where another rank ends first: see InterruptBarrier): the
// trainer completes its --trace file, which a stopped run otherwise leaves as a .partial
// without its last buffer of events. One hook at a time: a newer one replaces it, and ending
// either one leaves no hook (so nest none).
// SIGUSR1, a batch system's preemption notice (Slurm: `#SBATCH --signal=B:USR1@120` signals the
// batch script, which passes it on to mpirun, see README; mpirun passes it on to every rank), asks
// a training run to stop at a step the workers agree on, write a checkpoint there and exit with
// status 75 (trainer/stop_vote.h). After this call SIGUSR1 only sets a flag (before it, SIGUSR1
// ends the process as by default); stop_requested() reads it.
void accept_stop_requests();
bool stop_requested();

// The progress bar (trainer/metrics.h) redraws one line with '\r' and leaves it open; while it
// is open, the interrupt line above and the error line of `starring` (experiments/main.cc) start
// on a line of their own instead of after the bar's last ETA. Set and read from any thread.
void set_stderr_line_open(bool open);
bool stderr_line_open();
// True once an interrupt (above) is being handled: the progress bar stops redrawing, so that the
// stop line stays the last one on the terminal.
bool interrupt_in_progress();

// Files being written under a temporary name (write_file_atomically's, trainer/atomic_file.h),
// then renamed: an interrupt (above) removes them first thing, before the hook, so a run stopped
// while it wrote its summary or a checkpoint leaves no half-written `.tmp` (mpirun kills a rank
// about a second after passing the signal on). rename_temporary_file renames under the same lock
// and returns 0, or an errno: EINTR once an interrupt has removed the temporary files.
void track_temporary_file(const std::string& tmp, bool writing);
int rename_temporary_file(const std::string& tmp, const std::string& path);

class InterruptHook {
 public:
  InterruptHook(std::function<void()> fn, std::string note);
  ~InterruptHook();
  InterruptHook(const InterruptHook&) = delete;
  InterruptHook& operator=(const InterruptHook&) = delete;
};

// While it lives, an interrupted rank, after its hook, runs `wait` before it ends (on the helper
// thread; it must return within a time limit of its own): `starring` waits there until the other
// ranks of its host have run their hooks or have ended (experiments/interrupt_wait.h), because
// Open MPI 4.1's mpirun SIGKILLs a host's remaining ranks as soon as one of them has ended, so
// the rank that wrote its trace first cut the others short (their events stream to the
// trace's .partial, but the last buffer and the completed file need the hook to finish). An
// exception from `wait` is ignored: the rank ends as before. One at a time, as InterruptHook (a
// newer one replaces it; ending either leaves none).
class InterruptBarrier {
 public:
  explicit InterruptBarrier(std::function<void()> wait);
  ~InterruptBarrier();
  InterruptBarrier(const InterruptBarrier&) = delete;
  InterruptBarrier& operator=(const InterruptBarrier&) = delete;
};

}  // namespace starring
