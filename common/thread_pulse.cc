#include "common/thread_pulse.h"

#include <pthread.h>

namespace starring {
namespace {

std::int64_t read_ns(clockid_t c) {
  timespec ts{};
  if (clock_gettime(c, &ts) != 0) return -1;  // e.g. the thread has ended
  return std::int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace

void ThreadPulse::bind_to_this_thread() {
  has_cpu_clock_ = pthread_getcpuclockid(pthread_self(), &cpu_clock_) == 0;
  cpu_ns_ = has_cpu_clock_ ? read_ns(cpu_clock_) : -1;
  checked_at_ = Clock::now();
  mark();
}

bool ThreadPulse::alive_since_last_check(Clock::time_point now) {
  const Clock::time_point prev = checked_at_;
  checked_at_ = now;
  bool alive = last_mark_.load(kRelaxed) >= prev.time_since_epoch().count() ||
               busy_until_.load(kRelaxed) >= prev.time_since_epoch().count();
  if (has_cpu_clock_) {
    const std::int64_t ns = read_ns(cpu_clock_);
    const auto wall_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now - prev).count();
    if (ns >= 0 && cpu_ns_ >= 0 && (ns - cpu_ns_) * 100 >= wall_ns && ns > cpu_ns_) alive = true;
    cpu_ns_ = ns;
  }
  return alive;
}

}  // namespace starring
