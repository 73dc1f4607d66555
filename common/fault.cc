#include "common/fault.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <set>
#include <thread>

#include "common/error.h"

namespace starring {

FaultSpec parse_fault(const std::string& spec) {
  FaultSpec f;
  if (spec.empty()) return f;
  const auto c1 = spec.find(':'), c2 = spec.find(':', c1 == std::string::npos ? c1 : c1 + 1);
  const auto number = [&](std::size_t from, std::size_t to, std::int64_t& v) {
    const char *first = spec.data() + from, *last = spec.data() + to;
    const auto [end, err] = std::from_chars(first, last, v);
    return first != last && err == std::errc() && end == last && v >= 0;
  };
  f.kind = spec.substr(0, c1);
  if (c2 == std::string::npos || spec.find(':', c2 + 1) != std::string::npos ||
      (f.kind != "kill" && f.kind != "hang" && f.kind != "stop") || !number(c1 + 1, c2, f.rank) ||
      !number(c2 + 1, spec.size(), f.step))
    throw ConfigError("--fault expects kill:RANK:STEP, hang:RANK:STEP or stop:RANK:STEP, got '" +
                      spec + "'");
  return f;
}

void test_stop_point(const char* where, int rank) {
  const char* spec = std::getenv("STARRING_TEST_STOP");
  if (!spec || std::string(spec) != std::string(where) + ":" + std::to_string(rank)) return;
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::fprintf(stderr, "[starring] rank %d: STARRING_TEST_STOP at %s (unix time %.6f)\n", rank,
               where, now);
  std::fflush(stderr);
  std::raise(SIGSTOP);
}

void announce_fault(const std::string& who, const std::string& kind, std::int64_t step) {
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::fprintf(stderr, "[starring] %s: --fault %s at step %lld (unix time %.6f)\n", who.c_str(),
               kind == "hang" ? "hang: going silent" : kind.c_str(), static_cast<long long>(step),
               now);
  std::fflush(stderr);
}

namespace {

// Set up before any signal can arrive. The handler writes the signal number to g_pipe (what a
// handler may do); the watcher thread prints the line, runs the hook, waits at the barrier in
// force for the other ranks' hooks and re-raises.
constexpr int kSignals[3] = {SIGINT, SIGTERM, SIGHUP};
constexpr const char* kNames[3] = {"SIGINT", "SIGTERM", "SIGHUP"};
int g_pipe[2] = {-1, -1};
volatile std::sig_atomic_t g_interrupted = 0;
// Written by the SIGUSR1 handler, read by the training thread: a lock-free atomic is both
// async-signal-safe and free of data races between threads (volatile sig_atomic_t is only the
// former).
std::atomic<int> g_stop_requested{0};
static_assert(std::atomic<int>::is_always_lock_free);
bool g_announce = false;
int g_rank = 0;
std::mutex g_hook_mu;
std::function<void()> g_hook;
std::string g_note;
std::string g_kept;
std::function<void()> g_barrier;
std::atomic<bool> g_line_open{false};
std::atomic<bool> g_stopping{false};  // set by the watcher thread (not the handler: thread-safe)
std::mutex g_tmp_mu;                  // the temporary files being written, and whether an
std::set<std::string> g_tmp;          // interrupt has removed them
bool g_tmp_removed = false;

void remove_temporary_files() {
  std::lock_guard<std::mutex> lk(g_tmp_mu);
  g_tmp_removed = true;
  for (const std::string& t : g_tmp) ::unlink(t.c_str());
}

[[noreturn]] void die_by(int sig) {
  std::signal(sig, SIG_DFL);
  std::raise(sig);
  std::_Exit(128 + sig);  // not reached: the default action of these signals ends the process
}

extern "C" void on_interrupt(int sig) {
  if (g_interrupted) die_by(sig);  // a second signal (a hook that hangs): end now
  g_interrupted = 1;
  if (g_pipe[1] < 0 || ::write(g_pipe[1], &sig, sizeof sig) != sizeof sig) die_by(sig);
}

extern "C" void on_stop_request(int) { g_stop_requested.store(1, std::memory_order_relaxed); }

void watch() {
  int sig = 0;
  for (;;) {
    const ssize_t n = ::read(g_pipe[0], &sig, sizeof sig);
    if (n == sizeof sig) break;
    if (n < 0 && errno == EINTR) continue;
    return;  // the pipe is gone: nothing to watch
  }
  remove_temporary_files();  // no half-written file, whatever comes next
  // The line first: mpirun stops forwarding output, and kills ranks that outstay about a
  // second, once it has passed the signal on.
  g_stopping.store(true);  // no progress bar after it
  std::lock_guard<std::mutex> lk(g_hook_mu);
  if (g_announce) {
    const char* name = "a signal";
    for (int i = 0; i < 3; ++i)
      if (kSignals[i] == sig) name = kNames[i];
    std::fprintf(stderr, "%sstarring: rank %d: stopped by %s%s%s%s%s\n",
                 g_line_open.exchange(false) ? "\n" : "", g_rank, name, g_kept.empty() ? "" : "; ",
                 g_kept.c_str(), g_hook ? "; " : "", g_hook ? g_note.c_str() : "");
    std::fflush(stderr);
  }
  if (g_hook) {
    try {
      g_hook();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "starring: rank %d: %s\n", g_rank, e.what());
    }
  }
  if (g_barrier) {
    try {
      g_barrier();
    } catch (const std::exception&) {  // a rank that never came (gone, stuck): end anyway
    }
  }
  die_by(sig);
}

}  // namespace

