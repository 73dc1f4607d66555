// The fp16/bf16 wire codec (allreduce/wire_codec.h) on its own: round trips, rounding, the
// float32 accumulation of reduce_wire, and what happens to ties, Inf and NaN. Compiled into
// test_ring (and its mpirun runs), beside the ring's own cases.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "allreduce/wire_codec.h"
#include "common/error.h"

namespace starring {
namespace {

TEST(WireCodec, RoundTripAndRounding) {
  std::vector<float> x{0.0f, 1.0f, -2.5f, 65504.0f, 1e-3f, 3.14159265f, 1e6f};
  std::vector<std::uint16_t> h(x.size());
  std::vector<float> back(x.size());
  encode(WireType::kFloat16, x.data(), h.data(), x.size());
  decode(WireType::kFloat16, h.data(), back.data(), x.size());
  for (std::size_t i = 0; i < 6; ++i) EXPECT_NEAR(back[i], x[i], std::abs(x[i]) / 2048 + 1e-7);
  EXPECT_TRUE(std::isinf(back[6]));  // beyond fp16's range
  encode(WireType::kBFloat16, x.data(), h.data(), x.size());
  decode(WireType::kBFloat16, h.data(), back.data(), x.size());
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(back[i], x[i], std::abs(x[i]) / 256);
  EXPECT_EQ(back[1], 1.0f);
  EXPECT_THROW(parse_wire_type("fp8"), ConfigError);
}

// A half-precision wire narrows what travels, never the reduction: reduce_wire widens the received
// value and adds it to the float32 input in float32, and returns the float32 result. The input
// 1 + 2^-m lies halfway between two neighbours in the wire format (1 and 1 + 2^(1-m)), so a
// reduction that narrowed it first (adding in fp16 or bf16) reads 1 + 2^-(m+1) instead of
// 1 + 2^-m + 2^-(m+1). The ring's tolerance and closed-form cases both passed such a reduction.
TEST(WireCodec, ReductionAccumulatesInFloat32) {
  for (WireType w : {WireType::kFloat16, WireType::kBFloat16}) {
    const int m = w == WireType::kFloat16 ? 11 : 8;  // half an ulp of 1: fp16 2^-11, bf16 2^-8
    const float in = 1.0f + std::ldexp(1.0f, -m), small = std::ldexp(1.0f, -m - 1);
    std::uint16_t wire = 0;
    encode(w, &small, &wire, 1);     // a power of two: exact on the wire
    const float exact = in + small;  // exact in float32
    float out = 0;
    reduce_wire(w, &in, &wire, &out, 1, 1.0f);
    EXPECT_EQ(out, exact) << wire_type_name(w) << " out of place";
    float inplace = in;
    reduce_wire(w, &inplace, &wire, &inplace, 1, 1.0f);
    EXPECT_EQ(inplace, exact) << wire_type_name(w) << " in place";
    reduce_wire(w, &in, &wire, &out, 1, 0.5f);
    EXPECT_EQ(out, exact * 0.5f) << wire_type_name(w) << " scaled";
  }
}

// bf16 narrowing is hand-written (fp16's is the compiler's): round to nearest, ties to even, in
// both directions; +-Inf stays infinite and NaN stays NaN (whatever its payload: rounding the bits
// of 0x7f800001 like a number gives +Inf, of 0x7fffffff gives -0). fp16 beside it, through the
// same encode(). The round trip and tolerance cases above passed truncation, ties rounded away from
// zero, Inf turned into NaN and NaN rounded like a number: their values are never halfway cases.
TEST(WireCodec, HalfWireRoundsToNearestEvenAndKeepsInfAndNaN) {
  auto bits = [](std::uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  };
  const float inf = std::numeric_limits<float>::infinity();
  for (WireType w : {WireType::kFloat16, WireType::kBFloat16}) {
    SCOPED_TRACE(wire_type_name(w));
    const int m = w == WireType::kFloat16 ? 10 : 7;  // mantissa bits: the ulp of 1 is 2^-m
    const float ulp = std::ldexp(1.0f, -m), half = ulp / 2;
    // (value, expected after the round trip); every value is exact in float32.
    const std::vector<std::pair<float, float>> cases{
        {1.0f + half, 1.0f},                // tie, rounds down to the even neighbour
        {1.0f + 3 * half, 1.0f + 2 * ulp},  // tie, rounds up to the even neighbour
        {-(1.0f + half), -1.0f},            // ties are symmetric
        {-(1.0f + 3 * half), -(1.0f + 2 * ulp)},
        {1.0f + half + half / 4, 1.0f + ulp},  // just above a tie: up (truncation reads 1)
        {1.0f + half - half / 4, 1.0f},        // just below a tie: down
        {inf, inf},
        {-inf, -inf},
        {0.0f, 0.0f}};
    std::vector<float> x, back;
    for (const auto& c : cases) x.push_back(c.first);
    for (std::uint32_t nan : {0x7fc00000u, 0x7f800001u, 0x7fffffffu, 0xffc00001u})
      x.push_back(bits(nan));
    std::vector<std::uint16_t> h(x.size());
    back.resize(x.size());
    encode(w, x.data(), h.data(), x.size());
    decode(w, h.data(), back.data(), x.size());
    for (std::size_t i = 0; i < cases.size(); ++i)
      EXPECT_EQ(back[i], cases[i].second) << "encoding " << x[i];
    for (std::size_t i = cases.size(); i < x.size(); ++i)
      EXPECT_TRUE(std::isnan(back[i])) << "NaN came back as " << back[i];
  }
}

}  // namespace
}  // namespace starring
