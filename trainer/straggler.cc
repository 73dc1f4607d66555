#include "trainer/straggler.h"

#include <chrono>
#include <csignal>
#include <thread>

#include "common/error.h"
#include "common/fault.h"
#include "common/rng.h"

namespace starring {
namespace {

// any:MS draws its worker from mix(seed ^ this, step) ("STRAGGLR" in ASCII): without it, step t's
// draw would start the very stream the sampler shuffles epoch t with, mix(seed, t).
constexpr std::uint64_t kAnyDrawSalt = 0x5354524147474C52ull;

}  // namespace

Straggler::Straggler(const std::string& spec, std::uint64_t seed, int workers)
    : seed_(seed), workers_(workers) {
  if (spec.empty()) return;
  const auto colon = spec.find(':');
  const std::string who = spec.substr(0, colon);
  const std::string bad = "--straggler expects RANK:MS or any:MS, got '" + spec + "'";
  STARRING_CONFIG_CHECK(colon != std::string::npos, bad);
  try {
    std::size_t used = 0;
    ms_ = std::stol(spec.substr(colon + 1), &used);
    STARRING_CONFIG_CHECK(used == spec.size() - colon - 1 && ms_ >= 0, bad);
    any_ = who == "any";
    if (!any_) {
      rank_ = std::stoi(who, &used);
      STARRING_CONFIG_CHECK(used == who.size(), bad);
    }
  } catch (const std::logic_error&) {
    throw ConfigError(bad);
  }
  STARRING_CONFIG_CHECK(any_ || (rank_ >= 0 && rank_ < workers), "--straggler: worker ", rank_,
                        " does not exist (", workers, " workers)");
}

long Straggler::delay_ms(int rank, std::int64_t step) const {
  if (ms_ <= 0) return 0;
  if (!any_) return rank == rank_ ? ms_ : 0;
  SplitMix64 g(mix(seed_ ^ kAnyDrawSalt, static_cast<std::uint64_t>(step)));
  return static_cast<int>(g.below(static_cast<std::uint64_t>(workers_))) == rank ? ms_ : 0;
}

FaultInjector::FaultInjector(const std::string& spec) : f_(parse_fault(spec)) {}

void FaultInjector::at_step(int rank, std::int64_t step) const {
  if (rank != f_.rank || step != f_.step || f_.kind == "stop") return;
  announce_fault("rank " + std::to_string(rank), f_.kind, step);
  if (f_.kind == "kill") std::raise(SIGKILL);
  std::this_thread::sleep_for(std::chrono::hours(24));
}

}  // namespace starring
