"""kdsl/divisor.cuh, the prepared divisor behind `(i - j) % (h + 2)` and `j // W`, compiled for
the CPU by the host's C++ compiler (the header's host path differs from the device's only in
umulhi and ceil_log2) and checked against Python's // and % (and 0 for a zero divisor, as the
kernel promises) on every pair of edge values and on random pairs, under each sign flag the
code generator passes (cexpr.nonnegative)."""
import random
import shutil
import subprocess

import pytest

from kdsl.codegen.emit import INCLUDE_DIR

I32_MIN, I32_MAX = -2**31, 2**31 - 1
EDGES = [0, 1, -1, 2, -2, 3, -3, 7, -7, 64, 127, 128, -128, 1000, 65535, 65536, 2**30, -2**30, 2**30 + 1,
         2**31 - 2, I32_MAX, I32_MIN, I32_MIN + 1, 46341, -46341, 3 * 2**29, 5**13]

PROGRAM = r"""
#include <cstdio>
#include "kdsl/divisor.cuh"
int main() {
  long long a, d;
  while (std::scanf("%lld %lld", &a, &d) == 2) {
    const kdsl::Divisor v = kdsl::make_divisor((int)d);
    // (the signed form divides INT_MIN by -1, which traps on the CPU; the GPU's has no trap)
    const bool trap = !KDSL_SPECULATED_DIVISION && a == -2147483648LL && d == -1;
    std::printf("%lld %lld ", kdsl::floordiv(a, d), kdsl::floormod(a, d));  // on i64 (the derived bounds')
    std::printf("%d %d %d %d %d %d %d %d %d ", kdsl::floordiv((int)a, v), kdsl::floormod((int)a, v),
                kdsl::floordiv<true>((int)a, v), kdsl::floormod<true>((int)a, v),
                kdsl::floordiv<true, true>((int)a, v), kdsl::floormod<true, true>((int)a, v),
                trap ? 0 : kdsl::floordiv((int)a, (int)d), trap ? 0 : kdsl::floormod((int)a, (int)d), (int)trap);
    // a work item's division (the form NVVM may hoist), on int and i64
    const bool trap_item = !KDSL_INVARIANT_DIVISION && trap;
    std::printf("%d %d %lld %lld %d\n", trap_item ? 0 : kdsl::floordiv_invariant((int)a, (int)d),
                trap_item ? 0 : kdsl::floormod_invariant((int)a, (int)d), kdsl::floordiv_invariant(a, d),
                kdsl::floormod_invariant(a, d), (int)trap_item);
  }
}
"""


def _wrap(x: int) -> int:
    return (x + 2**31) % 2**32 - 2**31


