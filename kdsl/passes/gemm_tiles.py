"""Tile shapes of the FP8 GEMM per problem: BLOCK_M, BLOCK_N, pipeline stages, cluster and
multicast, L2 rasterisation and the store path, chosen from (M, N, K, G) and the GPU's SM
count so that the waves of persistent CTAs fill the machine.

A configuration's time is the largest of three estimates: its L2 and shared-memory traffic
cycles divided by the last wave's efficiency (DeepGEMM's model, csrc/jit_kernels/heuristics/
sm90.hpp), and its waves of tiles times what one tile costs the main loop, from per-tile
tables measured on an H100 (block period and epilogue, BLOCK_PERIOD and TILE_OVERHEAD;
tools/dev/tile_model_eval.py scores the picks against timed logs). Every candidate must fit the
kernel's limits (fp8_gemm_config.cuh static_asserts the same ones): registers (accumulators
and totals), shared memory (>= 3 stages, >= 4 for tiles under 128 x 192), a tile straddling
at most two 128-column scale blocks of B, and a cluster only where every CTA pair shares
its multicast tile. Attributes already on the kernel (`attr tile_n = 112`, ...) are kept:
the choice is made among the candidates that agree with them, or refused with the reason.
"""
from __future__ import annotations

import functools
import math
import numbers
from dataclasses import dataclass

from ..errors import KdslError

# 192 rows: three math warpgroups of one m64 wave each, in turns (fp8_gemm_math.cuh).
BLOCK_M = (64, 128, 192, 256)
# 2-CTA clusters the model may choose unasked (an attr may ask for any), each with its time
# factor against the same tile unclustered, measured on the H100 (history: bench/NOTES.md,
# twentieth to thirty-first sessions):
# - dense 256x128 with A multicast is the only one that pays: 0.97, fitted after its K loop was
#   unrolled on 16 shapes near the border (h100-2026-11-28-s31-border.log; the pick is then the
#   fastest tile or within 0.5 % on 15; 0.95 took the cluster where it ran 6 % slower);
# - from K >= 2048 only: at K = 512 it lost 6-11 % on two of four shapes, and at K = 1024-1792
#   it lost 1-13 % on problems of under four waves (s31-cluster-small-k-heldout.log), a per-tile
#   cost a flat factor cannot carry;
# - 128- and 192-row tiles ran 4-17 % slower clustered, as did masked (-3 %) and contiguous
#   (-4 %) 256x128 before the unroll.
CLUSTER_GAIN = {("dense", 256, 128, "a"): 0.97}  # (grouping, tile_m, tile_n, multicast): time factor
CLUSTER_MIN_K = 2048
# Multiples of 16 whose tiles straddle at most two scale blocks of B (BN - gcd(BN, 128) <= 128).
BLOCK_N = tuple(n for n in range(16, 193, 16) if n - math.gcd(n, 128) <= 128)
MAX_STAGES = 8
MULTICAST = ("none", "a", "b")
STORES = ("tma", "rows")
# How A's scales reach shared memory: by TMA (a 2-D map over a_scale, whose rows of M floats
# must be whole 16-byte units: M % 4 == 0), or by the producer warp's 4-byte cp.asyncs.
# Nsight Compute (H100, 2026-11-27): those copies were most of the ~110 instructions the
# producer issued a K block, more than a 128-row tile's K block lasts.
SCALE_LOADS = ("tma", "copy")
# B's (b_scale_load; the kernel's SB_LOAD, in this order): two cp.asyncs of the producer's leader;
# by TMA (a box of 4 K blocks of the tile's two scale rows, whose rows of K / 128 floats must be
# whole 16-byte units: K % 512 == 0); or read by the math warpgroups from global memory.
# Measured on the H100 in turns, each against "copy" (bench/NOTES.md, thirty-second session):
# - "math" on clustered 256x128 tiles x1.011-1.023 (11 dense shapes), contiguous x1.024, masked
#   x0.98; on the other unclustered tiles 1-8 % slower (192x128 x0.94), but see 64x32 below;
# - "tma" on unclustered 256x128 x1.034 (4096x32768x512; masked x1.00), 192x128 x0.96-0.98
#   (contiguous x0.964), 64- and 128-row tiles within the noise (A/A pairs up to 2.6 % apart);
# - "math" on dense 64x32 tiles of calls with at most half as many tiles as SMs, whose CTAs each
#   walk a long K loop alone: fitted on seven shapes (x1.016-1.11 at 18-132 tiles, x0.96 at the
#   128 tiles of 64x4096x7168); six held out at 24-64 tiles: five 1.8-8.8 % faster, one x0.99.
# So the model takes "math" for clustered 256-row tiles (not masked) and for 64x32 tiles of small
# dense grids, "tma" for unclustered 256-row tiles where K allows, and "copy" elsewhere.
B_SCALE_LOADS = ("copy", "tma", "math")
# Time factor of each against "copy" for dense GEMMs, where the model takes it (the tables below
# were measured with copies): "tma" on unclustered 256x128 x1.021-1.036 on ten shapes, "math" on
# clustered 256x128 x1.011-1.023 on eleven (h100-2026-11-28-s32-sb-*.log, -tma256-vs-192.log).
# Only on the tiles b_scale_load_for gives that load (b_scale_gain): elsewhere it was not a gain
# ("tma" x0.98 on 192x128), so a load an attr fixes is not credited there.
# Not for grouped kinds: masked ran "tma" at x1.00, and the picks the factor moved there lost up
# to 6.5 %; contiguous ones split 3 / 1 under random layouts (s32-grouped-flips*.log).
B_SCALE_GAIN = {"copy": 1.0, "tma": 0.97, "math": 0.983}
CONFIG_ATTRS = ("tile_m", "tile_n", "stages", "cluster", "multicast", "raster", "store", "stream_k", "scale_load",
                "b_scale_load")
