// Synthetic classification data: class-dependent Gaussian clusters. Each class c has a center
// drawn uniformly from [0.2, 0.8]^dim (from the seed alone); sample i has label i % classes (so
// every prefix is balanced) and features center[label] + N(0, 0.25^2) per feature, drawn from a
// stream seeded by (seed, i). Sample i is therefore the same whatever n is, values lie roughly in
// [0, 1] like pixels, and the classes are separable but overlap a little in low dimensions, so a
// model must learn (chance accuracy is 1/classes) and can. Portable RNG: common/rng.h.
#include "common/dataset.h"
#include "common/error.h"
#include "common/rng.h"

namespace starring {

Dataset make_synthetic(int n, int dim, int classes, std::uint64_t seed) {
  STARRING_CONFIG_CHECK(n >= 0 && dim > 0 && classes >= 2, "synthetic data: bad shape n=", n,
                        " dim=", dim, " classes=", classes);
  constexpr double kSpread = 0.25;
  Dataset ds;
  ds.n = n;
  ds.dim = dim;
  ds.classes = classes;
  ds.source =
      detail::concat("synthetic(n=", n, ", dim=", dim, ", classes=", classes, ", seed=", seed, ")");
  std::vector<float> centers(static_cast<std::size_t>(classes) * dim);
  SplitMix64 center_rng(mix(seed, 0xC3A5C85C97CB3127ull));
  for (auto& v : centers) v = static_cast<float>(0.2 + 0.6 * center_rng.uniform());

  ds.x.resize(static_cast<std::size_t>(n) * dim);
  ds.y.resize(n);
  for (int i = 0; i < n; ++i) {
    const int label = i % classes;
    ds.y[i] = label;
    SplitMix64 rng(mix(seed, static_cast<std::uint64_t>(i)));
    const float* c = &centers[static_cast<std::size_t>(label) * dim];
    float* row = &ds.x[static_cast<std::size_t>(i) * dim];
    for (int j = 0; j < dim; ++j) row[j] = c[j] + static_cast<float>(kSpread * rng.normal());
  }
  return ds;
}

}  // namespace starring