def _expected(a: int, d: int) -> tuple[int, int]:
    """Python's // and %, wrapped to i32 as the kernel's ints are (only INT_MIN // -1 wraps),
    and 0 for a zero divisor."""
    return (0, 0) if d == 0 else (_wrap(a // d), _wrap(a % d))


@pytest.fixture(scope="module", params=[(0, 1), (1, 1), (0, 0)], ids=["signed", "speculated", "item-signed"])
def divide(tmp_path_factory, request):
    """The header's divisions with KDSL_SPECULATED_DIVISION off (the forward's) and on (the
    backward's: floordiv / floormod by an int through the magnitudes), and a work item's
    (floordiv_invariant: through the magnitudes, or with KDSL_INVARIANT_DIVISION=0 as any other;
    the divisor's multiplier by max(|d|, 1) unless both are 0)."""
    speculated, invariant = request.param
    cxx = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no C++ compiler on this machine")
    d = tmp_path_factory.mktemp("divisor")
    (d / "t.cpp").write_text(PROGRAM)
    subprocess.run([cxx, "-O2", "-std=c++17", f"-DKDSL_SPECULATED_DIVISION={speculated}",
                    f"-DKDSL_INVARIANT_DIVISION={invariant}", f"-I{INCLUDE_DIR}",
                    str(d / "t.cpp"), "-o", str(d / "t")], check=True)

    def run(pairs):
        out = subprocess.run([str(d / "t")], input="".join(f"{a} {b}\n" for a, b in pairs),
                             capture_output=True, text=True, check=True).stdout.split("\n")
        return [tuple(map(int, line.split())) for line in out if line]
    return run


def _check(divide, pairs):
    for (a, d), got in zip(pairs, divide(pairs), strict=True):
        wide, got = got[:2], got[2:]
        assert wide == ((0, 0) if d == 0 else (a // d, a % d)), (a, d, wide)
        want = _expected(a, d)
        assert got[:2] == want, (a, d, got)
        assert got[8] or got[6:8] == want, (a, d, got)  # floordiv / floormod by an int
        assert got[13] or got[9:11] == want, (a, d, got)  # a work item's, on int
        assert got[11:13] == ((0, 0) if d == 0 else (a // d, a % d)), (a, d, got)  # and on i64
        if d >= 0:  # the flag's promise holds
            assert got[2:4] == want, (a, d, got)
            if a >= 0:
                assert got[4:6] == want, (a, d, got)


def test_every_pair_of_edge_values(divide):
    _check(divide, [(a, d) for a in EDGES + [-x for x in EDGES] for d in EDGES + [-x for x in EDGES]
                    if I32_MIN <= a <= I32_MAX and I32_MIN <= d <= I32_MAX])


def test_random_pairs_small_and_large(divide):
    rng = random.Random()
    draw = lambda: rng.choice([rng.randint(-300, 300), rng.randint(I32_MIN, I32_MAX),  # noqa: E731
                               rng.choice([1, -1]) * rng.randint(0, 2**rng.randint(1, 31) - 1)])
    _check(divide, [(draw(), draw()) for _ in range(200_000)])


def test_every_divisor_near_a_power_of_two_with_the_dividends_that_stress_it(divide):
    """Where the multiplier's rounding matters most: d = 2^k - 1, 2^k, 2^k + 1, and dividends
    just below and at multiples of d near the top of the range."""
    pairs = []
    for k in range(31):
        for d in (2**k - 1, 2**k, 2**k + 1):
            if not 0 < d <= I32_MAX:
                continue
            top = I32_MAX // d * d
            for a in (top, top - 1, top + d - 1, d - 1, d, 2 * d - 1):
                for sa, sd in ((1, 1), (-1, 1), (1, -1), (-1, -1)):
                    if I32_MIN <= sa * a <= I32_MAX:
                        pairs.append((sa * a, sd * d))
    _check(divide, pairs)


def test_the_hopper_kernels_divide_by_prepared_divisors():
    """The forward's Variant divides `(i - j) % (h + 2)` by the prepared divisor, prepared in
    item_warm (which dominates every use, so NVVM reuses it), the sign flags from the operands'
    forms (h + 2 and the size W are >= 0, i - j may not be); so does the backward's, which calls
    no item_warm: NVVM merges its elements' preparations within a step (head_stride's backward,
    sm_90a: 4,360 SASS instructions against 5,576 dividing plainly, and x1.36 on an H200)."""
    from kdsl.codegen import emit, emit_backward
    from kdsl.passes.target import get_target

    from conftest import lowered
    k = lowered("""attention t {
        q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
        rel: f32[H, W]
        score(s, b, h, i, j) = s + rel[h, j % W]
        mask(b, h, i, j) = j <= i and (i - j) % (h + 2) == 0
    }""", 128)
    forward = emit.generate(k).source
    assert "kdsl::floormod_by<true, false>((q - kv), (h + 2))" in forward
    assert "kdsl::floormod_by<true, true>(kv, c.dim_W)" in forward
    assert "kdsl::keep_alive(kdsl::make_divisor((h + 2)));" in forward
    assert "kdsl::keep_alive(kdsl::make_divisor(c.dim_W));" in forward
    backward = emit_backward.generate_backward(k, get_target("sm_90a")).source
    assert "kdsl::floormod_by<true, false>((q - kv), (h + 2))" in backward.split("bool mask(")[1].split("}")[0]


def test_the_tile_predicates_prepare_the_items_divisor_once():
    """tile() (the tile predicates: the producer's walk and the consumers') prepares an item's
    divisor once at its top and divides by it on every branch: prepared at each division, NVVM
    made the 64-bit division of make_divisor up to three times a lane and step (group_dilation's
    forward, sm_90a: 4,504 SASS instructions and 40 B of local memory, against 4,376 and 24). A
    divisor its predicates do not use is not prepared there."""
    from kdsl.codegen import emit, emit_backward
    from kdsl.passes.target import get_target

    from conftest import lowered
    k = lowered("""attention t {
        q: bf16[B, H, M, D]; k: bf16[B, Hkv, N, D]; v: bf16[B, Hkv, N, D]
        mask(b, h, i, j) = j <= i and (i - j < 64 or (i - j) % (h // (H // Hkv) + 1) == 0)
    }""", 128)
    for source in (emit.generate(k).source, emit_backward.generate_backward(k, get_target("sm_90a")).source):
        tile = source.split("int tile(")[1].split("\n  }")[0]
        assert tile.count("kdsl::tile_divisor(") == 1 and "tile_divisor((kdsl::floordiv_invariant(h," in tile
        assert "tile_div0)" in tile and "make_divisor" not in tile
    plain = lowered("""attention t {
        q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
        rel: f32[H, W]
        score(s, b, h, i, j) = s + rel[h, j % W]
        mask(b, h, i, j) = j <= i
    }""", 128)
    assert "tile_divisor" not in emit.generate(plain).source


def test_a_divisor_of_the_query_position_is_prepared_per_row():
    """`j % (i // 1024 + 1)`: the divisor is a row's, so the mask divides by it prepared
    (NVVM shares the preparation among the row's elements of a tile: growing_stride's
    forward, sm_90a, 3,888 SASS instructions against 4,200 dividing plainly), but item_warm,
    which has no row, does not prepare it; a divisor of the key position stays a plain one,
    and so do both in the backward."""
    from kdsl.codegen import emit, emit_backward
    from kdsl.passes.target import get_target

    from conftest import lowered
    k = lowered("""attention t {
        q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
        score(s, b, h, i, j) = s + float(i % (j + 1))
        mask(b, h, i, j) = j <= i and (i - j < 128 or j % (i // 1024 + 1) == 0)
    }""", 128)
    forward = emit.generate(k).source
    assert "kdsl::floormod_by<true, true>(kv, ((q >> 10) + 1))" in forward
    assert "make_divisor" not in forward.split("item_warm(")[1].split("}")[0]
    assert "floormod_by" not in forward.split("float score(")[1].split("}")[0]
    # the backward's rows are keys, and its elements' preparations of a key's divisor did not
    # merge (x0.74): both not prepared there (unsigned: both operands are >= 0)
    backward = emit_backward.generate_backward(k, get_target("sm_90a")).source
    assert "kdsl::floormod_nonneg(kv, ((q >> 10) + 1))" in backward.split("bool mask(")[1].split("}")[0]
    assert "kdsl::floormod_nonneg(q, (kv + 1))" in backward.split("float score(")[1].split("}")[0]


def test_a_division_of_non_negative_operands_is_unsigned():
    """A division not prepared, by a divisor that varies per element, whose operands are both >= 0
    by their forms divides unsigned, with no floor fixup (common.cuh floormod_nonneg): the five
    kernels of the samples and held-out sets it changed lost 0-1,480 SASS instructions (sm_90a,
    D=64/128, forward and backward; growing_stride's backward 4,992 -> 4,640), and batch_blocks'
    backward's local memory went 88 -> 40 B. So does a constant divisor that is no power of two
    (a shift already) of a dividend >= 0: NVVM multiplies either way, but drops the sign and
    floor fixups (the ten corpus kernels it changed: 0-1,096 fewer SASS instructions a kernel,
    row_signed's D=64 backward 15,920 -> 13,512; one grew, batch_head_mode's D=64 backward 2,728
    -> 3,688). One whose dividend may be negative keeps the signed floor division, and so does
    an item's."""
    from kdsl.codegen import emit_backward
    from kdsl.passes.target import get_target

    from conftest import lowered
    k = lowered("""attention t {
        q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
        mask(b, h, i, j) = j <= i and (i - j < 128 or j % (i // 1024 + 1) == 0) and (i - j) % (j % 5 + 1) != 2
    }""", 128)
    mask = emit_backward.generate_backward(k, get_target("sm_90a")).source.split("bool mask(")[1].split("}")[0]
    assert "kdsl::floormod_nonneg(kv, ((q >> 10) + 1))" in mask
    assert "kdsl::floormod((q - kv), (kdsl::floormod_nonneg(kv, 5) + 1))" in mask
    k = lowered("""attention t {
        q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
        mask(b, h, i, j) = (i - j) % 5 != 0 and j % 8 < 4 and i // 6 != 1
    }""", 128)
    mask = emit_backward.generate_backward(k, get_target("sm_90a")).source.split("bool mask(")[1].split("}")[0]
    assert "kdsl::floormod((q - kv), 5)" in mask and "(kv & 7)" in mask and "kdsl::floordiv_nonneg(q, 6)" in mask