# What a caller may tell the model about the data beyond the shape (not a schedule choice):
# expected_rows, the rows a masked grouping's groups are expected to hold (their counts are
# data on the device; the shape gives only M, the most a group may hold). DeepGEMM's masked
# GEMM takes the same hint (expected_m) for the same reason.
HINT_ATTRS = ("expected_rows",)


def check_expected_rows(who: str, grouping: str, rows) -> None:
    """A user's expected_rows: a positive integer, on a masked grouping (KdslError otherwise)."""
    if grouping != "masked":
        raise KdslError(f"{who}: expected_rows applies to masked groupings only (rows a group is expected to hold); "
                        f"this kernel's grouping is {grouping}")
    if not isinstance(rows, numbers.Integral) or isinstance(rows, bool) or rows < 1:
        raise KdslError(f"{who}: expected_rows must be a positive integer, got {rows!r}")
# The problem a kernel's tiles are chosen for when no call has said (kdsl compile, prebuilds):
# the shapes `kdsl bench FILE.kd` times. (M, N, K, G).
DEFAULT_SHAPES = {"dense": (4096, 7168, 16384, 1), "contiguous": (32768, 4096, 7168, 4),
                  "masked": (256, 4096, 7168, 4)}


@dataclass(frozen=True)
class Problem:
    M: int          # rows of a (masked: rows per group)
    N: int
    K: int
    G: int
    grouping: str   # dense | contiguous | masked
    out_bytes: int  # 2 (bf16) or 4 (f32)
    accumulate: bool = False
    expected_rows: int | None = None  # masked: rows a group is expected to hold (HINT_ATTRS); None: M

    @property
    def rows(self) -> int:
        """Rows of a group the model costs: M, or a masked grouping's expected rows (at most M)."""
        return min(self.expected_rows, self.M) if self.expected_rows else self.M


def waves_of(bm: int) -> int:
    return 2 if bm == 256 else 1


def math_warpgroups(bm: int) -> int:
    """One per 64 rows, but two for 256 rows (two m64 waves each)."""
    return 2 if bm == 256 else bm // 64


# setmaxnreg split per math warpgroup count: (producer, math) registers a thread, and the
# accumulator + total floats a math thread holds at most (fp8_gemm_config.cuh's Fp8Config
# static_asserts the same numbers; warp_map.py writes the split into the kernel's attrs).
REGISTER_SPLIT = {1: (40, 240), 2: (40, 232), 3: (32, 160)}
ACCUMULATOR_FLOATS = {1: 192, 2: 192, 3: 128}


def threads(bm: int) -> int:
    return 128 * math_warpgroups(bm) + 128


