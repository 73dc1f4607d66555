#include "common/setup_watch.h"

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "common/config.h"

namespace starring {
namespace {

constexpr double kAllowance = 10;  // as MPI_Init's (experiments/main.cc): a loaded host's start
std::atomic<double> g_timeout_s{SyncConfig{}.timeout_s};

int world_rank() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  int rank = -1;
  if (init && !fin) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

}  // namespace

struct SetupWatch::State {
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
};

void set_setup_limit(double timeout_s) { g_timeout_s.store(timeout_s); }
double setup_limit_s() { return g_timeout_s.load() + kAllowance; }

SetupWatch::SetupWatch(std::string what) : state_(std::make_shared<State>()) {
  const double timeout = g_timeout_s.load();
  const int rank = world_rank();
  std::thread([s = state_, what = std::move(what), timeout, rank] {
    const double limit = timeout + kAllowance;
    std::unique_lock lock(s->m);
    if (s->cv.wait_for(lock, std::chrono::duration<double>(limit), [&] { return s->done; })) return;
    std::fflush(stdout);
    const std::string who = rank < 0 ? "" : "rank " + std::to_string(rank) + ": ";
    std::fprintf(stderr,
                 "starring: error: %s%s did not complete within %g s (--timeout + %g s): another "
                 "rank is stopped or stuck before it (MPI's set-up collectives have no time "
                 "limit)\n",
                 who.c_str(), what.c_str(), limit, kAllowance);
    std::fflush(stderr);
    std::_Exit(1);
  }).detach();
}

SetupWatch::~SetupWatch() {
  {
    std::lock_guard lock(state_->m);
    state_->done = true;
  }
  state_->cv.notify_all();
}

}  // namespace starring
