// Conversions are written as plain loops over _Float16 / bit operations so that GCC vectorises
// them (F16C / AVX-512 with -march=native).
#include "allreduce/wire_codec.h"

#include <cstring>

#include "common/error.h"

namespace starring {

namespace {

inline std::uint16_t to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<std::uint16_t>(u >> 16);
}

inline float from_bf16(std::uint16_t h) {
  std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

WireType parse_wire_type(const std::string& c) {
  if (c == "none" || c.empty()) return WireType::kFloat32;
  if (c == "fp16") return WireType::kFloat16;
  if (c == "bf16") return WireType::kBFloat16;
  throw ConfigError("unknown --compress '" + c + "' (expected none, fp16 or bf16)");
}

std::string wire_type_name(WireType w) {
  switch (w) {
    case WireType::kFloat16:
      return "fp16";
    case WireType::kBFloat16:
      return "bf16";
    default:
      return "none";
  }
}

std::size_t wire_bytes(WireType w) { return w == WireType::kFloat32 ? 4 : 2; }

void encode(WireType w, const float* __restrict src, void* __restrict dst, std::size_t n) {
  if (w == WireType::kFloat32) {
    std::memcpy(dst, src, n * 4);
  } else if (w == WireType::kFloat16) {
    auto* d = static_cast<_Float16*>(dst);
    for (std::size_t i = 0; i < n; ++i) d[i] = static_cast<_Float16>(src[i]);
  } else {
    auto* d = static_cast<std::uint16_t*>(dst);
    for (std::size_t i = 0; i < n; ++i) d[i] = to_bf16(src[i]);
  }
}

void decode(WireType w, const void* __restrict src, float* __restrict dst, std::size_t n) {
  if (w == WireType::kFloat32) {
    std::memcpy(dst, src, n * 4);
  } else if (w == WireType::kFloat16) {
    auto* s = static_cast<const _Float16*>(src);
    for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(s[i]);
  } else {
    auto* s = static_cast<const std::uint16_t*>(src);
    for (std::size_t i = 0; i < n; ++i) dst[i] = from_bf16(s[i]);
  }
}

void reduce_wire(WireType w, const float* in, const void* __restrict wire, float* out,
                 std::size_t n, float scale) {
  // `in` and `out` may alias (in-place), so only `wire` is restrict; each element is read
  // before it is written, which keeps the vectorised loop correct.
  if (w == WireType::kFloat32) {
    auto* s = static_cast<const float*>(wire);
    if (scale == 1.0f) {
      for (std::size_t i = 0; i < n; ++i) out[i] = in[i] + s[i];
    } else {
      for (std::size_t i = 0; i < n; ++i) out[i] = (in[i] + s[i]) * scale;
    }
  } else if (w == WireType::kFloat16) {
    auto* s = static_cast<const _Float16*>(wire);
    for (std::size_t i = 0; i < n; ++i) out[i] = (in[i] + static_cast<float>(s[i])) * scale;
  } else {
    auto* s = static_cast<const std::uint16_t*>(wire);
    for (std::size_t i = 0; i < n; ++i) out[i] = (in[i] + from_bf16(s[i])) * scale;
  }
}

}  // namespace starring
