// kdsl/divisor.cuh — integer floor division and remainder by a divisor known only at run time
// but the same for many dividends (`(i - j) % (h + 2)`, `j // W`, `i // max(blk[b], 1)`).
//
// ptxas expands each `/` by a value into some 25 instructions, the divisor's float reciprocal
// recomputed for every element. A Divisor holds a multiplier and two shifts, made once (the
// round-up method of Granlund and Montgomery, "Division by invariant integers using
// multiplication", PLDI 1994, figure 4.1); each dividend then takes a multiply-high and a few
// integer ops. Exact for every int dividend and divisor, with Python's floor semantics (as
// kdsl::floordiv / floormod in common.cuh), a zero divisor giving 0 as they do.
//
// Host and device: tests/test_divisor_header.py compiles this file for the CPU and checks it
// against Python's // and % on edge and random operands.
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define KDSL_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define KDSL_HOST_DEVICE inline
#endif

#ifndef KDSL_MAGIC_DIVISION  // 0: such a divisor divides each element as any other (A/B timing)
#define KDSL_MAGIC_DIVISION 1
#endif
#ifndef KDSL_TILE_DIVISORS  // 0: the tile predicates prepare a divisor at each division (A/B timing)
#define KDSL_TILE_DIVISORS 1
#endif
// 1: every division in the form NVVM can see never traps (floordiv below), so that it may share
// one among branches; set by the backward's programs (emit_backward.py; =0 there for A/B timing).
// The forward's divisions of a work item's values alone take that form always (floordiv_invariant:
// NVVM then hoists them out of its kv loop); with all in it, group_dilation's forward spilled 40 B.
#ifndef KDSL_SPECULATED_DIVISION
#define KDSL_SPECULATED_DIVISION 0
#endif
// 0: a work item's divisions (floordiv_invariant) and the divisors' preparation (make_divisor)
// in the forms NVVM keeps where written, as any other division (A/B timing)
#ifndef KDSL_INVARIANT_DIVISION
#define KDSL_INVARIANT_DIVISION 1
#endif

