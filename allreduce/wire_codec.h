// Wire formats for gradient compression: float32 values are sent as float32 (no compression),
// IEEE fp16 or bfloat16 (half the bytes). Reductions always accumulate in float32: a received
// half is widened, added to the float32 partial sum, and only the result is narrowed again.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace starring {

enum class WireType { kFloat32, kFloat16, kBFloat16 };

// "none" -> kFloat32, "fp16" -> kFloat16, "bf16" -> kBFloat16; ConfigError otherwise.
WireType parse_wire_type(const std::string& compress);
std::string wire_type_name(WireType w);  // "none" | "fp16" | "bf16"
std::size_t wire_bytes(WireType w);      // bytes per element on the wire: 4 or 2

// dst[i] = narrow(src[i]) (round to nearest even; fp16 overflows to +-inf).
void encode(WireType w, const float* src, void* dst, std::size_t n);
// dst[i] = widen(src[i]).
void decode(WireType w, const void* src, float* dst, std::size_t n);
// out[i] = (in[i] + widen(wire[i])) * scale   (in may equal out; exact when scale == 1).
void reduce_wire(WireType w, const float* in, const void* wire, float* out, std::size_t n,
                 float scale);

}  // namespace starring
