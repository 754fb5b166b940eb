"""CPU execution of the lowered, tiled program with numpy.

Not a reference: it walks the same schedule the CUDA kernels do — q tiles of tile_m rows,
kv tiles of tile_n keys classified by the mask analysis' tile_empty / tile_full predicates
(empty ones skipped, full ones without the per-element mask, partial ones by the per-row key
interval of passes/kv_bounds.py where it was derived), the ragged last tile bounded
by N, scores in the log2 domain from the exp2-folded expression, online-softmax rescaling,
P rounded to the input type before P.V as the tensor cores see it; and for FP8 GEMMs each
128-deep K block accumulated on its own and promoted with its scales. Slow; exact about the
schedule, so CI can test the passes against the float64 reference with no GPU. Like the Hopper
kernel it takes an affine score as F * (qk + slope * col) + base from a per-tile base
(passes/affine_score.py), a fixed softmax reference where the score's range allows one
(passes/score_bounds.py), with the row sums by P V (tiling.TENSOR_ROW_SUM) sums P as rounded
for P V, and runs grouped-query heads as rows of one problem where the runtime does
(pipeline.heads_fold_into_rows). One exception: a trial (a kv tile, tiling.SPILL_TRIAL_REGS,
or the row sums by P V) that ptxas spills is dropped on the GPU (compiler.build), which only
the build can tell; the interpreter walks the trial. attention_backward is the backward
kernel's twin (attention_bwd.cuh), for gradients with no GPU.
"""
from __future__ import annotations

import numpy as np

from . import ir
from .backends import round_float32
from .passes import mask_analysis, pipeline
from .passes.target import get_target
from .semantics import eval_numpy, eval_scalar


