"""Tiling: choose the kernel family and tile shapes per target and head dim (attention) or
per problem shape and SM count (FP8 GEMM, gemm_tiles.py), and the shared memory they need.

On sm_90a attention runs on the Hopper kernel (attention_wgmma.cuh: TMA, wgmma, warp
specialisation); elsewhere on the mma.sync kernel (attention_mma.cuh). The numbers come from
measurements on an H100 (tools/dev/*_notes.md, bench/NOTES.md); the shared-memory formulas
mirror the headers' constexpr functions, and the generated code static_asserts that both
agree, so an edit to either side cannot drift silently.

A kernel may already carry schedule attributes (SCHEDULE_ATTRS: an IR file written by
`kdsl tune`, or by hand): those are kept when legal for the target and head dim, and refused
with a message naming the attribute otherwise; the tables below fill in the rest, and
everything derived (tile_m of the Hopper kernel, shared memory) is recomputed. The legal
ranges mirror the headers' static_asserts, so a refused value is one NVRTC would refuse too.

An FP8 GEMM is tiled for the problem in its `shape` attr ([M, N, K, G]; the runtime sets it
per call signature, `kdsl compile --shape` on the command line; else gemm_tiles'
DEFAULT_SHAPES) on `sms` multiprocessors (the device's count at call time; else the
target's). Tile attrs already on the kernel are kept (an override).
"""
from __future__ import annotations

from .. import ir
from ..errors import KdslError
from . import (affine_score, exp2_fold, gemm_tiles, invariant_factors, key_mask, key_table, mask_analysis, offset_score,
               streaming)
from .target import Target

# Head dims: the Hopper kernel takes any multiple of 16 up to 256 for q/k (head_dim) and for
# v/out (value_dim) independently; the mma.sync kernel 64 or 128, the same for both.
HEAD_DIM_STEP, MAX_HEAD_DIM = 16, 256
# The backward kernels' query rows a step (all), and the keys a CTA of the mma.sync and wide ones
# (attention_bwd.cuh BwdCfg, attention_bwd_wgmma_wide.cuh BwdWideCfg; attention_bwd_wgmma.cuh owns
# 128 keys: codegen/emit_backward.py backward_plan)
BACKWARD_TILE = 64
# head dim -> (BM, BN, warps) for the mma.sync attention kernel
ATTENTION_TILES = {64: (128, 64, 4), 128: (128, 64, 4)}
# head dim -> (BN, consumer warpgroups, stages) for the wgmma attention kernel, measured on an
# H100 (bench/NOTES.md); BM = 64 * consumers. Other head dims: wgmma_tile_choices().
WGMMA_ATTENTION_TILES = {64: (128, 2, 3), 128: (128, 2, 3)}
# head dim -> the wider kv tile kernels with neither a mask nor a transcendental score take
# (H100, 2026-11-24, tools/dev/schedule_sweep.sh: plain D=128 +3-6 % at S=8k, +9-15 % at 2k;
# softcap's tanh made it 5 % slower, so such scores keep the table's tile. 2026-11-25,
# attrs_sweep.py: D=96 plain +8.3 % at 8k, +0.7 % at 2k, relpos +6.8 %; 192 keys +2-4 %).
WGMMA_WIDE_TILES = {96: (176, 2, 2), 128: (176, 2, 2)}
# Registers a consumer thread may give to the S, P and O accumulators and the Q K^T
# descriptors, as wgmma_tile_choices counts them: a rough model fitted to ptxas (sm_90a,
# relpos/plain/causal/softcap at head dims 16 to 256: none spills at or below it), with two
# consumer warpgroups (232 registers each after setmaxnreg); three get 160 each. Three have no
# spill fallback: where ptxas spills them (8-32 bytes at D=64, masks with sinks or data-dependent
# windows, a per-row slope), two ran x0.92-1.06 against them over nine programs (H200, 2026-12-01)
# and x1.08 / x1.23 over two more (32 B in the loop; 16 B in the producer of a data-bounded window
# of 257 keys: 2026-12-02, bench/NOTES.md): no rule of spilled bytes picks the faster yet.
ACCUMULATOR_REGS = 208
THREE_WARPGROUP_REGS = ACCUMULATOR_REGS - (232 - 160)
# A row tile that visits this many kv tiles or fewer (mask_analysis.visited_tiles: a window of
# up to ~1000 keys) keeps 128 rows: three warpgroups' 192 rows span one more kv tile of the band
# and a work item's fixed cost is spread over fewer tiles. H200, D=64, two warpgroups against
# three on windows of W keys (visited tiles): 256 (3) x1.19, 512 (5) x1.06-1.10, 640 (6) x1.05,
# 768 (7) x1.03, 896 (8) x1.02, 1024 (9) x0.98-1.01, 2048 (17) x0.95; a two-sided window of 511
# keys (5) x1.06-1.08; D=32 gains more (512: x1.11, 1024: x1.05). bench/NOTES.md, 38th session.
NARROW_BAND_TILES = 8
# Loads at these index variables cost per element; a load at the query row alone (qs[b, i],
# lim[b, i]) is hoisted out of the key loop (SASS) and costs per row, so it does not keep a
# kernel off three warpgroups (tile_shape_hints' tall). H200, B=2 H=16 4096² D=64, three
# warpgroups against two: six of seven such programs x1.05-1.13 (a row gate, a row temperature
# under padding, row limits, row scales, a row flag, a row shift); one beside a positional select
# x0.967 (bench/NOTES.md, sixty-second session).
KEY_DEPENDENT = tuple(v for v in streaming.PER_ELEMENT if v not in invariant_factors.ROW_VARS)
# A tile the model counts up to this many registers over ACCUMULATOR_REGS is a trial: it is
# built first and kept only where ptxas does not spill; where it does, compiler.build builds the
# next tile (attr spill_fallback). At head dim 256, 80 keys (220) ran plain x1.10 and causal
# x1.07 against 64 (H100, 2026-11-24) and built without spills for most kernels, but relpos,
# document masks and per-element bias loads spilled there.
SPILL_TRIAL_REGS = 12
# Registers one wgmma needs beside its N/2 accumulators a thread, as ptxas asked for them (C7602)
# in a CTA of four warpgroups, whose threads it compiles for 128 registers: an m64n256 of Q K^T
# (its operands in shared memory) 154; an m64nDV of P V (P in registers) 134-158 at DV = 208-256
# (tools/dev/config_fuzz.py, 2026-11-28). 192 keys and DV = 192 build there (with spills).
WGMMA_QK_OPERAND_REGS = 26
WGMMA_PV_OPERAND_REGS = 30

