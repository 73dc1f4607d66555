#include "common/fault.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>

namespace starring {

void announce_fault(const std::string& who, const std::string& kind, std::int64_t step) {
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::fprintf(stderr, "[starring] %s: --fault %s at step %lld (unix time %.6f)\n", who.c_str(),
               kind == "hang" ? "hang: going silent" : kind.c_str(), static_cast<long long>(step),
               now);
  std::fflush(stderr);
}

namespace {

// Built before any signal can arrive: the handler only writes them (async-signal-safe).
char g_lines[3][160];
std::size_t g_lens[3];
constexpr int kSignals[3] = {SIGINT, SIGTERM, SIGHUP};

extern "C" void on_interrupt(int sig) {
  for (int i = 0; i < 3; ++i)
    if (kSignals[i] == sig && g_lens[i] > 0) {
      ssize_t ignored = ::write(STDERR_FILENO, g_lines[i], g_lens[i]);
      (void)ignored;
    }
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

}  // namespace

void announce_interrupts(bool announce, int rank) {
  if (!announce) return;
  const char* names[3] = {"SIGINT", "SIGTERM", "SIGHUP"};
  for (int i = 0; i < 3; ++i) {
    const int n = std::snprintf(g_lines[i], sizeof g_lines[i],
                                "starring: rank %d: stopped by %s; checkpoints written so far are "
                                "whole, metrics stay in their .partial file\n",
                                rank, names[i]);
    g_lens[i] = n > 0 ? std::min<std::size_t>(n, sizeof g_lines[i] - 1) : 0;
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

}  // namespace starring
