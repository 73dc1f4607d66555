#include "common/stall_watch.h"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "common/config.h"

namespace starring {
namespace {

using Clock = std::chrono::steady_clock;
constexpr double kAllowance = 10;  // as MPI_Init's (experiments/main.cc): a loaded host's start
std::atomic<double> g_timeout_s{SyncConfig{}.timeout_s};

// Before MPI_Init (the watch around it): the rank mpirun gave this process, where it says.
int world_rank() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  int rank = -1;
  if (init && !fin) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  } else if (const char* env = std::getenv("OMPI_COMM_WORLD_RANK")) {
    rank = std::atoi(env);
  }
  return rank;
}

}  // namespace

struct StallWatch::State {
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  std::atomic<std::uint64_t> ticks{0};
};

// A value the option check refuses (inf, nan, <= 0: reported with exit 2 after the agreement this
// watch bounds) leaves the limit as it was: inf seconds overflowed the clock and fired at once.
void set_stall_limit(double timeout_s) {
  if (std::isfinite(timeout_s) && timeout_s > 0 && timeout_s <= 1e6) g_timeout_s.store(timeout_s);
}
double stall_limit_s() { return g_timeout_s.load() + kAllowance; }

StallWatch::StallWatch(std::string what, std::string why) : state_(std::make_shared<State>()) {
  char note[64];
  std::snprintf(note, sizeof note, "--timeout + %g s", kAllowance);
  start(std::move(what), std::move(why), stall_limit_s(), note, nullptr);
}

StallWatch::StallWatch(std::string what, std::string why, double limit_s, OnFire on_fire)
    : state_(std::make_shared<State>()) {
  start(std::move(what), std::move(why), limit_s, "the limit given", std::move(on_fire));
}

void StallWatch::start(std::string what, std::string why, double limit, std::string limit_note,
                       OnFire on_fire) {
  const int rank = world_rank();
  std::thread([s = state_, what = std::move(what), why = std::move(why), limit,
               limit_note = std::move(limit_note), on_fire = std::move(on_fire), rank] {
    const auto span =
        std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limit));
    // progress() is seen at the next look: every tenth of the limit, at most a second apart
    const auto look = std::clamp<Clock::duration>(span / 10, std::chrono::milliseconds(50),
                                                  std::chrono::seconds(1));
    auto deadline = Clock::now() + span;
    std::uint64_t seen = 0;
    std::unique_lock lock(s->m);
    for (;;) {
      if (s->cv.wait_until(lock, std::min(deadline, Clock::now() + look), [&] { return s->done; }))
        return;
      if (const std::uint64_t t = s->ticks.load(std::memory_order_relaxed); t != seen) {
        seen = t;
        deadline = Clock::now() + span;
      } else if (Clock::now() >= deadline) {
        break;
      }
    }
    const std::string who = rank < 0 ? "" : "rank " + std::to_string(rank) + ": ";
    char within[96];
    std::snprintf(within, sizeof within, " did not complete within %g s (%s): ", limit,
                  limit_note.c_str());
    const std::string line = who + what + within + why;
    if (on_fire) {
      on_fire(line);  // under the lock: the destructor returns only once it has returned
      return;
    }
    std::fflush(stdout);
    std::fprintf(stderr, "starring: error: %s\n", line.c_str());
    std::fflush(stderr);
    std::_Exit(1);
  }).detach();
}

StallWatch::~StallWatch() {
  {
    std::lock_guard lock(state_->m);
    state_->done = true;
  }
  state_->cv.notify_all();
}

void StallWatch::progress() { state_->ticks.fetch_add(1, std::memory_order_relaxed); }

}  // namespace starring
