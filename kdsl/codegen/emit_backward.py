"""Lowered IR attention kernel -> the CUDA C++ of its backward: which backward kernel a target
runs at given head dims and how it launches (BackwardPlan), and the generated source (the
forward's Variant beside a Grad struct: the score, its derivative by s, the captured tensors'
gradient shares). The forward's generation is codegen/emit.py."""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace

from .. import __version__, ir
from ..errors import KdslError
from ..passes import item_divisions, key_table, kv_bounds, offset_score, score_grad, streaming, tiling
from .cexpr import CEmitter, capture_ident
# the forward's names, template environment and Variant: the backward's source holds the same Variant
from .emit import _ELEM, Generated, _attention_names, _env, _on, _variant, attention_capture_dims, entry_name


@dataclass(frozen=True)
class BackwardPlan:
    """The backward kernel a target runs at given head dims, and its launch: the runtime's
    grid and shared memory, and the generated source's body (whose static_assert checks them)."""
    body: str      # the kernel's name: attention_bwd_wgmma[_wide] (sm_90a) or attention_bwd (mma.sync)
    header: str    # the header that defines it
    smem: int      # dynamic shared memory bytes
    threads: int
    keys: int      # keys a CTA owns: grid = (ceil(N / keys), Hkv, B)
    buffers: int   # Q / dO buffers; attention_bwd.cuh takes one where two do not fit; 0: none fits
    dq_tiles: bool = False  # dq_acc in 64-row tiles of fragment order (attention_bwd_wgmma.cuh), else [B, H, M, D] rows
    tma: bool = False  # Q and dO by TMA: the device function is body + "_tma", taking their tensor maps first
    streams: int = 0   # the rings whose step tiles the wgmma body copies (KDSL_BWD_STREAM; backward_plan_for)

    @property
    def function(self) -> str:
        """The device function the generated kernel calls."""
        return self.body + "_tma" if self.tma else self.body


BACKWARD_KERNELS = ("wgmma", "wgmma_wide", "mma")  # backward_plan's kinds (KDSL_BWD_KERNEL)
BACKWARD_LOADS = ("tma", "cp_async")  # how the wgmma kinds load Q and dO (KDSL_BWD_LOADS)