def attention(kernel: ir.Kernel, q, k, v, captures=None, scale=None, arch="sm_90a"):
    """q [B,H,M,D], k [B,Hkv,N,D], v [B,Hkv,N,Dv] as numpy float32 arrays (already holding bf16/f16
    values); captured tensors as numpy arrays. Returns (out float32, lse float32).
    kdsl.interpreted wraps this in the compiled kernels' calling convention."""
    captures = captures or {}
    B, H, M, D = q.shape
    Hkv, N, Dv = k.shape[1], k.shape[2], v.shape[3]
    low = pipeline.lower(kernel, get_target(arch), D, Dv)
    dims = {n: {"q": q, "k": k, "v": v, **captures}[t].shape[axis] for n, (t, axis) in kernel.dims.items()}
    scale = float(eval_scalar(kernel.func("scale"), dims)) if scale is None else scale
    if H > Hkv and low.attr("kernel") == "wgmma" and pipeline.heads_fold_into_rows(low):
        # as the Hopper kernel runs grouped-query heads (runtime/attention_launch.py): the H / Hkv query
        # heads of a k/v head as rows of one problem, in the same memory
        out, lse = attention(kernel, q.reshape(B, Hkv, H // Hkv * M, D), k, v, captures, scale, arch)
        return out.reshape(B, H, M, Dv), lse.reshape(B, H, M)
    bm, bn = low.attr("tile_m"), low.attr("tile_n")
    lazy = np.float32(low.attr("lazy_rescale") or 0)
    fixed_ref = low.attr("score_ref")  # None: a running max
    rounded_sums = bool(low.attr("tensor_row_sum"))
    elem = kernel.tensor("q").dtype
    scale_log2 = np.float32(scale * 1.4426950408889634)
    score, mask = low.func("score_log2"), low.func("mask")
    empty_p, full_p = low.func("tile_empty"), low.func("tile_full")
    stops = summary_stops(low)
    # partial tiles' keys per row, when derived; tile_keys: on which partial tiles (None: all)
    kv_lo, kv_hi, tile_keys = low.func("kv_lo"), low.func("kv_hi"), low.func("tile_keys")
    kv_head = np.arange(H) // (H // Hkv)
    out = np.zeros((B, H, M, Dv), np.float32)
    lse = np.full((B, H, M), -np.inf, np.float32)
    b_idx = np.arange(B).reshape(B, 1, 1, 1)
    h_idx = np.arange(H).reshape(1, H, 1, 1)
    for q0 in range(0, M, bm):
        q1 = min(q0 + bm, M) - 1
        rows = np.arange(q0, q1 + 1).reshape(1, 1, -1, 1)
        m_i = np.full((B, H, q1 - q0 + 1), -np.inf if fixed_ref is None else fixed_ref, np.float32)
        l_i = np.zeros_like(m_i)
        acc = np.zeros((B, H, q1 - q0 + 1, Dv), np.float32)
        for k0 in range(0, N, bn):
            k1 = min(k0 + bn, N) - 1
            cls = _classify(empty_p, full_p, dims, captures, B, H, q0, q1, k0, k1, stops) if mask is not None \
                else np.full((B, H), "full")
            if (cls == "empty").all():
                continue
            cols = np.arange(k0, k1 + 1).reshape(1, 1, 1, -1)
            qk = np.einsum("bhmd,bhnd->bhmn", q[:, :, q0:q1 + 1], k[:, kv_head, k0:k1 + 1], dtype=np.float32)
            env = {**dims, "qk": qk, "scale": np.float32(scale), "scale_log2": scale_log2,
                   "b": b_idx, "h": h_idx, "q": rows, "kv": cols, "kvt": np.int64(k0),
                   "qf": rows.astype(np.float32), "kvf": cols.astype(np.float32),
                   "dqkf": (rows - cols).astype(np.float32)}
            s = _score(low, score, env, captures, k0).astype(np.float32)
            if mask is not None:
                keep = np.broadcast_to(eval_numpy(mask, env, captures), qk.shape)
                if kv_lo is not None:  # as the Hopper kernel: lo <= kv <= hi on tiles of class keys
                    row = {**env, "k0": k0}
                    keys = (cols >= eval_numpy(kv_lo, row, captures)) & (cols <= eval_numpy(kv_hi, row, captures))
                    by_keys = np.ones((B, H), bool) if tile_keys is None else \
                        _holds(tile_keys, dims, captures, B, H, q0, q1, k0, k1, stops)
                    keep = np.where(by_keys[..., None, None], keys, keep)
                # full tiles skip the per-element mask, as the kernel does; empty (b, h) pairs drop out
                keep = np.where((cls == "full")[..., None, None], True, keep) & (cls != "empty")[..., None, None]
                s = np.where(keep, s, -np.inf)
            m_new = np.maximum(m_i, s.max(axis=-1)) if fixed_ref is None else m_i  # a fixed one never moves
            if lazy:  # the Hopper kernel keeps its reference while the max exceeds it by <= lazy
                m_new = np.where(m_new <= m_i + lazy, m_i, m_new)
            base = np.where(np.isneginf(m_new), 0.0, m_new).astype(np.float32)
            p = np.exp2(s - base[..., None])
            alpha = np.exp2(np.where(np.isneginf(m_i), -np.inf, m_i - base))
            p_elem = round_float32(p, elem)  # P as P V's A operand holds it
            l_i = l_i * alpha + (p_elem if rounded_sums else p).sum(axis=-1, dtype=np.float32)
            pv = np.einsum("bhmn,bhnd->bhmd", p_elem, v[:, kv_head, k0:k1 + 1], dtype=np.float32)
            acc = acc * alpha[..., None] + pv
            m_i = m_new
        safe = np.where(l_i > 0, l_i, 1.0)
        # O times 1 / l, or times 0 where no key was kept, as the kernel's epilogue: a row whose
        # score was NaN somewhere stays NaN (its l too), as on the GPU
        inv = np.where(l_i > 0, np.float32(1.0) / safe, np.float32(0.0)).astype(np.float32)
        out[:, :, q0:q1 + 1] = acc * inv[..., None]
        lse[:, :, q0:q1 + 1] = np.where(l_i > 0, (m_i + np.log2(safe)) * np.float32(np.log(2.0)), -np.inf)
    return out, lse


def _score(low: ir.Kernel, score: ir.Expr, env: dict, captures: dict, k0: int) -> np.ndarray:
    """score_log2 of a tile's elements as the Hopper kernel computes it: as written, or for an
    affine score F * (qk + slope * col) + base, the base taken at the tile's first column and col
    the offset from it (the kernel takes each thread's first column; the sum is the same). A
    scale <= 0 runs the program that computes the score as written (runtime/attention_launch.py)."""
    qk = env["qk"]
    if not (low.func("score_slope") is not None and env["scale_log2"] > 0):  # else as the runtime does
        # (a key table's raw form, key_table.py, is the same score rounded once differently: as written)
        return np.broadcast_to(eval_numpy(score, env, captures, np.float32), qk.shape)
    at_col0 = {**env, "kv": np.int64(k0), "kvf": np.float32(k0), "dqkf": (env["q"] - k0).astype(np.float32)}
    slope = eval_numpy(low.func("score_slope"), env, captures, np.float32)
    base = eval_numpy(low.func("score_base"), at_col0, captures, np.float32)
    factor = np.float32(env["scale_log2"] * np.float32(low.attr("score_factor")))
    col = (env["kv"] - k0).astype(np.float32)
    return np.broadcast_to(factor * (qk + slope * col) + base, qk.shape)


def summary_stops(low: ir.Kernel) -> dict:
    """{e: (floor, ceiling)} of the whole-block slots the summary kernel stops reading once it has
    met both (mask_analysis.summary_saturation; attention_summary.cuh summarize_block): it then
    stores the floor and ceiling, not the block's min and max, and so does _reduce_tiles."""
    stops = {}
    for s in mask_analysis.summary_slots(low):
        floor, ceiling = mask_analysis.summary_saturation(low, s)
        if ir.TILE_REDUCTIONS[s.op][0] == "tile" and floor is not None and ceiling is not None:
            stops[s.args[0]] = (floor, ceiling)
    return stops


def _classify(empty_p, full_p, dims, captures, B, H, q0, q1, k0, k1, stops=None) -> np.ndarray:
    """Tile class per (b, h): 'empty', 'full' or 'partial'."""
    empty = _holds(empty_p, dims, captures, B, H, q0, q1, k0, k1, stops)
    full = _holds(full_p, dims, captures, B, H, q0, q1, k0, k1, stops)
    return np.where(empty, "empty", np.where(full, "full", "partial"))


def _holds(pred, dims, captures, B, H, q0, q1, k0, k1, stops=None) -> np.ndarray:
    """A tile predicate per (b, h), tile reductions taken over the block (stopped as
    summary_stops says)."""
    env = {**dims, "b": np.arange(B).reshape(B, 1), "h": np.arange(H).reshape(1, H),
           "q0": q0, "q1": q1, "k0": k0, "k1": k1}
    ranges = {"q": (q0, q1), "kv": (k0, k1)}
    return np.broadcast_to(eval_numpy(_reduce_tiles(pred, env, captures, ranges, stops or {}), env, captures), (B, H))


def _reduce_tiles(e: ir.Expr, env: dict, captures: dict, ranges: dict, stops: dict) -> ir.Expr:
    """Replace each tile reduction (qmin e) ... (kvmax e) by a variable holding its value per
    (b, h), bound in env: what the GPU's tile summary holds for this block."""
    if isinstance(e, ir.Op) and e.op in ir.TILE_REDUCTIONS:
        axis, which = ir.TILE_REDUCTIONS[e.op]
        positions = ir.TILE_AXES[axis]  # ("q",), ("kv",) or both: the axes reduced, after (b, h)
        extra = (None,) * len(positions)
        grid = {**env, "b": env["b"][(..., *extra)], "h": env["h"][(..., *extra)]}
        shape = []
        for n, p in enumerate(positions):
            lo, hi = ranges[p]
            grid[p] = np.arange(lo, hi + 1).reshape([-1 if m == n else 1 for m in range(len(positions))])
            shape.append(hi - lo + 1)
        values = np.broadcast_to(eval_numpy(e.args[0], grid, captures),
                                 env["b"].shape[:1] + env["h"].shape[1:] + tuple(shape))
        reduced = tuple(range(-len(positions), 0))
        name = f"tile_reduction_{len(env)}"
        env[name] = values.min(axis=reduced) if which == "min" else values.max(axis=reduced)
        if axis == "tile" and e.args[0] in stops:
            floor, ceiling = stops[e.args[0]]
            met = (values.min(axis=reduced) <= floor) & (values.max(axis=reduced) >= ceiling)
            env[name] = np.where(met, floor if which == "min" else ceiling, env[name])
        return ir.Var("i32", name)
    if isinstance(e, ir.Op):
        return ir.Op(e.ty, e.op, tuple(_reduce_tiles(a, env, captures, ranges, stops) for a in e.args))
    return e


def fp8_gemm(kernel: ir.Kernel, a, sa, b, sb, group=None, count=None, c=None, arch="sm_90a"):
    """a, b: float32 arrays holding the e4m3 values; scales as from kdsl.fp8 (numpy, logical
    shapes). Returns float32 out; rows a grouped kernel must leave alone are NaN. c: out's
    values before the call, for a kernel that accumulates (out = c + a . b^T). Tiles are the
    ones the compiled kernel picks for this shape on the target's SM count."""
    grouping = kernel.attr("grouping")
    M, N, K = a.shape[-2], b.shape[-2], a.shape[-1]
    G = b.shape[0] if grouping != "dense" else 1
    low = pipeline.lower(kernel.with_attrs(shape=[M, N, K, G]), get_target(arch), 0)
    bm, bn = low.attr("tile_m"), low.attr("tile_n")
    out = _fp8_tiles(grouping, a, sa, b, sb, group, count, bm, bn)
    if c is not None:  # the kernel adds its fp32 total into out; rows it leaves alone stay NaN here
        out = (np.asarray(c, np.float32) + out).astype(np.float32)
    return out


def _fp8_tiles(grouping, a, sa, b, sb, group, count, bm, bn):
    if grouping == "masked":
        rows = [int(min(max(count[g], 0), a.shape[1])) for g in range(a.shape[0])]  # as the kernel clamps
        return np.stack([_gemm_tiles(a[g], sa[g], b[g], sb[g], bm, bn, rows=rows[g]) for g in range(a.shape[0])])
    if grouping == "contiguous":
        out = np.full((a.shape[0], b.shape[1]), np.nan, np.float32)
        for g in range(b.shape[0]):
            sel = group == g
            if sel.any():
                out[sel] = _gemm_tiles(a[sel], sa[sel], b[g], sb[g], bm, bn)
        return out
    return _gemm_tiles(a, sa, b, sb, bm, bn)


def _gemm_tiles(a, sa, b, sb, bm, bn, rows=None):
    M, K = a.shape
    N = b.shape[0]
    rows = M if rows is None else rows
    out = np.full((M, N), np.nan, np.float32)
    for m0 in range(0, rows, bm):
        m1 = min(m0 + bm, rows)
        for n0 in range(0, N, bn):
            n1 = min(n0 + bn, N)
            total = np.zeros((m1 - m0, n1 - n0), np.float32)
            for kb in range(K // 128):  # promotion interval: one 128-deep K block
                ks = slice(kb * 128, kb * 128 + 128)
                block = a[m0:m1, ks] @ b[n0:n1, ks].T
                total += block * sa[m0:m1, kb:kb + 1] * sb[np.arange(n0, n1) // 128, kb][None, :]
            out[m0:m1, n0:n1] = total
    return out


def attention_backward(kernel: ir.Kernel, q, k, v, dout, lse, delta, captures=None, scale=None, arch="sm_90a"):
    """(dq, dk, dv, dcaps) float32 as the target's backward kernel (codegen/emit_backward.py backward_plan)
    computes them: tiles of 64 queries by its keys per CTA, classed by the tile predicates (every
    tile partial where they need the runtime tile summary), the per-element mask on partial
    tiles only, P = exp(g(s) - lse) with the score
    as written, dS = P (dP - delta) g'(s) scale (passes/score_grad.py), P and dS rounded to the
    input type for their products, fp32 sums. lse and delta as the autograd function passes
    them (the forward's lse; rowsum(dout * out) less the lse's own gradient).
    dcaps: for each captured float tensor the score loads differentiably (passes/score_grad.py
    capture_grads), its gradient: P (dP - delta) times the score's derivative in the loaded
    value, summed in fp32 over the kept elements into the entry each one read."""
    from .codegen.emit_backward import backward_kernel, backward_plan
    from .passes import mask_analysis, score_grad, tiling
    captures = captures or {}
    B, H, M, D = q.shape
    Hkv, N, Dv = k.shape[1], k.shape[2], v.shape[3]
    target = get_target(arch)
    low = backward_kernel(pipeline.lower(kernel, target, D, Dv), target)  # its key bounds on its own key tiles
    plan = backward_plan(D, Dv, target)
    tm, tn = tiling.BACKWARD_TILE, plan.keys
    dims = {n: {"q": q, "k": k, "v": v, **captures}[t].shape[axis] for n, (t, axis) in kernel.dims.items()}
    scale = np.float32(eval_scalar(kernel.func("scale"), dims) if scale is None else scale)
    elem, group = kernel.tensor("q").dtype, H // Hkv
    kv_head = np.arange(H) // group
    env = {**dims, "scale": scale, "b": np.arange(B).reshape(B, 1, 1, 1), "h": np.arange(H).reshape(1, H, 1, 1),
           "q": np.arange(M).reshape(1, 1, M, 1), "kv": np.arange(N).reshape(1, 1, 1, N)}
    env.update(qf=env["q"].astype(np.float32), kvf=env["kv"].astype(np.float32),
               dqkf=(env["q"] - env["kv"]).astype(np.float32))
    s = np.einsum("bhmd,bhnd->bhmn", q, k[:, kv_head], dtype=np.float32) * scale
    env["s"] = s
    score = low.func("score") or ir.Var("f32", "s")
    with np.errstate(all="ignore"):  # masked elements may take a function outside its domain
        g = np.broadcast_to(eval_numpy(score, env, captures, np.float32), s.shape)
        dg = np.broadcast_to(eval_numpy(score_grad.score_grad(low), env, captures, np.float32), s.shape)
    keep = np.ones(s.shape, bool)
    mask = low.func("mask")
    if mask is not None:
        per_element = np.broadcast_to(eval_numpy(mask, env, captures), s.shape)
        summarised, stops = bool(mask_analysis.summary_slots(low)), summary_stops(low)
        # the wgmma backwards keep a partial tile's keys by the interval where the mask reads data
        # (attention_bwd_wgmma.cuh kGuardByKeys) and tile_keys holds: so does this walk
        by_bounds = plan.body != "attention_bwd" and low.func("kv_lo") is not None and \
            any(isinstance(n, ir.Load) for n in ir.walk(mask))
        for q0 in range(0, M, tm):
            for k0 in range(0, N, tn):
                q1, k1 = min(q0 + tm, M) - 1, min(k0 + tn, N) - 1
                cls = np.full((B, H), "partial") if summarised else \
                    _classify(low.func("tile_empty"), low.func("tile_full"), dims, captures, B, H, q0, q1, k0, k1,
                              stops)
                block = per_element[:, :, q0:q1 + 1, k0:k1 + 1]
                if by_bounds:
                    row = {**env, "q": env["q"][:, :, q0:q1 + 1], "k0": k0}
                    cols = env["kv"][..., k0:k1 + 1]
                    keys = (cols >= eval_numpy(low.func("kv_lo"), row, captures)) & \
                        (cols <= eval_numpy(low.func("kv_hi"), row, captures))
                    by_keys = np.ones((B, H), bool) if low.func("tile_keys") is None else \
                        _holds(low.func("tile_keys"), dims, captures, B, H, q0, q1, k0, k1, stops)
                    block = np.where(by_keys[..., None, None], keys, block)
                keep[:, :, q0:q1 + 1, k0:k1 + 1] = np.where((cls == "full")[..., None, None], True, block) & \
                    (cls != "empty")[..., None, None]
    live = keep & np.isfinite(lse)[..., None]
    with np.errstate(over="ignore", invalid="ignore"):
        p = np.where(live, np.exp(np.where(live, g - lse[..., None], 0.0)), 0.0).astype(np.float32)
        dp = np.einsum("bhmd,bhnd->bhmn", dout, v[:, kv_head], dtype=np.float32)
        ds = np.where(p != 0, p * (dp - delta[..., None]) * dg * scale, 0.0).astype(np.float32)
        dg_nat = np.where(p != 0, p * (dp - delta[..., None]), 0.0).astype(np.float32)  # d loss / d score
    dcaps = _capture_grads(low, env, captures, dg_nat, live)
    p, ds = round_float32(p, elem), round_float32(ds, elem)
    dq = np.einsum("bhmn,bhnd->bhmd", ds, k[:, kv_head], dtype=np.float32)
    # each k/v head sums the gradients of the query heads that read it
    dk = np.einsum("bhmn,bhmd->bhnd", ds, q, dtype=np.float32).reshape(B, Hkv, group, N, D).sum(2)
    dv = np.einsum("bhmn,bhmd->bhnd", p, dout, dtype=np.float32).reshape(B, Hkv, group, N, Dv).sum(2)
    return dq, dk, dv, dcaps


def _capture_grads(low: ir.Kernel, env: dict, captures: dict, dg_nat, live) -> dict:
    """{captured tensor: its gradient} from d loss / d score at every element (0 where not
    kept): each differentiable load adds dg_nat times the score's derivative in it to the
    entry it read, at the kept elements only (elsewhere its index need not be in range)."""
    from .passes import score_grad
    grads = {}
    for load, d in score_grad.capture_grads(low):
        with np.errstate(all="ignore"):
            dload = np.broadcast_to(eval_numpy(d, env, captures, np.float32), dg_nat.shape)
        values = (dg_nat * dload)[live]
        index = tuple(np.broadcast_to(np.asarray(eval_numpy(i, env, captures)), dg_nat.shape)[live].astype(np.int64)
                      for i in load.indices)
        grad = grads.setdefault(load.tensor, np.zeros(captures[load.tensor].shape, np.float32))
        np.add.at(grad, index, values.astype(np.float32))
    return grads
