// Portable pseudo-random numbers for everything that must be identical on every rank and every
// platform (data shuffles, synthetic data). The standard library's distributions and
// std::shuffle are implementation-defined, so they are not used for that.
//
// SplitMix64 (Steele, Lea and Flood, 2014): a 64-bit counter advanced by the golden-ratio
// increment, then passed through a bijective mixing function. It passes BigCrush, has period
// 2^64, and any 64-bit seed is fine, which makes it suitable for deriving independent streams
// from (seed, epoch) or (seed, index) with mix().
#pragma once
#include <cmath>
#include <cstdint>

namespace starring {

class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}

  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  // Uniform integer in [0, n), n > 0, without modulo bias (rejection of the short last range).
  std::uint64_t below(std::uint64_t n) {
    const std::uint64_t reject_under = (0 - n) % n;  // 2^64 mod n
    for (;;) {
      std::uint64_t r = next();
      if (r >= reject_under) return r % n;
    }
  }
  // Standard normal (Box-Muller). Uses libm's log/cos: identical across ranks of one build.
  double normal() {
    double u1 = 1.0 - uniform();  // (0, 1]
    double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  std::uint64_t state_;
};

// A well-mixed seed for the stream identified by (a, b), e.g. (seed, epoch).
inline std::uint64_t mix(std::uint64_t a, std::uint64_t b) {
  SplitMix64 g(a ^ SplitMix64(b + 0x632BE59BD9B4E019ull).next());
  return g.next();
}

}  // namespace starring