namespace kdsl {

struct Divisor {
  unsigned mul;     // the quotient of an unsigned n is (t + ((n - t) >> shift1)) >> shift2,
  unsigned shift1;  // t = umulhi(n, mul): shift1 = min(l, 1), shift2 = max(l - 1, 0) for
  unsigned shift2;  // l = ceil(log2 |d|)
  int value;        // d itself, for the remainder
  int negative;     // -1 where d < 0, else 0
  int nonzero;      // -1 where d != 0, else 0 (every result 0)
};

KDSL_HOST_DEVICE unsigned umulhi32(unsigned a, unsigned b) {
#if defined(__CUDA_ARCH__)
  return __umulhi(a, b);
#else
  return (unsigned)(((unsigned long long)a * b) >> 32);
#endif
}

// ceil(log2(x)) for x >= 1
KDSL_HOST_DEVICE unsigned ceil_log2(unsigned x) {
#if defined(__CUDA_ARCH__)
  return 32 - __clz(x - 1);
#else
  unsigned l = 0;
  while ((1ull << l) < x) ++l;
  return l;
#endif
}

KDSL_HOST_DEVICE Divisor make_divisor(int d) {
  // |d| in unsigned arithmetic (2^31 for INT_MIN); 1 for 0, whose results are masked to 0
  const unsigned magnitude = d == 0 ? 1u : d < 0 ? 0u - (unsigned)d : (unsigned)d;
  const unsigned l = ceil_log2(magnitude);
  Divisor v;
  // (2^l - |d|) < |d|, so the quotient fits in 32 bits: 2^32 (2^l - |d|) / |d| + 1; by
  // max(|d|, 1), which NVVM sees is never 0, so that it may prepare a divisor once ahead of the
  // branches that divide by it, or out of a loop (by |d| it prepared it again in each)
  const unsigned by = KDSL_INVARIANT_DIVISION || KDSL_SPECULATED_DIVISION ? (magnitude > 1u ? magnitude : 1u) : magnitude;
  v.mul = (unsigned)((((1ull << l) - magnitude) << 32) / by) + 1;
  v.shift1 = l < 1 ? l : 1;
  v.shift2 = l < 1 ? 0 : l - 1;
  v.value = d;
  v.negative = d < 0 ? -1 : 0;
  v.nonzero = d != 0 ? -1 : 0;
  return v;
}

// floor(n / |d|) for an unsigned n
KDSL_HOST_DEVICE unsigned udiv(unsigned n, const Divisor& v) {
  const unsigned t = umulhi32(n, v.mul);
  return (t + ((n - t) >> v.shift1)) >> v.shift2;
}

// floor(a / d) = floor(a' / |d|) for a' = a, or -a where d < 0 (modulo 2^32: -INT_MIN is 2^31,
// which unsigned holds); a negative a' divides as ~(~a' / |d|), ~a' = -a' - 1 >= 0. Where the
// caller knows that d >= 0 (kDivisorNonNeg), or a >= 0 too (kDividendNonNeg), the sign work goes.
template <bool kDivisorNonNeg = false, bool kDividendNonNeg = false>
KDSL_HOST_DEVICE int floordiv(int a, const Divisor& v) {
  if (kDivisorNonNeg && kDividendNonNeg) return (int)(udiv((unsigned)a, v) & (unsigned)v.nonzero);
  const unsigned flip = kDivisorNonNeg ? 0u : (unsigned)v.negative;
  const unsigned a_signed = ((unsigned)a ^ flip) - flip;
  const unsigned below = flip ? 0u - (unsigned)(a > 0) : (unsigned)(a >> 31);  // all ones where a' < 0
  return (int)((udiv(a_signed ^ below, v) ^ below) & (unsigned)v.nonzero);
}

// a - floor(a / d) * d, the sign of d's (in unsigned arithmetic: INT_MIN % -1 is 0, no overflow)
template <bool kDivisorNonNeg = false, bool kDividendNonNeg = false>
KDSL_HOST_DEVICE int floormod(int a, const Divisor& v) {
  const unsigned q = (unsigned)floordiv<kDivisorNonNeg, kDividendNonNeg>(a, v);
  return (int)(((unsigned)a - q * (unsigned)v.value) & (unsigned)v.nonzero);
}

// Python semantics for integer // and % (floor, not truncation), as the language promises;
// on int, and on i64 for derived bounds (cexpr.WideEmitter). A zero divisor gives 0, as the
// reference computes it (semantics._floor_division), never the hardware's unspecified value:
// one the sizes could make 0 is refused before launch, so it is data's or an untaken branch's.
template <class I> struct UnsignedOf;
template <> struct UnsignedOf<int> { typedef unsigned T; };
template <> struct UnsignedOf<long long> { typedef unsigned long long T; };

// The quotient of the magnitudes, unsigned, by max(|b|, 1): a division NVVM can see never traps
// (no zero divisor, no INT_MIN / -1), so that it may compute it ahead of the branches that use it
// and flatten them, or hoist it out of a loop. A signed `a / d` it kept behind each branch, and
// computed again in every one: the backward's mask `(i - j) % (h // (H // Hkv) + 1)` divided h by
// H // Hkv and prepared the result's divisor (a 64-bit division) once an element (68 calls of the
// 64-bit routine in its D=128 cubin; 8 with this form and the mask evaluated first,
// attention_bwd_wgmma.cuh kBwdMaskFirst).
template <class I>
KDSL_HOST_DEVICE I floordiv_speculated(I a, I b) {
  typedef typename UnsignedOf<I>::T U;
  const U ua = a < 0 ? U(0) - U(a) : U(a), ub = b < 0 ? U(0) - U(b) : U(b);
  const U uq = ua / (ub > U(1) ? ub : U(1));
  const bool below = (a < 0) != (b < 0);  // a negative quotient: inexact, one further from zero
  const U mag = uq + U(below & (uq * ub != ua));
  return b == 0 ? I(0) : below ? I(U(0) - mag) : I(mag);
}
template <class I>
KDSL_HOST_DEVICE I floormod_speculated(I a, I b) {  // a - floor(a / b) * b, the sign of b's (mod 2^bits)
  typedef typename UnsignedOf<I>::T U;
  return b == 0 ? I(0) : I(U(a) - U(floordiv_speculated(a, b)) * U(b));
}

// Shorter per division (one signed divide and its floor fixup), but NVVM keeps it where written.
template <class I>
KDSL_HOST_DEVICE I floordiv_signed(I a, I b) {
  const I d = b == 0 ? I(1) : b;
  const I q = a / d;
  return b == 0 ? I(0) : (q * d != a && ((a < 0) != (d < 0))) ? q - 1 : q;
}
template <class I>
KDSL_HOST_DEVICE I floormod_signed(I a, I b) {
  const I d = b == 0 ? I(1) : b;
  const I r = a % d;
  return b == 0 ? I(0) : (r != 0 && ((r < 0) != (d < 0))) ? r + d : r;
}

// The form by a flag: kSpeculated, the magnitudes' (never traps), else the signed one
template <bool kSpeculated, class I>
KDSL_HOST_DEVICE I floordiv_form(I a, I b) {
  return kSpeculated ? floordiv_speculated(a, b) : floordiv_signed(a, b);
}
template <bool kSpeculated, class I>
KDSL_HOST_DEVICE I floormod_form(I a, I b) {
  return kSpeculated ? floormod_speculated(a, b) : floormod_signed(a, b);
}
template <class I>
KDSL_HOST_DEVICE I floordiv(I a, I b) { return floordiv_form<KDSL_SPECULATED_DIVISION != 0>(a, b); }
template <class I>
KDSL_HOST_DEVICE I floormod(I a, I b) { return floormod_form<KDSL_SPECULATED_DIVISION != 0>(a, b); }

// A division whose operands are the same for a whole work item (`h // (H // Hkv)`; cexpr.py):
// always the form NVVM may hoist out of the kv loop. Signed, the forward's partial tiles divided
// again on every group of eight keys (behind the partial test), and prepared the quotient's
// divisor there too: group_dilation's D=128 forward made 14 calls of the 64-bit division routine.
constexpr bool kInvariantSpeculated = KDSL_INVARIANT_DIVISION || KDSL_SPECULATED_DIVISION;
template <class I>
KDSL_HOST_DEVICE I floordiv_invariant(I a, I b) { return floordiv_form<kInvariantSpeculated>(a, b); }
template <class I>
KDSL_HOST_DEVICE I floormod_invariant(I a, I b) { return floormod_form<kInvariantSpeculated>(a, b); }

}  // namespace kdsl
