// kdsl/common.cuh — types and small device helpers shared by every kdsl kernel.
//
// Kernels are compiled by NVRTC with no CUDA or C++ standard headers on the include
// path, so this header defines the few fixed-width types it needs itself and does every
// conversion with inline PTX. It must stay includable by both NVRTC and nvcc.
#pragma once

#include "kdsl/divisor.cuh"

namespace kdsl {

typedef unsigned char      u8;
typedef unsigned short     u16;
typedef unsigned int       u32;
typedef unsigned long long u64;
typedef long long          i64;

// Storage-only element types: kernels load/store the raw bits and convert with PTX.
struct bf16_t { u16 bits; };
struct f16_t  { u16 bits; };
struct e4m3_t { u8 bits; };

// Tile classes produced by the generated mask analysis (Variant::tile).
// kTileKeys: partial, and the mask there is one key interval per row (passes/kv_bounds.py;
// the Hopper kernel only)
enum TileClass : int { kTileEmpty = 0, kTileFull = 1, kTilePartial = 2, kTileKeys = 3 };

#define KDSL_DEVICE __device__ __forceinline__

KDSL_DEVICE float neg_inf() { return __int_as_float(0xff800000); }

// Fast 2^x (MUFU.EX2); exact enough for softmax in the log2 domain.
KDSL_DEVICE float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// 2^x for x <= 0 (a softmax argument) on the FMA and integer pipes, leaving the MUFU to the
// score's own functions: 2^x = 2^j * 2^f with j = round(x), f in [-1/2, 1/2]; 2^f by a cubic
// (a fit for relative error: at most 7.5e-5 over [-127, 0], far below bf16's 3.9e-3), 2^j
// added to its exponent. The magic constant 1.5 * 2^23 rounds x to an integer in t's low
// mantissa bits, and t << 23 is then j << 23. x is clamped to -127.5, where j = -128 takes
// any result below 2^-126 under zero: the integer max with 0 makes it +0, so -inf (a masked
// score) gives exactly 0, as ex2.approx does. 9 instructions in place of one MUFU.EX2 (which
// takes 8 cycles of a sub-partition's quarter-rate unit): an option for scores that keep the
// MUFU busy too (tiling.py POLY_EXP2).
KDSL_DEVICE float exp2_poly(float x) {
  x = fmaxf(x, -127.5f);
  const float t = x + 12582912.f;
  const float f = x - (t - 12582912.f);
  const float p = fmaf(fmaf(fmaf(0.055171460f, f, 0.24261086f), f, 0.69326097f), f, 0.99992812f);
  return __int_as_float(max(__float_as_int(p) + (__float_as_int(t) << 23), 0));
}

// Pack two floats into a bf16x2 / f16x2 register (round to nearest even).
KDSL_DEVICE u32 pack_bf16x2(float lo, float hi) {
  u32 r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
KDSL_DEVICE u32 pack_f16x2(float lo, float hi) {
  u32 r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
// The same for the kernels' 16-bit element type (an accumulator pair as one register of an
// MMA fragment, or one 4-byte store).
template <class Elem> KDSL_DEVICE u32 pack2(float lo, float hi);
template <> KDSL_DEVICE u32 pack2<bf16_t>(float lo, float hi) { return pack_bf16x2(lo, hi); }
template <> KDSL_DEVICE u32 pack2<f16_t>(float lo, float hi) { return pack_f16x2(lo, hi); }
KDSL_DEVICE float bf16_to_float(u16 x) { return __uint_as_float(((u32)x) << 16); }
KDSL_DEVICE float f16_to_float(u16 x) {
  float f;
  asm("{ .reg .f16 h; mov.b16 h, %1; cvt.f32.f16 %0, h; }" : "=f"(f) : "h"(x));
  return f;
}
// pack2's inverse: the pair of a bf16x2 / f16x2 register as floats (lo, hi).
template <class Elem> KDSL_DEVICE float2 unpack2(u32 w);
template <> KDSL_DEVICE float2 unpack2<bf16_t>(u32 w) {
  return float2{bf16_to_float((u16)(w & 0xffffu)), bf16_to_float((u16)(w >> 16))};
}
template <> KDSL_DEVICE float2 unpack2<f16_t>(u32 w) {
  return float2{f16_to_float((u16)(w & 0xffffu)), f16_to_float((u16)(w >> 16))};
}

// Captured-tensor element reads, converted to the kdsl scalar types (f32 / i32).
KDSL_DEVICE float load_f32(const float* p, i64 i) { return __ldg(p + i); }
KDSL_DEVICE float load_f32(const bf16_t* p, i64 i) {
  return bf16_to_float(__ldg(reinterpret_cast<const unsigned short*>(p) + i));
}
KDSL_DEVICE float load_f32(const f16_t* p, i64 i) {
  return f16_to_float(__ldg(reinterpret_cast<const unsigned short*>(p) + i));
}
KDSL_DEVICE int load_i32(const int* p, i64 i) { return __ldg(p + i); }
// 1-byte masks and ids (torch.bool, int8, uint8): a quarter of an i32 tensor's bytes
KDSL_DEVICE int load_i32(const signed char* p, i64 i) { return __ldg(p + i); }
KDSL_DEVICE int load_i32(const unsigned char* p, i64 i) { return __ldg(p + i); }
KDSL_DEVICE bool load_bool(const bool* p, i64 i) {
  return __ldg(reinterpret_cast<const unsigned char*>(p) + i) != 0;  // torch stores 0 / 1
}

// Transcendentals in score and mask expressions. By default the hardware approximations
// (MUFU), whose error stays far inside bf16/fp16 attention's tolerance; compiled with
// -DKDSL_EXACT_MATH (kdsl.load(..., exact_math=True)) they are libm's accurate versions.
//   tanh: tanh.approx.f32, max relative error about 2^-11 (PTX ISA)
//   sigmoid(x) = 0.5 + 0.5 tanh(x / 2): the same error, one MUFU instead of ex2 + rcp
//   exp, exp2: ex2.approx.ftz.f32, max relative error about 2^-22 (2 ulp) on exp2
//   log, log2: lg2.approx.ftz.f32, max absolute error about 2^-22
//   x / y:    __fdividef, max error 2 ulp for |y| in [2^-126, 2^126]
//   sin, cos: reduced to [-pi, pi] (Cody-Waite, two-term 2*pi), then sin/cos.approx.f32,
//             max absolute error about 2^-20 there; the reduction loses about |x| * 2^-33
KDSL_DEVICE float math_tanh(float x) {
#ifdef KDSL_EXACT_MATH
  return tanhf(x);
#else
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#endif
}
KDSL_DEVICE float math_sigmoid(float x) {
#ifdef KDSL_EXACT_MATH
  return 1.0f / (1.0f + expf(-x));
#else
  return fmaf(0.5f, math_tanh(0.5f * x), 0.5f);
#endif
}
KDSL_DEVICE float math_exp2(float x) {
#ifdef KDSL_EXACT_MATH
  return exp2f(x);
#else
  return exp2_approx(x);
#endif
}
constexpr float kLog2e = 1.4426950408889634f;  // exp(x) = 2^(x kLog2e)
constexpr int kIntMin = -0x7fffffff - 1, kIntMax = 0x7fffffff;
KDSL_DEVICE float math_exp(float x) {
#ifdef KDSL_EXACT_MATH
  return expf(x);
#else
  return exp2_approx(x * kLog2e);
#endif
}
KDSL_DEVICE float math_log2(float x) {
#ifdef KDSL_EXACT_MATH
  return log2f(x);
#else
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#endif
}
KDSL_DEVICE float math_log(float x) {
#ifdef KDSL_EXACT_MATH
  return logf(x);
#else
  return math_log2(x) * 0.69314718055994531f;
#endif
}

// Float division: __fdividef (reciprocal and multiply, 2 ulp; a constant divisor becomes one
// multiply) rather than IEEE division's multi-instruction sequence with a slow path.
KDSL_DEVICE float math_div(float a, float b) {
#ifdef KDSL_EXACT_MATH
  return a / b;
#else
  return __fdividef(a, b);
#endif
}

KDSL_DEVICE float reduce_2pi(float x) {
  const float k = rintf(x * 0.15915494309189535f);
  return fmaf(-k, -1.7484555e-07f, fmaf(-k, 6.28318548f, x));  // 2*pi = 6.28318548 - 1.7484555e-07
}
KDSL_DEVICE float math_sin(float x) {
#ifdef KDSL_EXACT_MATH
  return sinf(x);
#else
  float y;
  asm("sin.approx.f32 %0, %1;" : "=f"(y) : "f"(reduce_2pi(x)));
  return y;
#endif
}
KDSL_DEVICE float math_cos(float x) {
#ifdef KDSL_EXACT_MATH
  return cosf(x);
#else
  float y;
  asm("cos.approx.f32 %0, %1;" : "=f"(y) : "f"(reduce_2pi(x)));
  return y;
#endif
}

KDSL_DEVICE int imin(int a, int b) { return a < b ? a : b; }
KDSL_DEVICE int imax(int a, int b) { return a > b ? a : b; }
KDSL_DEVICE int iabs(int a) { return a < 0 ? -a : a; }
// 64-bit forms, for derived bounds that may leave the i32 range (cexpr.WideEmitter)
KDSL_DEVICE i64 imin(i64 a, i64 b) { return a < b ? a : b; }
KDSL_DEVICE i64 imax(i64 a, i64 b) { return a > b ? a : b; }
// A key interval [lo64, hi64] (64-bit: exact, passes/kv_bounds.py) clamped to the tile of bn keys
// from k0: lo in [k0, k0 + bn], hi in [k0 - 1, k0 + bn - 1] (hi < lo: no key).
KDSL_DEVICE void clamp_to_tile(i64 lo64, i64 hi64, int k0, int bn, int& lo, int& hi) {
  lo = (int)imin(imax(lo64, (i64)k0), (i64)(k0 + bn));
  hi = (int)imax(imin(hi64, (i64)(k0 + bn - 1)), (i64)(k0 - 1));
}
KDSL_DEVICE i64 iabs(i64 a) { return a < 0 ? -a : a; }
// The same integer, but one NVVM's optimizer cannot see through: cexpr.py puts it every few
// levels of a deep chain of integer min / max, whose build time otherwise grows ~2.5x a level
// (not volatile: equal inputs may still share one).
KDSL_DEVICE int opaque_value(int x) {
  asm("" : "+r"(x));
  return x;
}
KDSL_DEVICE i64 opaque_value(i64 x) {
  asm("" : "+l"(x));
  return x;
}
// A value computed here and kept (an empty asm reads it): a Variant's item_warm evaluates the
// item's divisions before the kv loop so that NVVM reuses them inside it.
KDSL_DEVICE void keep_alive(int x) { asm volatile("" ::"r"(x)); }
KDSL_DEVICE void keep_alive(i64 x) { asm volatile("" ::"l"(x)); }
KDSL_DEVICE void keep_alive(const Divisor& v) {  // a divisor prepared once an item (divisor.cuh)
  if (KDSL_MAGIC_DIVISION) asm volatile("" ::"r"(v.mul), "r"(v.shift1), "r"(v.shift2));
}

// A float bound of a tile predicate moved outwards past the kernel's rounding (passes/float_bounds.py).
KDSL_DEVICE float widen_up(float x, float rel, float abs_slack) { return x + (fabsf(x) * rel + abs_slack); }
KDSL_DEVICE float widen_down(float x, float rel, float abs_slack) { return x - (fabsf(x) * rel + abs_slack); }

// An f32 as an int that orders as the floats do, and back (ir.FLOAT_ORDER): a tile summary's
// integer min / max of float data.
KDSL_DEVICE int f32_order(float x) {
  const int b = __float_as_int(x);
  return b < 0 ? b ^ 0x7fffffff : b;
}
KDSL_DEVICE float order_f32(int s) { return __int_as_float(s < 0 ? s ^ 0x7fffffff : s); }

// Python's // and % on int and i64: floordiv / floormod (divisor.cuh).
// The same where both operands are >= 0 by their forms (passes/int_signs.py nonnegative: the
// runtime keeps such values of the positions and sizes within i32): floor and truncation agree,
// and an unsigned division is shorter than a signed one and its floor fixup (a divisor of the
// positions, divided per element: `j % (i // 1024 + 1)` in the backward). A zero divisor gives 0.
// KDSL_UNSIGNED_DIVISION=0 divides them as any other (A/B timing).
#ifndef KDSL_UNSIGNED_DIVISION
#define KDSL_UNSIGNED_DIVISION 1
#endif
template <class I, class U>
KDSL_DEVICE I floordiv_unsigned(I a, I b) {
  return KDSL_UNSIGNED_DIVISION ? (b == 0 ? I(0) : I(U(a) / U(b))) : floordiv(a, b);
}
template <class I, class U>
KDSL_DEVICE I floormod_unsigned(I a, I b) {
  return KDSL_UNSIGNED_DIVISION ? (b == 0 ? I(0) : I(U(a) % U(b))) : floormod(a, b);
}
KDSL_DEVICE int floordiv_nonneg(int a, int b) { return floordiv_unsigned<int, unsigned>(a, b); }
KDSL_DEVICE int floormod_nonneg(int a, int b) { return floormod_unsigned<int, unsigned>(a, b); }
// (cexpr.WideEmitter's 64-bit bounds)
KDSL_DEVICE i64 floordiv_nonneg(i64 a, i64 b) { return floordiv_unsigned<i64, unsigned long long>(a, b); }
KDSL_DEVICE i64 floormod_nonneg(i64 a, i64 b) { return floormod_unsigned<i64, unsigned long long>(a, b); }
// The same, by a divisor of b, h and the sizes that the kernel prepared where it took the item
// (Variant::item_warm, passes/item_divisions.py divisors()): NVVM reuses that make_divisor(b)
// for every element. The flags: b >= 0, a >= 0 known (cexpr.nonnegative; the sign work goes).
template <bool kDivisorNonNeg, bool kDividendNonNeg>
KDSL_DEVICE int floordiv_by(int a, int b) {
  return KDSL_MAGIC_DIVISION ? floordiv<kDivisorNonNeg, kDividendNonNeg>(a, make_divisor(b)) : floordiv(a, b);
}
template <bool kDivisorNonNeg, bool kDividendNonNeg>
KDSL_DEVICE int floormod_by(int a, int b) {
  return KDSL_MAGIC_DIVISION ? floormod<kDivisorNonNeg, kDividendNonNeg>(a, make_divisor(b)) : floormod(a, b);
}
// The same by a divisor a function prepared once at its top (the Variant's tile(), whose
// predicates use it on several branches: prepared in each, the 64-bit division of make_divisor
// was made up to three times a lane and tile step; cexpr.py `prepared`). tile_divisor(d) is
// that preparation, or d itself with KDSL_TILE_DIVISORS=0, which divides as before.
#if KDSL_TILE_DIVISORS
KDSL_DEVICE Divisor tile_divisor(int d) { return make_divisor(d); }
#else
KDSL_DEVICE int tile_divisor(int d) { return d; }
#endif
template <bool kDivisorNonNeg, bool kDividendNonNeg>
KDSL_DEVICE int floordiv_by(int a, const Divisor& v) {
  return KDSL_MAGIC_DIVISION ? floordiv<kDivisorNonNeg, kDividendNonNeg>(a, v) : floordiv(a, v.value);
}
template <bool kDivisorNonNeg, bool kDividendNonNeg>
KDSL_DEVICE int floormod_by(int a, const Divisor& v) {
  return KDSL_MAGIC_DIVISION ? floormod<kDivisorNonNeg, kDividendNonNeg>(a, v) : floormod(a, v.value);
}

}  // namespace kdsl