# Schedule attributes a kernel may carry, per kernel family, and their legal values.
# One consumer warpgroup (decode: a work item of at most 64 query rows) streams K and V and
# does little else: with stages of at least this many bytes of K and V it keeps 2 of them in
# flight. Measured on the H100 (2026-11-25, tools/dev/decode_turns.py, in turns; D=128, 128-key
# stages of 64 KB): 2 stages against 3, B=64 H=16 N=4096 x1.024 and x1.025 in two runs, x1.002
# in a third; B=32 H=8 N=8192 x1.004; B=1 N=32768 x1.005 and x1.000; B=1 N=4096 and GQA even.
# Never slower; bench/results/h100-2026-11-25-s14-decode-stages*.log.
ONE_WARPGROUP_STAGE_BYTES = 64 * 1024
SCHEDULE_ATTRS = {"wgmma": ("tile_n", "consumers", "stages", "schedule", "poly_exp2", "lazy_rescale", "slope_step",
                            "tensor_row_sum", "offset_table", "key_table", "key_mask"),
                  "mma": ("tile_m", "tile_n", "warps"),
                  "gemm": gemm_tiles.CONFIG_ATTRS}
# m64nNk16 widths wgmma_ops.cuh has (tools/gen_wgmma.py generates it from this tuple).
WGMMA_WIDTHS = (64, 80, 96, 112, 128, 176, 192, 256)
MMA_WIDTHS = (32, 64, 128)            # attention_mma.cuh: "BN must be 32, 64 or 128"
# persistent (the default): one CTA per SM, each taking the next work item from a shared
# counter when its loads for the current one are issued (the next item's Q and first tiles load
# under the end of the current one); grid: one CTA per item, dispatched by the hardware.
# Measured on an H100 (bench/NOTES.md, 2026-11-24), persistent vs grid: causal D=128 +8 % at
# S=2k and +3-7 % at 8k; windows, documents, neighbourhoods, prefix-LM and padded masks
# +4-13 %; plain and causal D=64 +1-2 %.
SCHEDULES = ("persistent", "grid")
# poly_exp2 = n: the softmax computes the exponentials of every n-th column group with a
# polynomial on the FMA pipe (common.cuh exp2_poly) and the rest on the MUFU; 0 (the default):
# all on the MUFU. Meant for scores that keep the MUFU busy themselves (tanh, sin, ...); on an
# H100 it did not pay (bench/NOTES.md, 2026-11-24: soft-capping D=128 0.92x with n = 4,
# 0.97x with n = 8), so it stays an option for `kdsl tune` and hand schedules.
POLY_EXP2 = (0, 2, 3, 4, 8)
# lazy_rescale = n: the softmax keeps its reference while a row's max exceeds it by at most n
# (log2 units), so P stays below 2^n and O skips its rescale on most tiles; 0: the reference
# follows the max every tile. Measured on an H100 (bench/NOTES.md, 2026-11-24, n = 8 vs 0):
# relpos D=64 +4.5 %, causal D=64 +2.6 %, plain D=64 +0.4 % (three consumer warpgroups, whose
# softmax is issue-bound); plain D=128 -5.5 % (8k) / -1.6 % (2k), causal D=128 within 0.5 %:
# on by default with three consumer warpgroups only.
LAZY_RESCALE = (0, 8)
# slope_step = 1: a score affine in the key position within a tile (passes/affine_score.py:
# relative positions, ALiBi under a causal mask) gets slope * col from one more k16 wgmma of
# Q K^T, whose B operand is a constant slab of column offsets in shared memory
# (attention_wgmma_parts.cuh slope_fragment), instead of an FFMA per element in the softmax.
# bf16 inputs only: the slope travels as three bf16 terms (f16's range would not hold it).
# The default where it applies and its operands fit shared memory. Measured on an H100
# (2026-11-25, attrs_sweep.py, in turns, against slope_step = 0): ALiBi D=64 x1.049 (8k) and
# x1.043 (2k), relpos D=128 x1.016 / x1.012, relpos D=64 at two warpgroups x1.12.
SLOPE_STEP = (0, 1)
# tensor_row_sum = 1: P's row sums come from P V, which reads 8 columns of ones beside V's 64
# (a block of ones after the V ring), instead of an FADD per element in the softmax; value
# head dim 64 only (the ones follow V's single 64-column block). The default with three
# consumer warpgroups, whose softmax bounds the kernel. Measured on an H100 (2026-11-25,
# attrs_sweep.py, in turns, D=64): relpos x1.082 (8k) / x1.048 (2k), ALiBi x1.036, sliding
# window x1.014, plain x1.003, causal x0.994 / x1.007, prefix-LM x0.991.
TENSOR_ROW_SUM = (0, 1)
# What that costs lse (natural log units): the row sum adds P as rounded for P V, each weight
# within a relative 2^-8 (bf16's 8 significant bits; f16's 11: 2^-11), so the sum is within
# that too and lse = ref + log(sum) within log(1 + 2^-8). out is normalised by the weights it
# averaged, so it loses nothing. Kernels that declare lse keep the fp32 sums unless asked.
ROW_SUM_LSE_ERROR = {"bf16": 2.0 ** -8, "f16": 2.0 ** -11}
# offset_table = 1: a score that sees the positions only through q - kv and is not affine in
# them (passes/offset_score.py: T5's buckets, clamped relative tables, periodic biases) is
# evaluated once per offset of a tile into a table in shared memory (64 + BN - 1 a consumer
# warpgroup, two of them in turn), and read once an element. The default where the offset
# part is costly (offset_score.costly: a gather, a transcendental, a division). Measured on an
# H200 (2026-11-27, attrs_sweep.py, in turns, against the per-element score): t5_bias x2.43
# (D=128, 4k) / x2.62 (D=64, 8k), learned_relpos x1.49 / x1.55, periodic_bias x2.07 / x2.78.
# Not a trial: the x2.78 was periodic_bias at D=64 with three warpgroups, whose build with
# the table spills 16 bytes (dropping the table there would have cost 2.78x).
OFFSET_TABLE = (0, 1)
# key_table = 1: a score with a part read per key and nothing cheaper (passes/key_table.py:
# s + kbias[b, j], s + qb[b, h, i] * kb[b, h, j]) evaluates that part once per key of a tile into
# a table in the offset table's storage (BN floats of its 64 + BN - 1), read once an element.
# The default where it applies and fits, with a stage less if need be (head dim 128). Measured on
# an H200 (2026-12-01, attrs_sweep.py, in turns, B=2 H=16 4096², against the per-element part):
# D=64 rank-one bias x1.106, forgetting gates x1.074, tanh key gate x1.379; D=128 (2 stages
# against 3 without) x1.077, x1.005, x1.400.
KEY_TABLE = (0, 1)
# key_mask = 1: a mask with a part read per key (passes/key_mask.py: is_global[b, j] or a window,
# valid[b, j], j % 4 == 0 and j <= i) takes that part on partial tiles as one bit a key, voted by
# each warp over the tile's keys, instead of a gather or a division an element, and the rest of
# the mask as key intervals where it is. The default where it applies (measured there).
KEY_MASK = (0, 1)
# On every tile up to 128 keys by default: the 112- and 80-key tiles of head dims 192 and 256 ran
# x1.14-1.41 and x1.24-1.25 against the mask an element (H200, sixty-fourth session). No trial:
# a flag beside a row's data or the diagonal at 112 keys, where ptxas spilled 16 bytes with the
# bits, still ran x1.28 against the mask an element.
KEY_MASK_KEYS = 128  # the widest kv tile it takes (attention_wgmma_parts.cuh spread_key_bits)