def smem_bytes(bm: int, bn: int, stages: int, out_bytes: int, tma_store: bool, b_scale_tma: bool = False) -> int:
    """fp8_gemm_config.cuh's Fp8Config::kSmemBytes: per stage the A and B tiles, A's scales,
    B's scales (16 bytes copied, or a 128-byte aligned slot for their TMA box), 32 of the
    published unit, two mbarriers; once the staging tile of the TMA store; + 1024 to realign
    to the 128-byte swizzle's 1024-byte period."""
    per_stage = (bm + bn) * 128 + bm * 4 + (128 if b_scale_tma else 16) + 32 + 16
    return 1024 + stages * per_stage + (bm * bn * out_bytes if tma_store else 0)


def store_fits(p: Problem) -> bool:
    """A TMA store needs out's row pitch to be a multiple of 16 bytes."""
    return p.N * p.out_bytes % 16 == 0


def scale_tma_fits(p: Problem) -> bool:
    """A TMA map over a_scale needs its rows (M floats, one per row of a) to be a multiple of 16 bytes."""
    return p.M % 4 == 0


def b_scale_tma_fits(p: Problem) -> bool:
    """A TMA map over b_scale needs its rows (K / 128 floats, one per K block) to be a multiple of 16 bytes."""
    return p.K % 512 == 0


def b_scale_load_for(p: Problem, bm: int, bn: int, cluster: int, sms: int) -> str:
    """How B's scales reach a tile's math warpgroups unless an attr says (B_SCALE_LOADS)."""
    if bm == 256 and cluster == 2 and p.grouping != "masked":
        return "math"
    if p.grouping == "dense" and bm == 64 and bn <= 32 and tiles_of(p, bm, bn)[2] <= sms // 2:
        return "math"
    return "tma" if bm == 256 and cluster == 1 and b_scale_tma_fits(p) else "copy"


def b_scale_gain(p: Problem, bm: int, bn: int, multicast: str, sms: int, b_scale_load: str) -> float:
    """B_SCALE_GAIN's factor where it was measured: a dense GEMM, on a tile b_scale_load_for
    gives this load; 1.0 elsewhere."""
    cluster = 1 if multicast == "none" else 2
    if p.grouping != "dense" or b_scale_load != b_scale_load_for(p, bm, bn, cluster, sms):
        return 1.0
    return B_SCALE_GAIN[b_scale_load]


def tile_counter(grouping: str, bm: int, cluster: int) -> bool:
    """Whether a launch's CTAs take their tiles from a shared counter (fp8_gemm_sched.cuh) rather
    than by a fixed stride: grouped contiguous 192-row tiles without a cluster. A group boundary
    falls inside such a tile at 2/3 of 128-row steps and costs its CTA a second pass; by the
    stride those passes pile up on a few CTAs (at 8192x4096x7168 one boundary a row of tiles
    took +12 %, thirty-first session). Measured in turns against the stride (H200, 2026-11-28,
    bench/NOTES.md, thirty-fifth session): 192-row tiles +5 to +13 % where groups of 896-3584 rows
    leave boundaries inside tiles, -1.1 to +1.4 % at the suite's shape; 128-row tiles (no
    boundary inside at 128-aligned groups: nothing to even out) lost 1-3 %, and 256-row tiles
    lost 9-15 % on two random layouts of four, so they keep the stride."""
    return grouping == "contiguous" and bm == 192 and cluster == 1


