// idx_bytes: an IDX file's bytes (big-endian magic, dimensions, then the payload), for the
// tests that write good and broken data files (test_idx, test_input_checks).
#pragma once
#include <cstdint>
#include <vector>

namespace starring {

inline std::vector<std::uint8_t> idx_bytes(std::uint32_t magic,
                                           const std::vector<std::uint32_t>& dims,
                                           const std::vector<std::uint8_t>& payload) {
  std::vector<std::uint8_t> b;
  auto be32 = [&](std::uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<std::uint8_t>(v >> s));
  };
  be32(magic);
  for (auto d : dims) be32(d);
  b.insert(b.end(), payload.begin(), payload.end());
  return b;
}

}  // namespace starring
