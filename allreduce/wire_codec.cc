// Conversions and reductions are plain loops over restrict pointers, one per wire type, so that
// GCC vectorises them (AVX2/AVX-512, F16C with -march=native) without run-time alias checks.
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

// Element type and conversions of each wire format.
struct F32 {
  using T = float;
  static float widen(float x) { return x; }
  static float narrow(float x) { return x; }
};
struct F16 {
  using T = _Float16;
  static float widen(_Float16 x) { return static_cast<float>(x); }
  static _Float16 narrow(float x) { return static_cast<_Float16>(x); }
};
struct BF16 {
  using T = std::uint16_t;
  static float widen(std::uint16_t x) { return from_bf16(x); }
  static std::uint16_t narrow(float x) { return to_bf16(x); }
};

template <typename W>
void reduce_out_of_place(const float* __restrict in, const typename W::T* __restrict w,
                         float* __restrict out, std::size_t n, float scale) {
  for (std::size_t i = 0; i < n; ++i) out[i] = (in[i] + W::widen(w[i])) * scale;
}
template <typename W>
void reduce_in_place(const typename W::T* __restrict w, float* __restrict out, std::size_t n,
                     float scale) {
  for (std::size_t i = 0; i < n; ++i) out[i] = (out[i] + W::widen(w[i])) * scale;
}
template <typename W>
void narrow_all(const float* __restrict src, typename W::T* __restrict dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = W::narrow(src[i]);
}
template <typename W>
void widen_all(const typename W::T* __restrict src, float* __restrict dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = W::widen(src[i]);
}

// Calls f.template operator()<Traits>() for the wire type.
template <typename F>
void dispatch(WireType w, F&& f) {
  switch (w) {
    case WireType::kFloat16:
      return f.template operator()<F16>();
    case WireType::kBFloat16:
      return f.template operator()<BF16>();
    default:
      return f.template operator()<F32>();
  }
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

void encode(WireType w, const float* src, void* dst, std::size_t n) {
  dispatch(w, [&]<typename W>() { narrow_all<W>(src, static_cast<typename W::T*>(dst), n); });
}

void decode(WireType w, const void* src, float* dst, std::size_t n) {
  dispatch(w, [&]<typename W>() { widen_all<W>(static_cast<const typename W::T*>(src), dst, n); });
}

void reduce_wire(WireType w, const float* in, const void* wire, float* out, std::size_t n,
                 float scale) {
  dispatch(w, [&]<typename W>() {
    auto* s = static_cast<const typename W::T*>(wire);
    if (in == out) {
      reduce_in_place<W>(s, out, n, scale);
    } else {
      reduce_out_of_place<W>(in, s, out, n, scale);
    }
  });
}

}  // namespace starring