def tiles_of(p: Problem, bm: int, bn: int) -> tuple[float, int, float]:
    """(M tiles per group, N tiles, tiles in all); a masked grouping told its expected rows
    (expected_rows) at the mean of its groups' tiles over their spread (masked_spread)."""
    num_n = -(-p.N // bn)
    num_m = masked_spread(p, bm)[0] if p.grouping == "masked" and p.expected_rows else -(-p.rows // bm)
    return num_m, num_n, num_m * num_n * (p.G if p.grouping == "masked" else 1)


# How far a masked group's count may stray from expected_rows: the model takes counts spread
# evenly over [1 - s, 1 + s] times it, as DeepGEMM's tests draw them (s = 0.3). Rounding the
# expectation instead put 1024 rows in four 256-row tiles (one wave on 132 SMs) where a count of
# 1093 made five (two waves), and 128-row tiles ran 31 % faster (H200, bench/NOTES.md,
# thirty-sixth session); a spread within one tile costs nothing (192 rows fill one 256-row tile
# at every count in [134, 249]).
EXPECTED_SPREAD = 0.3


@functools.lru_cache(maxsize=1024)  # (each candidate asks twice: its tiles and its waves)
def masked_spread(p: Problem, bm: int) -> tuple[float, float]:
    """(mean, variance) of a masked group's M tiles, its count spread as EXPECTED_SPREAD says
    (at least one row, at most M; 64 counts evenly over the range)."""
    lo = max(1, math.floor(p.rows * (1 - EXPECTED_SPREAD)))
    hi = max(lo, min(p.M, math.ceil(p.rows * (1 + EXPECTED_SPREAD))))
    counts = [lo + (hi - lo) * i / 63 for i in range(64)]
    tiles = [math.ceil(c / bm) for c in counts]
    mean = sum(tiles) / len(tiles)
    return mean, sum((t - mean) ** 2 for t in tiles) / len(tiles)


# Time factor of a masked grouping's tile against the tables (measured on dense GEMMs): 128x192
# ran 4-16 % behind 128x128 at groups of 300-1500 rows where the tables made them even. Fitted on
# 30 DeepGEMM-layout cases (H200, expected_rows given; picks at 0.985 of the fastest tile timed,
# geometric mean, without it and 0.996 with it) and checked on 10 held out (0.972 -> 0.994; the
# worst 0.923 -> 0.973) (bench/NOTES.md, thirty-sixth session). Dense 128x192 tiles too ran 4-8 %
# further behind 128x128 on that H200 than the tables say, so this may be the GPU's, not the
# grouping's; at 2 % it moves only picks that the tables put within 2 % of each other.
MASKED_TILE_FACTOR = {(128, 192): 1.02}


# Standard-normal points and weights (Gauss-Hermite, 5 points; the weights sum to 1): the
# expected wave count of a masked call whose tile total is uncertain.
_R10 = math.sqrt(10)
_NORMAL_POINTS = ((0.0, 8 / 15),
                  *((s * math.sqrt(5 - _R10), (7 + 2 * _R10) / 60) for s in (-1, 1)),
                  *((s * math.sqrt(5 + _R10), (7 - 2 * _R10) / 60) for s in (-1, 1)))


def wave_count(p: Problem, bm: int, bn: int, sms: int, blocks: float) -> float:
    """Waves of tiles the persistent CTAs make: ceil(blocks / sms); for a masked grouping told
    its expected rows, the expectation of that over the tile total's spread (groups' counts
    independent), so that a wave boundary near the mean costs what it costs on average."""
    if p.grouping != "masked" or not p.expected_rows:
        return -(-blocks // sms)
    num_n = -(-p.N // bn)
    sd = math.sqrt(p.G * masked_spread(p, bm)[1]) * num_n
    return sum(w * max(1, math.ceil((blocks + z * sd) / sms - 1e-9)) for z, w in _NORMAL_POINTS)


def raster_for(bm: int, bn: int, multicast: str, sms: int) -> int:
    """Tiles per rasterisation group: the smaller footprint of one wave's A and B tiles."""
    def footprint(c):
        return c * bn + -(-sms // c) * bm if multicast == "a" else c * bm + -(-sms // c) * bn
    return min((8, 16), key=footprint)


def passes_of(p: Problem, bm: int, bn: int) -> float:
    """Tile passes of a call: one per tile, and for the contiguous grouping one more per group
    boundary inside a tile (the tile is computed once for each group among its rows). Groups
    are taken as 128-row aligned (as DeepGEMM lays them out), each boundary inside a tile
    taller than that with probability 1 - 128 / lcm(128, bm) (the share of 128-row steps that
    are not tile edges: 1/2 for 256 rows, 2/3 for 192); so 256-row tiles pay only where groups
    are few and long."""
    num_m, num_n, blocks = tiles_of(p, bm, bn)
    if p.grouping != "contiguous" or bm <= 128:
        return blocks
    return blocks + min(p.G - 1, num_m) * (1 - 128 / math.lcm(128, bm)) * num_n


# Stream-K (dense, no cluster; fp8_gemm_sched.cuh): the last full wave and the partial one
# are shared out in equal K ranges, so the tiles take (blocks - sk) / sms whole waves and
# sk / sms waves of pieces. A piece costs more than its share of a tile: a pipeline refilled
# and partial totals written and read back (weighs more as K shrinks), and the CTAs no longer
# walk K in step, so concurrent tiles stop sharing their A and B blocks in L2 (weighs most
# when A and B outgrow L2). Fitted to H100 measurements (2026-11-25, tools/dev/fp8_forms.py,
# stream-K on and off in turns): pieces ran 1.2x their share at 4096x4096x7168 and
# 4096x2112x7168, 1.6x at 4096x24576x1536, 2.9x at 4096x32768x512, 1.9x at 4096x7168x16384
# (176 MB of operands). Only 4096x2112x7168 gained: 256x128 in 2.06 waves ran at 0.960 of
# _scaled_mm against 256x64's four full waves at 0.933 (the final kernels); the others lost
# 3-17 % and keep whole waves. The model no longer takes stream-K unasked (attr stream_k = true
# still does, costed as here): on 18 shapes where it chose it (2026-11-28, s29-stream-k-check.log,
# M 1536-8192, in turns), the same model without stream-K picked a configuration that ran as fast
# or faster on every one, by a median 4 % and up to 17 % (1792x2560x7168: 62.2 us against 73.0).
SK_PIECE_COST = 1.2
SK_SMALL_K_COST = 0.6 * 1024  # / K
SK_L2_MISS_COST = 0.7
L2_BYTES = 50 * 2**20  # H100


def sk_piece_cost(p: Problem) -> float:
    cost = SK_PIECE_COST + SK_SMALL_K_COST / p.K
    if (p.M + p.N) * p.K > L2_BYTES:
        cost += SK_L2_MISS_COST
    return cost


def stream_k_fits(p: Problem, bm: int, bn: int, cluster: int, sms: int) -> bool:
    """Stream-K applies to dense problems without a cluster that have more tiles than SMs and
    a last wave that is not full."""
    blocks = tiles_of(p, bm, bn)[2]
    return p.grouping == "dense" and cluster == 1 and blocks > sms and blocks % sms != 0


def sk_tiles(blocks: int, ctas: int) -> int:
    """Tiles stream-K shares out: the last full wave and the partial one (so at least `ctas`
    of them: every CTA's range then holds at least one K block), or every tile when there are
    fewer than two waves; 0 when the waves are full."""
    if blocks <= ctas or blocks % ctas == 0:
        return 0
    return blocks - (blocks // ctas - 1) * ctas


def cycles(p: Problem, bm: int, bn: int, multicast: str, sms: int, stream_k: bool = False,
           b_scale_load: str = "copy") -> float:
    blocks = passes_of(p, bm, bn)
    if stream_k:
        sk = sk_tiles(blocks, sms)
        n_waves = (blocks - sk) / sms + sk / sms * sk_piece_cost(p)
    else:
        # (A contiguous grouping's extra passes do not fill the last wave's idle SMs: each runs
        # on the CTA that owns its tile, so one boundary inside a row of tiles adds a pass to
        # num_n CTAs, some of them the busiest: at 8192x4096x7168, two groups ran 12 % longer
        # than one with 192x128 tiles, 2.3 % more passes and the same wave count. H100,
        # 2026-11-27, h100-2026-11-27-s23-contiguous-boundaries-forms.log.)
        n_waves = wave_count(p, bm, bn, sms, blocks)
    l2_bw = min(64.0 * sms, 8e6 / 1.3e3)  # bytes per cycle
    l1_bw = 128.0 * sms
    k = p.K
    l2_ab = k * (bm / (2 if multicast == "a" else 1) + bn / (2 if multicast == "b" else 1))
    l1_ab = k * (bm + bn)
    # what the wgmmas read from shared memory: each m64 wave reads its 64 rows of A and all of
    # B's tile (bm / 64 waves a tile), plus the epilogue's staging tile
    l1_tc = k * (bm + max(1, bm // 64) * bn) + bm * bn * p.out_bytes
    cd = bm * bn * p.out_bytes * (2 if p.accumulate else 1)
    l2 = (l2_ab + cd) * blocks / l2_bw
    l1 = (l1_ab + l1_tc + cd) * blocks / l1_bw
    efficiency = blocks / (n_waves * sms)
    # The main loop: every wave takes as long as one tile. Without this term the model ranked
    # 256x96 (2.67 waves) ahead of 256x64 (4 full waves) for 4096x2112x7168, which measured 9 %
    # slower on the H100 (2026-11-24).
    tc = n_waves * tile_cycles(bm, bn, k)
    if multicast != "none" and n_waves <= 1:
        return math.inf  # one wave: pairing CTAs only constrains the schedule
    cluster_gain = CLUSTER_GAIN.get((p.grouping, bm, bn, multicast), 1.0)
    scale_gain = b_scale_gain(p, bm, bn, multicast, sms, b_scale_load)
    masked = MASKED_TILE_FACTOR.get((bm, bn), 1.0) if p.grouping == "masked" else 1.0
    return max(max(l1, l2) / efficiency, tc) * cluster_gain * scale_gain * masked


# What a tile costs the main loop, in SM cycles, measured with tools/dev/fp8_trace.py with every
# CTA busy (4096x7168x7168 on an H100, 2026-11-28, bench/results/h100-2026-11-28-s29-trace-
# periods.log; six tiles again at 8192x4096x4096 came within 1-5 %): per K block, the median
# period from one block's promotion to the next; per tile, what its epilogue and its first
# block add (the tail after its last block, and its first block's excess over the period), while
# the tensor cores wait. What the tables hold that a work-proportional time did not:
# - below ~128 columns the period hardly shrinks with the width (a fixed cost a block: the
#   waits, the scale reads, the wgmma round trip), so narrow tiles cost more per column;
# - a tile that straddles two 128-column scale blocks of B (48, 80, 96, 112, 144, 160, 192
#   wide) pays 50-150 cycles a block over the line through its neighbours, and its epilogue
#   more (two scale blocks);
# - 128x160 and 128x192 cost less per column than the straddle and full-register factors of
#   the model before put them (the picks they replaced ran 4-9 % slower at 640x4096x11008,
#   640x13824x5120, 1200x4096x4096 and 2560x5120x13824).
BLOCK_PERIOD = {
    64: {16: 469, 32: 411, 48: 519, 64: 501, 80: 572, 96: 575, 112: 619, 128: 589, 144: 720, 160: 794, 192: 868},
    128: {16: 490, 32: 524, 48: 637, 64: 607, 80: 709, 96: 740, 112: 825, 128: 778, 144: 966, 160: 1021,
          192: 1133},
    192: {16: 639, 32: 668, 48: 795, 64: 770, 80: 932, 96: 996, 112: 1119, 128: 1096},
    256: {16: 711, 32: 760, 48: 1035, 64: 966, 80: 1278, 96: 1377, 112: 1499, 128: 1456},
}
TILE_OVERHEAD = {
    64: {16: 652, 32: 712, 48: 1007, 64: 708, 80: 1092, 96: 1026, 112: 1294, 128: 953, 144: 1397, 160: 1370,
         192: 1308},
    128: {16: 710, 32: 790, 48: 1073, 64: 972, 80: 1265, 96: 1190, 112: 1385, 128: 1161, 144: 1546, 160: 1368,
          192: 1420},
    192: {16: 833, 32: 862, 48: 1139, 64: 1126, 80: 1504, 96: 1282, 112: 1766, 128: 1258},
    256: {16: 682, 32: 794, 48: 846, 64: 1049, 80: 1148, 96: 1093, 112: 1199, 128: 1197},
}
# What the trace does not see between row counts, from timed calls: the main-loop rates fitted
# to in-turns timings (tools/dev/fp8_forms.py, 2026-11-24 to 27: 128-column tiles at 0.66 of the
# tensor peak for 256 rows, 0.71 for 192, 0.65 for 128 and 0.45 for 64) against the periods
# above. Without it, 256x128 with A multicast took 192x128's place at M >= 4096 and lost 2-7 %
# there; with it, over the 93 dense and grouped shapes of tools/dev/tile_model_eval.py's logs
# (s27-s29), the pick ran at 0.994 of the fastest tile timed (geometric mean; 0.987 before the
# tables).
ROW_FACTOR = {256: 1.065, 192: 0.987, 128: 1.013, 64: 0.966}


def tile_cycles(bm: int, bn: int, k: int) -> float:
    """Cycles one CTA spends on a bm x bn tile over K (every legal tile is in the tables)."""
    return (k / 128 * BLOCK_PERIOD[bm][bn] * ROW_FACTOR[bm]) + TILE_OVERHEAD[bm][bn]


def model_clusters(p: Problem, bm: int, bn: int, multicast: str) -> bool:
    """Whether the model may choose this 2-CTA cluster without an attr asking for it."""
    return (p.grouping, bm, bn, multicast) in CLUSTER_GAIN and p.K >= CLUSTER_MIN_K


def candidates(p: Problem, sms: int, smem_limit: int, fixed: dict):
    """Every legal configuration agreeing with `fixed`, as attribute dicts, with the reason
    the last one was turned down (for the error when none is left)."""
    tma = fixed.get("store", "tma" if store_fits(p) else "rows") == "tma"
    scale_load = fixed.get("scale_load", "tma" if scale_tma_fits(p) else "copy")
    # Masked groups are not given 192-row tiles: at 4 x <= 256 rows, N 4096, K 7168 (H100,
    # 2026-11-27, tools/dev/fp8_forms.py) 192x128 ran 0.70x of 128x128. 256x128 (one wave of
    # 128 tiles) ran 1.03-1.05x of 128x128 at 135-256 rows a group and 0.90x at 128 (each
    # warpgroup owns rows in both halves, so none skips) (tools/dev/fp8_masked_probe.py, the
    # same day); the model weighs it by its M, the most rows a group may hold.
    ms = (fixed["tile_m"],) if "tile_m" in fixed else BLOCK_M if p.grouping != "masked" else (64, 128, 256)
    out, why = [], []
    asked_cluster = "cluster" in fixed or fixed.get("multicast", "none") != "none"  # (a multicast needs a pair)
    for cluster in (1, 2):
        for multicast in (("none",) if cluster == 1 else ("a", "b")):
            for bm in ms:
                for bn in BLOCK_N:
                    if cluster == 2 and not asked_cluster and not model_clusters(p, bm, bn, multicast):
                        continue  # a cluster the model does not choose unasked
                    num_m, num_n, blocks = tiles_of(p, bm, bn)
                    b_scale_load = fixed.get("b_scale_load") or b_scale_load_for(p, bm, bn, cluster, sms)
                    sb_tma = b_scale_load == "tma"
                    base = smem_bytes(bm, bn, 0, p.out_bytes, tma, sb_tma)
                    per_stage = smem_bytes(bm, bn, 1, p.out_bytes, tma, sb_tma) - base
                    stages = fixed.get("stages") or min(MAX_STAGES, (smem_limit - base) // per_stage)
                    for stream_k in (False, True) if "stream_k" in fixed else (False,):  # (SK_PIECE_COST)
                        cfg = {"tile_m": bm, "tile_n": bn, "stages": stages, "cluster": cluster,
                               "multicast": multicast, "raster": fixed.get("raster") or raster_for(bm, bn, multicast, sms),
                               "store": "tma" if tma else "rows", "stream_k": stream_k, "scale_load": scale_load,
                               "b_scale_load": b_scale_load}
                        if any(cfg[a] != v for a, v in fixed.items()):
                            continue
                        reason = _illegal(p, cfg, num_m, num_n, sms, smem_limit, explicit="stages" in fixed)
                        if reason:
                            if not stream_k or fixed.get("stream_k"):  # (the reason for a tile, not for stream-K)
                                why.append(reason)
                            continue
                        out.append(cfg)
    # the reason to report: the last one that names an attr the kernel fixed, else the last
    about_fixed = [w for w in why if any(a in w for a in fixed)]
    return out, (about_fixed or why or [""])[-1]


def _illegal(p: Problem, c: dict, num_m: int, num_n: int, sms: int, smem_limit: int, explicit: bool) -> str:
    bm, bn, st = c["tile_m"], c["tile_n"], c["stages"]
    if c["store"] == "tma" and not store_fits(p):
        return f"store = \"tma\" needs out's rows to be a multiple of 16 bytes (N = {p.N})"
    if c["scale_load"] == "tma" and not scale_tma_fits(p):
        return f"scale_load = \"tma\" needs M to be a multiple of 4 (a_scale's rows of M floats in 16-byte units; M = {p.M})"
    if c["b_scale_load"] == "tma" and not b_scale_tma_fits(p):
        return (f"b_scale_load = \"tma\" needs K to be a multiple of 512 (b_scale's rows of K / 128 floats in "
                f"16-byte units; K = {p.K})")
    if c["cluster"] == 2 and sms % 2:
        return f"a cluster of 2 needs an even SM count, not {sms}"
    if bn // 2 * (waves_of(bm) + 1) > ACCUMULATOR_FLOATS[math_warpgroups(bm)]:
        return f"tile {bm}x{bn} needs more accumulator registers than the math warpgroups have"
    if smem_bytes(bm, bn, st, p.out_bytes, c["store"] == "tma", c["b_scale_load"] == "tma") > smem_limit:
        return f"tile {bm}x{bn} with {st} stages needs more than {smem_limit} bytes of shared memory"
    if explicit and st < 2:
        return f"stages = {st} is too few: the ring needs 2 or more, one loading while the math reads another"
    if st < 2 or (not explicit and (st < 3 or (bm * bn < 128 * 192 and st < 4))):
        return f"tile {bm}x{bn} leaves room for {st} stage{'s' if st != 1 else ''} only"
    if c["stream_k"] and not stream_k_fits(p, bm, bn, c["cluster"], sms):
        return ("stream_k needs a dense GEMM without a cluster whose tiles make more than one wave, the last "
                f"not full (here {tiles_of(p, bm, bn)[2]} tiles on {sms} SMs)")
    if c["raster"] < 1 or (c["cluster"] == 2 and c["raster"] % 2):
        return f"raster = {c['raster']} must be a positive (with a cluster, even) number of tiles"
    if c["cluster"] == 2:
        if c["multicast"] == "b" and p.grouping != "dense":
            return "grouped GEMMs pair CTAs on one M tile (multicast = \"a\")"
        pairs, count = ("N", num_n) if c["multicast"] == "a" else ("M", num_m)
        if count % 2:
            return f"multicast = \"{c['multicast']}\" pairs adjacent {pairs} tiles and needs an even number of them " \
                   f"(here {count})"
    return ""


def choose(p: Problem, sms: int, smem_limit: int, fixed: dict | None = None) -> dict:
    """The configuration with the fewest modelled cycles (ties: the first, smaller tiles)."""
    fixed = {a: v for a, v in (fixed or {}).items() if a in CONFIG_ATTRS}
    _validate_fixed(fixed)
    found, why = candidates(p, sms, smem_limit, fixed)
    if not found:
        given = ", ".join(f"{a} = {v!r}" for a, v in fixed.items())
        raise KdslError(f"no FP8 GEMM tiling agrees with {given or 'the kernel'} for M={p.M} N={p.N} K={p.K} "
                        f"G={p.G}: {why}")
    return min(found, key=lambda c: cycles(p, c["tile_m"], c["tile_n"], c["multicast"], sms, c["stream_k"],
                                           c["b_scale_load"]))


def _validate_fixed(fixed: dict) -> None:
    allowed = {"tile_m": BLOCK_M, "tile_n": BLOCK_N, "cluster": (1, 2), "multicast": MULTICAST, "store": STORES,
               "stream_k": (False, True), "scale_load": SCALE_LOADS, "b_scale_load": B_SCALE_LOADS}
    for a, v in fixed.items():
        if a in allowed and v not in allowed[a]:
            raise KdslError(f"FP8 GEMM attr {a} = {v!r} is not supported; choose one of "
                            f"{', '.join(repr(x) for x in allowed[a])}")
        if a in ("stages", "raster") and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
            raise KdslError(f"FP8 GEMM attr {a} must be a positive integer, got {v!r}")
    cluster, multicast = fixed.get("cluster"), fixed.get("multicast")
    if cluster == 1 and multicast in ("a", "b"):
        raise KdslError(f"FP8 GEMM attr multicast = {multicast!r} shares an operand between the two CTAs of a "
                        "cluster and needs cluster = 2, not 1")
    if cluster == 2 and multicast == "none":
        raise KdslError("FP8 GEMM attr cluster = 2 pairs CTAs to multicast an operand; multicast = 'none' leaves "
                        "them nothing to share (choose multicast = 'a' or 'b', or cluster = 1)")