def backward_plan(d: int, dv: int, target, kind: str = "", loads: str = "") -> BackwardPlan:
    """Where the target has wgmma: the wgmma kernel (attention_bwd_wgmma.cuh) where both padded
    head dims are at most 128 (its registers hold dK and dV for 64 keys a warpgroup), the wide
    one (attention_bwd_wgmma_wide.cuh: 64 keys a CTA, head-dim columns split between the
    warpgroups) up to 256, both loading Q and dO by TMA; else the mma.sync one
    (attention_bwd.cuh). kind (or the environment's KDSL_BWD_KERNEL: "wgmma", "wgmma_wide",
    "mma") forces one where it can run, and loads (KDSL_BWD_LOADS: "tma", "cp_async") how a
    wgmma one loads, for A/B timing."""
    dp, dvp = -(-d // 64) * 64, -(-dv // 64) * 64
    kind = kind or os.environ.get("KDSL_BWD_KERNEL", "")
    loads = loads or os.environ.get("KDSL_BWD_LOADS", "")
    if kind:
        why = (f"not one of {', '.join(BACKWARD_KERNELS)}" if kind not in BACKWARD_KERNELS else
               f"{target.arch} has no wgmma" if kind.startswith("wgmma") and not target.has_wgmma else
               "it takes padded head dims up to 128" if kind == "wgmma" and max(dp, dvp) > 128 else "")
        if why:
            raise KdslError(f"backward kernel {kind!r} at head dims {d} / {dv}: {why} (KDSL_BWD_KERNEL)")
    else:
        kind = "mma" if not target.has_wgmma else "wgmma" if dp <= 128 and dvp <= 128 else "wgmma_wide"
    if loads:
        why = (f"not one of {', '.join(BACKWARD_LOADS)}" if loads not in BACKWARD_LOADS else
               "the mma kernel copies" if loads == "tma" and kind == "mma" else "")
        if why:
            raise KdslError(f"backward loads {loads!r} ({kind} kernel): {why} (KDSL_BWD_LOADS)")
    # Q and dO by TMA: x1.06-1.09 at head dim 128 and even at 64 (H200, bench/NOTES.md forty-fifth session)
    tma = loads != "cp_async"
    bars = 16  # QdoByTma's two mbarriers (their room is kept under cp.async loads too)
    if kind == "wgmma":  # BwdWgCfg: 128 keys, two Q / dO buffers, dS^T, two fp32 64-row dQ tiles
        rows, bn = _wgmma_backward_rows(d, dv), 128
        smem = (1024 + 2 * (bn * (dp + dvp) + 2 * rows * (dp + dvp) + bn * rows) + 2 * 64 * dp * 4 + 2 * 2 * 4 * rows
                + bars)
        return BackwardPlan("attention_bwd_wgmma", "kdsl/attention_bwd_wgmma.cuh", smem, 256, bn, 2, dq_tiles=True,
                            tma=tma)
    if kind == "wgmma_wide":  # BwdWideCfg: 64 keys, two 64-row Q / dO buffers, dS^T, two 8 KB exchange slots
        bm = bn = 64
        smem = 1024 + 2 * (bn * (dp + dvp) + 2 * bm * (dp + dvp) + bn * bm) + 2 * 8192 + 2 * 2 * 4 * bm + bars
        return BackwardPlan("attention_bwd_wgmma_wide", "kdsl/attention_bwd_wgmma_wide.cuh", smem, 256, bn, 2,
                            dq_tiles=True, tma=tma)
    buffers = next((n for n in (2, 1) if _mma_backward_smem(d, dv, n) <= target.smem_per_block), 0)
    return BackwardPlan("attention_bwd", "kdsl/attention_bwd.cuh", _mma_backward_smem(d, dv, buffers or 1), 256,
                        tiling.BACKWARD_TILE, buffers)


def _wgmma_backward_rows(d: int, dv: int) -> int:
    """Query rows the wgmma backward's buffers hold (BwdWgCfg::kRows)."""
    return 128 if -(-d // 64) == -(-dv // 64) == 1 else 64


def backward_plan_for(k: ir.Kernel, target) -> BackwardPlan:
    """backward_plan at k's head dims, with the rings of streamed tensors (passes/streaming.py)
    whose step tiles the wgmma body copies for the mask (attention_bwd_stream.cuh): every ring
    the mask reads, double-buffered as Q and dO are, where they fit beside the kernel's other
    buffers (a 1-byte mask at head dim 128: 16 KB of the 17 left); else none, and the mask reads
    global memory per element."""
    d, dv = k.attr("head_dim"), k.attr("value_dim") or k.attr("head_dim")
    plan = backward_plan(d, dv, target)
    reads = streaming.mask_reads(k)
    # 1-byte elements only: a 2-byte tile misses by 16 bytes at D <= 64, so the header's wider
    # reads (StreamLanes) have never run on a GPU
    if plan.body != "attention_bwd_wgmma" or not reads or any(
            streaming.ELEM_BYTES[k.tensor(n).dtype] != 1 for n in reads):
        return plan
    extra = sum(2 * _wgmma_backward_rows(d, dv) * plan.keys * streaming.ELEM_BYTES[k.tensor(n).dtype] for n in reads)
    if plan.smem + extra > target.smem_per_block:
        return plan
    bits = sum(1 << i for i, n in enumerate(streaming.streamed(k)) if n in reads)
    return replace(plan, smem=plan.smem + extra, streams=bits)


def backward_step_rows(k: ir.Kernel, target) -> int:
    """Query rows a step of the wgmma backward takes (KDSL_BWD_BM): 128 where both padded head
    dims are 64 (the products m64n128, fewer barriers and loads a query), unless the kernel
    carries bwd_step_rows (compiler.build sets 64 where ptxas spilled the 128-row build); else 64."""
    d, dv = k.attr("head_dim"), k.attr("value_dim") or k.attr("head_dim")
    if backward_plan(d, dv, target).body != "attention_bwd_wgmma" or -(-max(d, dv) // 64) * 64 != 64:
        return 64
    return k.attr("bwd_step_rows") or 128


# A tile predicate at least this long (IR nodes of tile_empty: natten2d's 2D neighbourhood 149,
# dilated_window 51, sliding_window 9, causal 3) costs more a class than the 32-wide search's
# registers do (KDSL_BWD_WARP_SKIP, attention_bwd_wgmma.cuh BwdSteps::next)
COSTLY_TILE_PREDICATE = 64


def backward_tile_search(k: ir.Kernel) -> int:
    """How the wgmma backwards find a CTA's next non-empty step (KDSL_BWD_WARP_SKIP): 2, a warp
    checks 32 steps at a time under the mask, where the tile predicate is long arithmetic (H200:
    natten2d x1.09-1.15); else 1, 32 at a time only where classes are tile-summary loads (a mask
    that reads data), one after the other otherwise. Short predicates lose to the search's
    registers: causal x0.91-0.92, sliding_window x0.95-0.98, dilated_window x0.96 (bench/NOTES.md,
    forty-seventh session)."""
    e = k.func("tile_empty")
    return 2 if e is not None and sum(1 for _ in ir.walk(e)) >= COSTLY_TILE_PREDICATE else 1


def backward_orders(k: ir.Kernel) -> bool:
    """Whether the backward takes its CTAs' order from the GPU (KDSL_BWD_ORDER,
    attention_bwd_order.cuh): where its tile classes are arithmetic on loaded values
    (mask_tiles "data-dependent": sinks or a prefix per batch), so that which CTAs are long is
    known only per call. H200, backward alone against none: sinks beside a window x1.27-1.30,
    prefix-LM x1.03-1.07, sinks under causal x1.02. Not where they come from the tile summary
    (document ids): document_mask lost x0.90-0.93 to its own order (key block by key block over
    groups of half the SMs' heads, geometry.attention_head_group), two_level_docs x0.97,
    thresholds tied (bench/NOTES.md, eighty-fifth session)."""
    return k.attr("mask_tiles") == "data-dependent"


def _mma_backward_smem(d: int, dv: int, buffers: int) -> int:
    """attention_bwd.cuh's BwdCfg::kSmemBytes with Q / dO tiles in `buffers` buffers."""
    dp, dvp = -(-d // 64) * 64, -(-dv // 64) * 64
    bm = bn = tiling.BACKWARD_TILE
    return 2 * (buffers * bm * (dp + dvp) + bn * (dp + dvp) + 2 * bm * bn) + buffers * 8 * bm


def backward_kernel(k: ir.Kernel, target) -> ir.Kernel:
    """A lowered attention kernel as its backward reads it: with passes/kv_bounds.py's key
    interval solved for the backward's key tiles (plan.keys), not the forward's tile_n. Solved
    for 128-key tiles, `kv % 128` is kv - k0, wrong on every second 64-key block of the wide
    backward (a data-reading mask with a 2-D neighbourhood at head dim 256 and value head dim
    64, whose forward takes 128-key tiles: gradients off by 100 %, tools/gpu_fuzz.py)."""
    d, dv = k.attr("head_dim"), k.attr("value_dim") or k.attr("head_dim")
    keys = backward_plan(d, dv, target).keys
    return k if k.attr("kv_bounds") is None or keys == k.attr("tile_n") else kv_bounds.run(k, keys)


def generate_backward(k: ir.Kernel, target) -> Generated:
    """The backward kernel of a lowered attention kernel (backward_plan's body): the forward's
    Variant for its mask and tile classes (key bounds solved for its own key tiles:
    backward_kernel), and the score with its derivative in s (passes/score_grad.py) as the
    program wrote it, positions converted in place."""
    k = backward_kernel(k, target)
    d, dv = k.attr("head_dim"), k.attr("value_dim") or k.attr("head_dim")
    variables, captures, fields = _attention_names(k)
    natural = CEmitter({**variables, "s": "s", "qf": "((float)q)", "kvf": "((float)kv)",
                        "dqkf": "((float)(q - kv))"}, captures)
    score = k.func("score") or ir.Var("f32", "s")
    dscore = score_grad.score_grad(k)
    plan = backward_plan_for(k, target)
    # the mma kernel's one source serves both buffer counts (KDSL_BWD_BUFFERS, runtime/programs.py)
    smem, smem_single = ((_mma_backward_smem(d, dv, 2), _mma_backward_smem(d, dv, 1)) if plan.body == "attention_bwd"
                         else (plan.smem, plan.smem))
    entry = entry_name(k) + "_bwd"
    forward = "kdsl/attention_wgmma.cuh" if k.attr("kernel") == "wgmma" else "kdsl/attention_mma.cuh"
    rows = backward_step_rows(k, target)  # a define A/B timing may override (KDSL_DEFINES)
    search = backward_tile_search(k)  # so is how a CTA finds its next step
    # divisions NVVM may share among an element's branches (common.cuh floordiv, divisor.cuh)
    prelude = ("#define KDSL_EXACT_MATH 1\n" if k.attr("math") == "exact" else "") + \
        "#ifndef KDSL_SPECULATED_DIVISION\n#define KDSL_SPECULATED_DIVISION 1\n#endif\n" + (
        f"#ifndef KDSL_BWD_BM\n#define KDSL_BWD_BM {rows}\n#endif\n" if rows != 64 else "") + (
        f"#ifndef KDSL_BWD_WARP_SKIP\n#define KDSL_BWD_WARP_SKIP {search}\n#endif\n" if search != 1 else "") + (
        f"#define KDSL_BWD_STREAM {plan.streams}\n" if plan.streams else "") + (
        "#define KDSL_BWD_ORDER 1\n" if backward_orders(k) else "")
    src = _env().get_template("attention_backward.cu.j2").render(
        prelude=prelude, version=__version__,
        source=k.source or "<string>", name=k.name, ns=f"kdsl_{k.name}", d=d, dv=dv, dp=-(-d // 64) * 64,
        forward_header=forward,
        body=plan.body, function=plan.function, body_header=plan.header,
        # the tile summary of a mask that reads data: 64-query tiles (a step takes one or two) on its key blocks
        elem=_ELEM[k.tensor("q").dtype], bm=tiling.BACKWARD_TILE, bn=plan.keys, poly_exp2=0, lazy_rescale=0,
        tensor_row_sum=_on(False), smem=smem, smem_single=smem_single, threads=plan.threads, entry=entry, tma=plan.tma,
        # the Hopper bodies divide by prepared divisors: NVVM shares one preparation among a step's
        # elements with no item_warm (H200, backward alone: x1.08-1.39 on seven kernels; warming the
        # item's divisions there too ran x0.93-0.96, bench/NOTES.md, seventy-seventh session)
        fields=fields, v=_variant(k, variables, captures,
                                  item_divisions.divisors(k, row=None) if plan.body != "attention_bwd" else ()),
        grad=dict(score=natural(score), dscore=natural(dscore), score_is_s=_on(score == ir.Var("f32", "s")),
                  dscore_const=_on(isinstance(dscore, ir.Const) and math.isfinite(dscore.value)),
                  score_loads=_on(any(isinstance(n, ir.Load) for n in ir.walk(score))),
                  key=_backward_key_part(score, dscore, natural, plan.body != "attention_bwd"),
                  **_capture_grad_code(k, natural, captures)))
    return Generated(k.name, entry, src, attention_capture_dims(k))


def _backward_key_part(score: ir.Expr, dscore: ir.Expr, natural: CEmitter, wgmma: bool) -> dict:
    """The Grad struct's key part (attention_backward.cu.j2): a wgmma backward step's thread
    holds two keys for all of its elements, so a part of the score read per key (passes/
    key_table.py part(): `4 tanh(g[b, j])`, the key half of a rank-one bias) is evaluated once a
    step per key instead of per element, and the score and its derivative read it as kt."""
    g = key_table.part(score) if wgmma else None
    if g is None:
        return dict(on=_on(False), part="0.f", score=natural(score), dscore=natural(dscore))
    at_kt = CEmitter({**natural.variables, "kt": "kt"}, natural.captures)
    return dict(on=_on(True), part=natural(g), score=at_kt(key_table.with_kt(score, g)),
                dscore=at_kt(key_table.with_kt(dscore, g)))


def _capture_grad_code(k: ir.Kernel, natural: CEmitter, captures: dict) -> dict:
    """The Grad struct's captured-tensor gradients (attention_backward.cu.j2), added where
    KDSL_CAPTURE_GRADS builds ask for them: per load of a float captured tensor, an element's
    share dg * (d score / d value) goes into the entry it read
      - by one atomic an element (adds);
      - summed over a step in u[] and added once a warp, where the index reads b and h alone
        (sums, flushes; score_grad.step_uniform);
      - handed to the kernel in o[0], which sums shares per offset q - kv and adds once an
        offset, for the first load whose index reads the positions only through q - kv
        (share, offset_add; offset_score.offset_load: the entry at offset d). The wgmma
        kernel's per-offset sums use one scratch area a warp, so one load takes them."""
    by_offset = CEmitter({**natural.variables, "dqk": "d"}, captures)
    atomic, uniform, offset = [], [], []
    for load, deriv in score_grad.capture_grads(k):
        moved = offset_score.offset_load(load)
        if score_grad.step_uniform(load):
            uniform.append((load, deriv))
        elif moved is not None and not offset:
            offset.append((moved, deriv))
        else:
            atomic.append((load, deriv))
    tensors = [capture_ident(t) for t in score_grad.capture_grad_tensors(k)]
    grad = lambda load: f"g.{capture_ident(load.tensor)}"  # noqa: E731
    return dict(
        tensors=tensors, args=", ".join(f"grad_{t}" for t in tensors),
        adds=[f"atomicAdd({grad(load)} + {natural.linear_index(load)}, dg * ({natural(deriv)}));"
              for load, deriv in atomic],
        sums=[f"u[{i}] += dg * ({natural(deriv)});" for i, (_, deriv) in enumerate(uniform)],
        flushes=[f"kdsl::warp_sum_add({grad(load)} + {natural.linear_index(load)}, u[{i}]);"
                 for i, (load, _) in enumerate(uniform)],
        shares=[f"o[0] = dg * ({natural(deriv)});" for _, deriv in offset],
        offset_adds=[f"atomicAdd({grad(moved)} + {by_offset.linear_index(moved)}, v);" for moved, _ in offset])
