// The steady clock the timings use, and the seconds elapsed on it since a time point.
#pragma once
#include <chrono>

namespace starring {

using Clock = std::chrono::steady_clock;
inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace starring