void track_temporary_file(const std::string& tmp, bool writing) {
  std::lock_guard<std::mutex> lk(g_tmp_mu);
  if (writing)
    g_tmp.insert(tmp);
  else
    g_tmp.erase(tmp);
}

int rename_temporary_file(const std::string& tmp, const std::string& path) {
  std::lock_guard<std::mutex> lk(g_tmp_mu);
  if (g_tmp_removed) return EINTR;
  return ::rename(tmp.c_str(), path.c_str()) == 0 ? 0 : errno;
}

void announce_interrupts(bool announce, int rank, const std::string& kept) {
  {
    std::lock_guard<std::mutex> lk(g_hook_mu);  // the watcher reads them under this lock
    g_announce = announce;
    g_rank = rank;
    g_kept = kept;
  }
  if (g_pipe[0] < 0) {  // once: a second call only updates who announces
    if (::pipe2(g_pipe, O_CLOEXEC) == 0)
      std::thread(watch).detach();
    else
      g_pipe[0] = g_pipe[1] = -1;
  }
  for (int i = 0; i < 3; ++i) {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    // A signal the caller set to be ignored stays ignored (nohup, `cmd &` in a script).
    if (sigaction(kSignals[i], nullptr, &sa) == 0 && sa.sa_handler == SIG_IGN) continue;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    sigaction(kSignals[i], &sa, nullptr);
  }
}

void accept_stop_requests() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop_request;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, nullptr);
}

bool stop_requested() { return g_stop_requested.load(std::memory_order_relaxed) != 0; }

void set_stderr_line_open(bool open) { g_line_open.store(open); }
bool stderr_line_open() { return g_line_open.load(); }
bool interrupt_in_progress() { return g_stopping.load(); }

InterruptHook::InterruptHook(std::function<void()> fn, std::string note) {
  std::lock_guard<std::mutex> lk(g_hook_mu);
  g_hook = std::move(fn);
  g_note = std::move(note);
}

InterruptHook::~InterruptHook() {
  std::lock_guard<std::mutex> lk(g_hook_mu);
  g_hook = nullptr;
  g_note.clear();
}

InterruptBarrier::InterruptBarrier(std::function<void()> wait) {
  std::lock_guard<std::mutex> lk(g_hook_mu);
  g_barrier = std::move(wait);
}

InterruptBarrier::~InterruptBarrier() {
  std::lock_guard<std::mutex> lk(g_hook_mu);
  g_barrier = nullptr;
}

}  // namespace starring