def offset_table_bytes(bn: int, consumers: int) -> int:
    """Two tables a consumer warpgroup of 64 + BN - 1 floats, each rounded to 16 bytes."""
    return consumers * 2 * (-(-(64 + bn - 1) // 4) * 16)


def slope_form(consumers: int) -> int:
    """How the slope step holds the slope (attention_wgmma_parts.cuh kSlope*): with three
    consumer warpgroups (160 registers each) in shared memory, written per item, since the
    register fragment made ptxas serialise the wgmmas (relpos D=64, C7512); else in registers."""
    return 2 if consumers == 3 else 1


def slope_step_bytes(bn: int, consumers: int) -> int:
    """The slope step's shared memory: the column offsets as a k16 B operand (MN-major, 16 rows of
    128 bytes per 64 columns; K-major, 128 bytes a column, in shared-memory form) and in
    shared-memory form each consumer warpgroup's 64 slope rows of 128 bytes."""
    return -(-bn // 64) * 2048 if slope_form(consumers) == 1 else bn * 128 + consumers * 64 * 128
# Work counters a Hopper attention program holds for persistent launches: one per stream that
# launches it (runtime/launch.py Loaded.work_counter); streams beyond them walk a fixed stride.
WORK_SLOTS = 64
# Split-KV counts per stream slot (AttnArgs::split_done): one per (work item before the split,
# consumer warpgroup); calls with more merge in the combine kernel instead.
SPLIT_SLOT = 256
MAX_STAGES = 8                        # beyond this only shared memory would grow
MATH_MODES = ("fast", "exact")        # attr math: the hardware approximations or libm (codegen)


def attention_smem_bytes(d: int, bm: int, bn: int, warps: int, elem_bytes: int = 2) -> int:
    """Q tile + double-buffered K and V tiles."""
    return (bm * d + 2 * 2 * bn * d) * elem_bytes


def head_dim_problem(d: int) -> str:
    """Why a head dim cannot be compiled on any target ('' when it can)."""
    if d % HEAD_DIM_STEP or not HEAD_DIM_STEP <= d <= MAX_HEAD_DIM:
        return f"must be a multiple of {HEAD_DIM_STEP} from {HEAD_DIM_STEP} to {MAX_HEAD_DIM}"
    return ""


def attention_wgmma_smem_bytes(d: int, dv: int, bn: int, consumers: int, stages: int, stream_elem: int = 0,
                               slope_step: int = 0, tensor_row_sum: int = 0, offset_table: int = 0,
                               mask_stream_elem: int = 0) -> int:
    """Q tile + a ring of K and V tiles, each stored as 64-column blocks of 128-byte rows, + the
    slope step's operands (slope_step_bytes) + the row sums' block of ones (a 128-byte row per
    key) + a ring of a streamed capture's tiles (elements of stream_elem bytes;
    passes/streaming.py), and one of the mask's second streamed capture (mask_stream_elem),
    + 2 + 4 * stages mbarriers + a word per stage telling the consumers
    which tile it holds and one telling them which work item it belongs to, + 1024 to realign
    the tiles to the 128-byte swizzle's 1024-byte period."""
    blocks, vblocks = -(-d // 64), -(-dv // 64)
    tiles = (64 * consumers * blocks + stages * bn * (blocks + vblocks)) * 128
    per_element_work = (slope_step_bytes(bn, consumers) if slope_step else 0) + (bn * 128 if tensor_row_sum else 0)
    per_element_work += offset_table_bytes(bn, consumers) if offset_table else 0
    streamed = stages * sum(streaming.tile_bytes(e, 64 * consumers, bn) for e in (stream_elem, mask_stream_elem))
    return 1024 + tiles + per_element_work + streamed + (2 + 4 * stages) * 8 + 2 * stages * 4


def _accumulator_regs(d: int, dv: int, bn: int) -> int:
    """S (BN/2), P (BN/4) and O (DV/2) registers a consumer thread holds, and ~D/8 for the Q K^T
    descriptors: what ACCUMULATOR_REGS bounds."""
    return dv // 2 + bn // 2 + bn // 4 + d // 8


def wgmma_tile_choices(d: int, dv: int, smem_per_block: int, tall: bool = False,
                       wide: bool = False, trial: bool = True) -> list[tuple[int, int, int]]:
    """[(BN, consumers, stages)], the one to build first, then the one to build when ptxas
    spills it (a trial tile, see SPILL_TRIAL_REGS), if any. The measured table where it has
    the head dims, else the widest kv tile whose S, P and O accumulators and descriptors
    (BN/2 + BN/4 + DV/2 floats and ~D/8 registers a thread) fit ACCUMULATOR_REGS and whose
    ring of 3, else 2, stages fits shared memory: 128 keys with 3 stages up to head dim 128,
    (112, 2) at 192, (64, 2) at 256 after a trial of (80, 2).
    tall: the kernel may take three consumer warpgroups (192 query rows; see tile_shape_hints):
    it does where the accumulators fit their 160 registers a thread, head dims up to 64
    (H100, same inputs: plain D=64 +19-22 %, D=32 +12 %, causal D=64 +3-7 %, relpos +4 %;
    D=96 spilled and lost 23 %). wide: WGMMA_WIDE_TILES applies. trial: False keeps to tiles
    within ACCUMULATOR_REGS."""
    if wide and d == dv and d in WGMMA_WIDE_TILES:
        # a trial too: ptxas spilled the wide tile of a generated index-only score (nested
        # int / float conversions, D=128; 2026-11-27), and the narrower tile then built clean
        narrow = wgmma_tile_choices(d, dv, smem_per_block, trial=False)[0]
        return [WGMMA_WIDE_TILES[d]] + ([narrow] if trial else [])
    if d == dv and d in WGMMA_ATTENTION_TILES:
        bn, consumers, stages = WGMMA_ATTENTION_TILES[d]
        if tall and _accumulator_regs(d, dv, bn) <= THREE_WARPGROUP_REGS:
            consumers = 3
        return [(bn, consumers, stages)]
    choices = []
    for bn in (128, 112, 96, 80, 64):
        regs = _accumulator_regs(d, dv, bn)
        if regs > ACCUMULATOR_REGS + (SPILL_TRIAL_REGS if trial and not choices else 0):
            continue
        tall_fits = tall and regs <= THREE_WARPGROUP_REGS
        fitting = [(bn, consumers, stages) for consumers in ((3, 2) if tall_fits else (2,)) for stages in (3, 2)
                   if attention_wgmma_smem_bytes(d, dv, bn, consumers, stages) <= smem_per_block]
        if fitting:
            choices.append(fitting[0])
            if regs <= ACCUMULATOR_REGS:
                return choices
    if choices:
        return choices
    raise KdslError(f"no attention tile fits head dims {d} / {dv} in {smem_per_block} bytes of shared memory")


def packed_kv_tiles(d: int) -> set[int]:
    """kv tile widths whose wgmma sequences wgmma_ops.cuh holds packed for head dim d (the
    table's and the wide one; tools/gen_wgmma.py); other widths issue through the per-step
    wrappers of wgmma_ops_steps.cuh."""
    return {WGMMA_ATTENTION_TILES[d][0], *WGMMA_WIDE_TILES.get(d, ())[:1]}


def tile_shape_hints(k: ir.Kernel) -> dict:
    """What the kernel's program says about the tile shapes that suit it (wgmma_tile_choices):
    tall: neither the score nor the mask loads captured data per element (at an index that
    depends on the key position; per batch or head, as ALiBi's slopes[h] or a sequence length,
    or per query row, as a row temperature qs[b, i], is fine: KEY_DEPENDENT), the score takes
    no offset table (two warpgroups ran x1.04-1.17 faster beside one at D=64, H200), the mask
    has no `//` or `%`, and a masked score has no transcendental function per element (of the
    query row alone is once per row). Partial tiles take a key interval (passes/kv_bounds.py), so
    windows and prefixes gain from the taller q tile as causal does (H100, 2026-11-25, three
    warpgroups against two at D=64: prefix-LM and padded causal +14 %, ALiBi +4.6 % at 8k,
    sliding window +2-3 %, a periodic bias +3.4 %). Per-element loads need the registers
    (document masks spilled 41 instructions there) or, streamed, a tile that grows with the
    q tile (bias[q, kv] would lose a stage), and where a key or offset table replaces the load
    (passes/key_table.py, offset_score.py) three still lost: x0.84-1.01 over 14 programs (H200,
    D=64, 2026-12-01); 192 rows straddle the power-of-two blocks of a
    `//` or `%` mask (chunked causal -9 %, a dilated window -3.3 %; natten2d +12 % was the
    exception); a tanh under a window mask lost 5.5 % (Gemma-2's local layers); and a narrow
    band (NARROW_BAND_TILES) keeps 128 rows.
    wide: no mask and a score of arithmetic on indices only: the wider kv tile amortises
    per-tile costs (the O rescale, the row max, the turns). A tanh or exp per element keeps the
    softmax on the MUFU unit, where it does not pay, and loads of captured data per element
    (or a streamed tile) need the registers it takes (bias[q, kv] spilled at 176 keys). An
    offset part that takes the table by default (offset_score.costly) keeps the table's tile:
    two steps near the diagonal ran x1.257 with the table at 128 keys against 176 keys per
    element (H200, D=128); the table beside 176 keys was not measured.
    trial: a trial tile (SPILL_TRIAL_REGS) may be tried. Not for a mask with `//` or `%`: its
    blocks (an image row, a chunk) are power-of-two wide in practice, and a tile that is not
    cuts them into more partial tiles (natten2d D=256: 80 keys x0.81 against 64)."""
    mask, score = k.func("mask"), k.func("score_log2") or k.func("score")
    blocky = mask is not None and any(isinstance(n, ir.Op) and n.op in ("floordiv", "mod") for n in ir.walk(mask))
    nodes = list(ir.walk(score)) if score is not None else []
    loads = any(isinstance(n, ir.Load) for n in nodes)
    transcendental = any(isinstance(n, ir.Op) and n.op in ir.FLOAT_FUNCS for n in nodes)
    # torch's boolean attn_mask on plain attention: a mask that is a streamed 1-byte element alone
    # (passes/streaming.py; keep[b, i, j], keep[b, h, i, j] != 0) under the scaled dot product
    # (exp2_fold.score_is_scaled_dot) reads shared memory, not global memory per element: three
    # warpgroups took it 4-7 % faster at D=64
    # (H200, bool and u8). A second mask term (j <= i and ...), a score of the positions (ALiBi)
    # or a 16-bit element made them spill 16 bytes. run() keeps them where the ring fits. Beside a
    # whole-block tile summary the producer spills 8 bytes (around the zero output of an item
    # whose tiles are all empty) and three warpgroups still took a random mask 1.148x faster
    # than two at D=64 (H200, 4x16x4096², call4 of bench/NOTES.md's fifty-eighth session).
    mask_stream = k.attr("stream_capture")
    if not (mask_stream and mask is not None and streaming.ELEM_BYTES[k.tensor(mask_stream).dtype] == 1
            and not _reads_beside(mask, mask_stream) and exp2_fold.score_is_scaled_dot(k)):
        mask_stream = None
    per_element = any(ir.loads_at(e, KEY_DEPENDENT, skip=mask_stream if e is mask else None)
                      for e in (score, mask) if e is not None)
    table = _offset_table(k)
    # a transcendental of the query row or head alone (log(i + 1), exp(rate[h])) is once per row:
    # three warpgroups against two, H200 D=64, x1.007-1.060 on six causal programs, row_gate's
    # sigmoid(gate[b, h, i]) x0.995 (bench/NOTES.md, sixty-second session)
    per_element_function = any(isinstance(n, ir.Op) and n.op in ir.FLOAT_FUNCS
                               and not invariant_factors.row_invariant(n) for n in nodes)
    tall = not per_element and not table and not blocky and not (mask is not None and per_element_function)
    if tall and mask is not None:  # the band is counted only where it decides
        visited = mask_analysis.visited_tiles(k)
        tall = visited is None or visited > NARROW_BAND_TILES
    wide = mask is None and not (loads or transcendental) and not table
    return {"tall": tall, "wide": wide, "trial": not blocky}


def _offset_table(k: ir.Kernel) -> bool:
    """Whether k will read its offset part from the table: as attr offset_table says, else by
    default (offset_score.costly), as run() decides."""
    given = k.attr("offset_table")
    return bool(given) if given is not None else offset_score.costly(k)


def _reads_beside(e: ir.Expr, tensor: str) -> bool:
    """Whether e reads a variable or another tensor outside its loads of `tensor`."""
    if isinstance(e, ir.Load):
        return e.tensor != tensor
    return isinstance(e, ir.Var) or any(_reads_beside(a, tensor) for a in getattr(e, "args", ()))


def family(k: ir.Kernel, target: Target) -> str:
    """'wgmma' or 'mma' (attention), 'gemm': which SCHEDULE_ATTRS apply."""
    if k.kind != "attention":
        return "gemm"
    return "wgmma" if target.has_wgmma else "mma"


def run(k: ir.Kernel, target: Target) -> ir.Kernel:
    attrs = dict(k.attrs)  # present with any value, null included (k.attr() reads null as absent)
    if "math" in attrs and attrs["math"] not in MATH_MODES:
        raise KdslError(f"kernel '{k.name}': attr math = {attrs['math']!r} is not one of {', '.join(MATH_MODES)}")
    fam = family(k, target)
    if fam == "gemm" and not target.has_wgmma:
        raise KdslError(f"kernel '{k.name}': the FP8 GEMM needs wgmma (sm_90a); target is {target.arch}")
    if fam == "gemm":  # tiles per problem shape and SM count; given tile attrs are overrides
        return _gemm(k, target)
    d, dv = k.attr("head_dim"), k.attr("value_dim") or k.attr("head_dim")
    for name, x in (("head dimension", d), ("value head dimension", dv)):
        if head_dim_problem(x):
            raise KdslError(f"kernel '{k.name}': {name} {x} is not supported: it {head_dim_problem(x)}")
    if fam == "mma" and (d != dv or d not in ATTENTION_TILES):
        raise KdslError(f"kernel '{k.name}': head dims {d} (q, k) / {dv} (v) are not supported on {target.arch}: its "
                        f"mma.sync kernel takes {' or '.join(map(str, ATTENTION_TILES))}, the same for q, k and v "
                        f"(Hopper, sm_90a, takes any multiple of {HEAD_DIM_STEP} up to {MAX_HEAD_DIM})")
    hints = tile_shape_hints(k) if fam == "wgmma" else {}
    if attrs.get("consumers") not in (None, 2):  # one warpgroup (decode) keeps the measured tile
        hints["wide"] = False
    # Persistent CTAs with a shared work counter balance items of unequal cost as the hardware's
    # dispatch does, and start the next item under the current one (SCHEDULES).
    choices = wgmma_tile_choices(d, dv, target.smem_per_block, **hints) if fam == "wgmma" else []
    if hints.get("tall") and not _stream_fits(k, choices[0], (d, dv), target):
        # a streamed mask made the kernel tall, but its ring does not fit beside three
        # warpgroups' tiles: two warpgroups and the stream (i32 at D=64: x0.36 without it)
        choices = wgmma_tile_choices(d, dv, target.smem_per_block, **{**hints, "tall": False})
    default = {"wgmma": lambda: dict(zip(("tile_n", "consumers", "stages"), choices[0]),
                                     schedule="persistent", poly_exp2=0),
               "mma": lambda: dict(zip(("tile_m", "tile_n", "warps"), ATTENTION_TILES[d]))}[fam]()
    given = {n: attrs[n] for n in SCHEDULE_ATTRS[fam] if n in attrs}
    # the tile compiler.build takes when ptxas spills the default one (a trial tile)
    # (the same consumers, so the same tile_m: attention_launch.py counts work items before the build).
    # An IR file written by --emit ir carries the tile as attrs and the fallback beside it.
    fallback = list(choices[1]) if len(choices) > 1 and not {"tile_n", "consumers", "stages"} & set(given) \
        and choices[1][1] == choices[0][1] else None
    if attrs.get("spill_fallback") is not None:
        fallback = _given_fallback(k, attrs["spill_fallback"], given)
    s = {**default, **given}
    if fam == "wgmma" and s["consumers"] == 1 and "stages" not in given \
            and s["tile_n"] * (d + dv) * 2 >= ONE_WARPGROUP_STAGE_BYTES:
        s["stages"] = 2
    if fam == "wgmma" and "lazy_rescale" not in given:
        s["lazy_rescale"] = LAZY_RESCALE[1] if s["consumers"] == 3 else 0
    for name, value in given.items():
        if name != "schedule" and type(value) is not int:
            raise KdslError(f"kernel '{k.name}': attr {name} must be an integer, got {value!r}")
    if fam == "wgmma":
        slope_ok = affine_score.column_slope(k) and k.tensor("q").dtype == "bf16"
        if given.get("slope_step") and not slope_ok:
            raise KdslError(f"kernel '{k.name}': attr slope_step = 1 needs bf16 inputs and a score affine in the key "
                            f"position (s + float(q - kv), ALiBi under a causal mask, ...); this kernel's is not")
        if "slope_step" not in given:
            s["slope_step"] = int(slope_ok and attention_wgmma_smem_bytes(
                d, dv, s["tile_n"], s["consumers"], s["stages"], slope_step=1) <= target.smem_per_block)
    otab = s.get("offset_table", 0)  # (set after the row sum below: attrs keep SCHEDULE_ATTRS' order)
    if fam == "wgmma" and "offset_table" not in given:
        otab = int(offset_score.costly(k))
    if fam == "wgmma":
        if otab and not offset_score.applies(k):
            raise KdslError(f"kernel '{k.name}': attr offset_table = 1 needs a score that sees the positions only "
                            f"through q - kv, plus the scaled dot product (s + bias[h, f(i - j)], ...), and is not "
                            f"affine in them; this kernel's is not")
        stages = s["stages"]
        while (otab and "stages" not in given and s["stages"] > 2 and attention_wgmma_smem_bytes(
                d, dv, s["tile_n"], s["consumers"], s["stages"], offset_table=1) > target.smem_per_block):
            s["stages"] -= 1  # the tables' few KB beside a ring that filled shared memory
        if otab and "offset_table" not in given and attention_wgmma_smem_bytes(
                d, dv, s["tile_n"], s["consumers"], s["stages"], offset_table=1) > target.smem_per_block:
            otab, s["stages"] = 0, stages  # a default table that does not fit (head dim 256 at 80 keys)
    # a default slope step is a trial too: where ptxas spills it (its A fragment and one more
    # k-step's registers; relpos' split-KV program at D=128 spilled 24 bytes), compiler.build
    # takes the same tile with the FFMA per element
    slope_trial = attrs.get("slope_trial")
    if fam == "wgmma" and "slope_step" not in given:
        slope_trial = s["slope_step"] or None
    # a default row sum by P V is a trial: where ptxas spills, compiler.build drops it. Not by
    # default for a kernel that returns lse: P's rounding to bf16 / f16 reaches the row sum
    # (ROW_SUM_LSE_ERROR), and under a fixed reference (score_bounds.py) even a row's largest
    # weight is rounded, so a row of one key is off by up to that much.
    row_sum_trial = attrs.get("row_sum_trial")
    if fam == "wgmma" and "tensor_row_sum" not in given:
        fits = attention_wgmma_smem_bytes(d, dv, s["tile_n"], s["consumers"], s["stages"],
                                          slope_step=s["slope_step"], tensor_row_sum=1,
                                          offset_table=otab or s.get("key_table", 0)) <= target.smem_per_block
        s["tensor_row_sum"] = int(dv == 64 and s["consumers"] == 3 and k.tensor("lse") is None and fits)
        row_sum_trial = s["tensor_row_sum"] or None
    if fam == "wgmma":
        s["offset_table"] = otab
        _key_table(k, s, d, dv, given, target)
    problem = {"wgmma": _wgmma_problem, "mma": _mma_problem}[fam](k, s, (d, dv), target)
    if problem:
        raise KdslError(f"kernel '{k.name}': schedule {_quote(given)} is not legal on {target.arch}"
                        f"{f' for head dim {d}' if d else ''}{f' (value head dim {dv})' if dv != d else ''}: {problem}")
    if fam == "wgmma":
        if k.attr("tile_m") is not None and k.attr("tile_m") != 64 * s["consumers"]:
            raise KdslError(f"kernel '{k.name}': attr tile_m = {k.attr('tile_m')!r} disagrees with consumers = "
                            f"{s['consumers']} (the Hopper kernel's tile_m is 64 * consumers; set consumers)")
        streams = _streams(k, s, (d, dv), given, target)
        first, second = _stream_elems(k, tuple(streams.values()))
        _key_mask(k.with_attrs(**streams), s, given)
        if fallback and fallback[0] >= s["tile_n"]:
            fallback = None  # the stream narrowed the kv tile below the fallback's
        return k.with_attrs(kernel="wgmma", tile_m=64 * s["consumers"], **s, value_dim=dv, **streams,
                            spill_fallback=fallback, row_sum_trial=row_sum_trial, slope_trial=slope_trial,
                            smem_bytes=attention_wgmma_smem_bytes(d, dv, s["tile_n"], s["consumers"], s["stages"],
                                                                  first, s["slope_step"], s["tensor_row_sum"],
                                                                  _tables(s), mask_stream_elem=second))
    return k.with_attrs(kernel="mma", **s, value_dim=dv,
                        stream_capture=None, mask_stream_capture=None,  # streams need TMA
                        smem_bytes=attention_smem_bytes(d, s["tile_m"], s["tile_n"], s["warps"]))


def _key_table(k: ir.Kernel, s: dict, d: int, dv: int, given: dict, target: Target) -> None:
    """s["key_table"]: as given (refused where the score has no key part), else on where it
    applies and fits, at two stages if three leave no room (as the offset table)."""
    if given.get("key_table") and not key_table.applies(k):
        raise KdslError(f"kernel '{k.name}': attr key_table = 1 needs a score with one part read per key and "
                        f"nothing cheaper (s + kbias[b, j], ...; not affine in the positions, not of q - kv, no "
                        f"streamed tensor; not under exact math); this kernel's score is not of that kind")
    fits = lambda: attention_wgmma_smem_bytes(  # noqa: E731
        d, dv, s["tile_n"], s["consumers"], s["stages"], slope_step=s["slope_step"],
        tensor_row_sum=s["tensor_row_sum"], offset_table=1) <= target.smem_per_block
    stages = s["stages"]
    if "key_table" not in given:
        s["key_table"] = int(not s["offset_table"] and key_table.applies(k))
    while s["key_table"] and "stages" not in given and s["stages"] > 2 and not fits():
        s["stages"] -= 1  # the table's 1-2 KB beside a ring that filled shared memory
    if s["key_table"] and "key_table" not in given and not fits():
        s["key_table"], s["stages"] = 0, stages  # a default table that does not fit


def _key_mask(k: ir.Kernel, s: dict, given: dict) -> None:
    """s["key_mask"]: as given (refused where the mask has no key part), else on where it
    applies to the mask as it will run, k's streams as tiling kept them (a mask read from a
    streamed tensor's tiles takes none)."""
    if given.get("key_mask") and s["tile_n"] > KEY_MASK_KEYS:
        raise KdslError(f"kernel '{k.name}': attr key_mask = 1 needs tile_n <= {KEY_MASK_KEYS} (a thread's S elements of a "
                        f"tile in 64 bits); tile_n is {s['tile_n']}")
    if given.get("key_mask") and not key_mask.applies(k, s["tile_n"]):
        raise KdslError(f"kernel '{k.name}': attr key_mask = 1 needs a mask with one part read per key and by no "
                        f"query, gathered at the key or dividing it, beside a rest of key intervals (is_global[b, j] "
                        f"or abs(i - j) < 256, valid[b, j], j % 4 == 0 and j <= i, ...; not a streamed mask); this "
                        f"kernel's mask is not of that kind")
    if "key_mask" not in given:
        s["key_mask"] = int(s["tile_n"] <= KEY_MASK_KEYS
                            and key_mask.applies(k, s["tile_n"]))


def _tables(s: dict) -> int:
    """Whether the kernel holds the per-tile tables (an offset table or a key table share them)."""
    return int(bool(s["offset_table"] or s.get("key_table", 0)))


def _given_fallback(k: ir.Kernel, value, given: dict) -> list:
    """attr spill_fallback as an IR file gives it: [tile_n, consumers, stages] of the tile to
    build where the kernel's spills, with the kernel's own consumers."""
    if not (isinstance(value, (list, tuple)) and len(value) == 3 and all(type(x) is int for x in value)):
        raise KdslError(f"kernel '{k.name}': attr spill_fallback must be [tile_n, consumers, stages] or null, "
                        f"got {value!r}")
    if "consumers" in given and value[1] != given["consumers"]:
        raise KdslError(f"kernel '{k.name}': attr spill_fallback = {list(value)} changes consumers "
                        f"({given['consumers']}); a fallback may only narrow the kv tile")
    return list(value)


def _stream_elems(k: ir.Kernel, names) -> tuple[int, ...]:
    """Element bytes of the two rings (0 where there is none)."""
    return tuple(streaming.ELEM_BYTES[k.tensor(n).dtype] if n else 0 for n in names) + (0,) * (2 - len(names))


def _streams(k: ir.Kernel, s: dict, dims, given: dict, target: Target) -> dict:
    """The streamed captures kept (passes/streaming.py) as attrs, fitting their rings beside K and
    V: with fewer stages (down to 2) unless the stages were given, then on a narrower kv tile
    (most stages first, then the widest) unless the tile or its stages were given; else the
    first ring alone likewise; else none. s takes the tile kept. A narrower tile with the stream
    beat the default one reading per element: an i32 mask at D=128, 128 keys per element 1240
    us, 64 keys streamed 682, 96 keys 691 (H200, 2x16x4096², bench/NOTES.md fifty-seventh session)."""
    names = streaming.streamed(k)
    stages = [s["stages"]] if "stages" in given else list(range(s["stages"], 1, -1))
    narrower = [] if {"tile_n", "stages"} & set(given) else [bn for bn in reversed(WGMMA_WIDTHS) if bn < s["tile_n"]]
    for kept in [names[:n] for n in range(len(names), 0, -1)]:  # both rings, then the first alone
        for bn, n in [(s["tile_n"], n) for n in stages] + [(bn, n) for n in stages for bn in narrower]:
            if _ring_fits(k, dims, bn, s["consumers"], n, target, s, kept):
                s["tile_n"], s["stages"] = bn, n
                return dict(stream_capture=kept[0], mask_stream_capture=kept[1] if len(kept) > 1 else None)
    return dict(stream_capture=None, mask_stream_capture=None)


def _stream_fits(k: ir.Kernel, tile: tuple[int, int, int], dims, target: Target) -> bool:
    """Whether the streamed captures' rings (if any) fit beside tile's (BN, consumers, stages)
    with 2 stages or more and nothing else in shared memory."""
    bn, consumers, stages = tile
    return not k.attr("stream_capture") or any(_ring_fits(k, dims, bn, consumers, n, target)
                                               for n in range(stages, 1, -1))


def _ring_fits(k: ir.Kernel, dims, bn: int, consumers: int, stages: int, target: Target, s: dict | None = None,
               names: tuple[str, ...] | None = None) -> bool:
    """Whether the rings of `names` (default: every streamed tensor of k) fit beside the tile."""
    first, second = _stream_elems(k, streaming.streamed(k) if names is None else names)
    extras = (s["slope_step"], s["tensor_row_sum"], _tables(s)) if s else (0, 0, 0)
    return attention_wgmma_smem_bytes(*dims, bn, consumers, stages, first, *extras,
                                      mask_stream_elem=second) <= target.smem_per_block


def _quote(given: dict) -> str:
    return ", ".join(f"{n} = {v!r}" for n, v in given.items()) or "(defaults)"


def _fits(smem: int, target: Target) -> str:
    return "" if smem <= target.smem_per_block else \
        f"needs {smem} bytes of shared memory, more than the {target.smem_per_block} a block can have " \
        "(fewer stages or a narrower tile need less)"


def _wgmma_problem(k, s, dims, target) -> str:
    """attention_wgmma_parts.cuh's Cfg static_asserts, and the widths wgmma_ops.cuh provides."""
    if s["tile_n"] not in WGMMA_WIDTHS:
        return f"tile_n must be one of {WGMMA_WIDTHS}"
    if s["consumers"] not in (1, 2, 3):
        return "consumers must be 1, 2 or 3 (warpgroups of 64 query rows)"
    launch_regs = min(255, 65536 // (128 * (s["consumers"] + 1))) // 8 * 8
    for product, size, n, extra, fix in (
            ("Q K^T", "tile_n", s["tile_n"], WGMMA_QK_OPERAND_REGS, "a narrower tile_n or fewer consumers"),
            ("P V", "value head dim", dims[1], WGMMA_PV_OPERAND_REGS, "fewer consumers")):
        if n // 2 + extra > launch_regs:
            return (f"{s['consumers']} consumers with {size} {n}: one m64n{n} wgmma of {product} holds {n // 2} "
                    f"accumulator registers a thread, {n // 2 + extra} with its operands, more than the {launch_regs} "
                    f"a thread of {s['consumers'] + 1} warpgroups is compiled for; take {fix}")
    # One stage would serialise every load with the math; the kernel is measured from 2 up.
    if not 2 <= s["stages"] <= MAX_STAGES:
        return f"stages must be in [2, {MAX_STAGES}]"
    if s["schedule"] not in SCHEDULES:
        return f"schedule must be one of {', '.join(SCHEDULES)}"
    if s["poly_exp2"] not in POLY_EXP2:
        return f"poly_exp2 must be one of {POLY_EXP2}"
    if s["lazy_rescale"] not in LAZY_RESCALE:
        return f"lazy_rescale must be one of {LAZY_RESCALE}"
    if s["slope_step"] not in SLOPE_STEP:
        return f"slope_step must be one of {SLOPE_STEP}"
    if s["tensor_row_sum"] not in TENSOR_ROW_SUM:
        return f"tensor_row_sum must be one of {TENSOR_ROW_SUM}"
    if s["tensor_row_sum"] and dims[1] != 64:
        return "tensor_row_sum needs value head dim 64"
    if s["offset_table"] not in OFFSET_TABLE:
        return f"offset_table must be one of {OFFSET_TABLE}"
    if s.get("key_table", 0) not in KEY_TABLE:
        return f"key_table must be one of {KEY_TABLE}"
    if s.get("key_mask", 0) not in KEY_MASK:
        return f"key_mask must be one of {KEY_MASK}"
    return _fits(attention_wgmma_smem_bytes(*dims, s["tile_n"], s["consumers"], s["stages"],
                                            slope_step=s["slope_step"], tensor_row_sum=s["tensor_row_sum"],
                                            offset_table=_tables(s)), target)


def _mma_problem(k, s, dims, target) -> str:
    """attention_mma.cuh's Cfg static_asserts."""
    d = dims[0]
    bm, bn, warps = s["tile_m"], s["tile_n"], s["warps"]
    if bn not in MMA_WIDTHS:
        return f"tile_n must be one of {MMA_WIDTHS}"
    if not 1 <= warps <= 16 or bm < 1 or bm % warps or bm // warps not in (16, 32):
        return "tile_m / warps must be 16 or 32 query rows per warp (warps in [1, 16])"
    threads, chunks, mt = 32 * warps, d // 8, bm // warps // 16
    if (bn * chunks) % threads or (bm * chunks) % threads:
        return "the tiles do not split evenly into 16-byte loads over the block's threads"
    if mt * (d // 8 + bn // 8) * 4 > 192 or (mt != 1 and bn > 64):
        return "the accumulators would not fit in registers (32 rows per warp needs tile_n <= 64)"
    return _fits(attention_smem_bytes(d, bm, bn, warps), target)


def gemm_problem(k: ir.Kernel) -> gemm_tiles.Problem:
    """The problem the kernel is tiled for: its `shape` attr, else the default shape."""
    grouping = k.attr("grouping")
    shape = k.attr("shape") or gemm_tiles.DEFAULT_SHAPES[grouping]
    if len(shape) != 4 or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in shape):
        raise KdslError(f"kernel '{k.name}': attr shape must be [M, N, K, G] of positive integers, got {list(shape)}")
    M, N, K, G = shape
    if K % 128:
        raise KdslError(f"kernel '{k.name}': K must be a multiple of 128, got {K}")
    out_bytes = 4 if k.tensor("out").dtype == "f32" else 2
    expected = k.attr("expected_rows")
    if expected is not None:
        gemm_tiles.check_expected_rows(f"kernel '{k.name}': attr", grouping, expected)
    return gemm_tiles.Problem(M, N, K, G, grouping, out_bytes, bool(k.attr("accumulate")), expected)


def _gemm(k: ir.Kernel, target: Target) -> ir.Kernel:
    problem = gemm_problem(k)
    sms = k.attr("sms") or target.sms
    cfg = gemm_tiles.choose(problem, sms, target.smem_per_block, dict(k.attrs))
    smem = gemm_tiles.smem_bytes(cfg["tile_m"], cfg["tile_n"], cfg["stages"], problem.out_bytes, cfg["store"] == "tma",
                                 cfg["b_scale_load"] == "tma")
    shape = [problem.M, problem.N, problem.K, problem.G]
    return k.with_attrs(shape=shape, sms=sms, **cfg, tile_k=128, smem_bytes=smem)
