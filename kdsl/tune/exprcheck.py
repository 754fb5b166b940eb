"""The guard's cheap semantic check: a candidate kernel's blocks against the ORIGINAL
program, evaluated in float64 with numpy on whole index grids (every b, h, q, kv of a few
shapes sized so the grid holds 0, 1, tile - 1, tile, tile + 1, the last row and column of a
partial tile, and negative and positive q - kv), at the default scale and at another one.

- score_log2 (what the kernel evaluates) must equal log2(e) * score(s = qk * scale) of the
  original wherever the original mask keeps the element: within 1e-3 + 1e-5 |ref| in the log2
  domain, non-finite values identically; a kernel with no lse output may differ by a constant
  per query row (softmax does not see it), bounded by twice the row's magnitude + 1024;
- mask must equal the original mask everywhere;
- tile_empty may hold only for a tile the original mask removes entirely, tile_full only for
  one it keeps entirely: every tile of the candidate's tile sizes and of other legal ones;
- every load is proven in bounds (the runtime's own interval check, on every function).

Random qk include zeros and values far out; captured tensors are random as kdsl check makes
them. Returns None, or the reason the candidate is wrong.
"""
from __future__ import annotations

import numpy as np

from .. import ir
from ..backends import Numpy
from ..cases import AttentionCase, attention_dims, attention_inputs, conform
from ..errors import KdslError
from ..passes import pipeline
from ..passes.exp2_fold import LOG2E
from ..runtime.bounds import check_capture_indices
from ..semantics import eval_array, eval_scalar

ABS_TOL, REL_TOL = 1e-3, 1e-5
OTHER_TILES = ((64, 64), (128, 128), (192, 176), (16, 32))  # predicates must not rely on one tile size
MAX_MASK_LEN = 1536


def check(original: ir.Kernel, candidate: ir.Kernel, target, seed: int) -> str | None:
    if original.kind != "attention":
        return None
    rng = np.random.default_rng(seed)
    be = Numpy(np.float64)
    for d in pipeline.head_dims(candidate):
        low = pipeline.lower(candidate, target, d)
        tm, tn = low.attr("tile_m"), low.attr("tile_n")
        for shape in _shapes(original, tm, tn, d):
            case = conform(original, shape)
            problem = _check_case(original, low, case, be, rng, [(tm, tn), *OTHER_TILES])
            if problem:
                return f"{problem} (B={case.B} H={case.H} M={case.M} N={case.N} D={case.D})"
    return None


def _shapes(k: ir.Kernel, tm: int, tn: int, d: int) -> list[AttentionCase]:
    gqa = k.tensor("k").shape[1] != k.tensor("q").shape[1]
    h, hkv = (4, 2) if gqa else (2, 2)
    # Masks with long reach (windows, strides) need lengths past their constants.
    mask = k.func("mask")
    reach = max([0] + [abs(c.value) for c in ir.walk(mask) if isinstance(c, ir.Const) and c.ty == "i32"]
                if mask is not None else [0])
    long = min(MAX_MASK_LEN, max(2 * tm + 3, reach + 2 * tn + 5))
    shapes = [AttentionCase(2, h, hkv, 2 * tm + 3, 2 * tn + 5, d), AttentionCase(1, h, hkv, 1, tn + 1, d),
              AttentionCase(1, h, hkv, tm + 1, 1, d)]
    if long > 2 * tm + 3:
        shapes.append(AttentionCase(1, 1 if not gqa else 2, 1, long, long + 7, d))
    return shapes


def _check_case(original, low, case, be, rng, tile_sizes) -> str | None:
    _, _, _, caps = attention_inputs(original, case, be)
    caps = {n: np.asarray(c, np.float64 if c.dtype.kind == "f" else np.int64) for n, c in caps.items()}
    dims = attention_dims(original, case)
    try:
        check_capture_indices(low, dims, original.name)
    except KdslError as e:
        return f"reads out of bounds: {e}"
    B, H, M, N = case.B, case.H, case.M, case.N
    grid = {**dims, "b": np.arange(B).reshape(B, 1, 1, 1), "h": np.arange(H).reshape(1, H, 1, 1),
            "q": np.arange(M).reshape(1, 1, M, 1), "kv": np.arange(N).reshape(1, 1, 1, N),
            "qf": np.arange(M, dtype=np.float32).reshape(1, 1, M, 1),
            "kvf": np.arange(N, dtype=np.float32).reshape(1, 1, 1, N),
            # passes/tile_blocks.py's key of the tile: its first
            "kvt": np.arange(N).reshape(1, 1, 1, N) // (low.attr("tile_n") or 1) * (low.attr("tile_n") or 1),
            "dqkf": (np.arange(M).reshape(1, 1, M, 1) - np.arange(N).reshape(1, 1, 1, N)).astype(np.float32)}
    shape = (B, H, M, N)
    with np.errstate(all="ignore"):
        try:
            keep = _keep(original, grid, caps, be, shape)
            if low.func("mask") is not None:
                got = np.broadcast_to(np.asarray(eval_array(low.func("mask"), grid, caps, be), bool), shape)
                if not np.array_equal(got, keep):
                    return _first("mask differs from the original", got != keep)
            if low.func("tile_empty") is not None:
                for tm, tn in tile_sizes:
                    problem = _tiles(low, grid, caps, be, keep, tm, tn)
                    if problem:
                        return problem
            default = float(eval_scalar(original.func("scale"), dims))
            for scale in (default, float(rng.uniform(0.02, 2.0))):
                problem = _score(original, low, grid, caps, be, keep, shape, scale, case.D, rng)
                if problem:
                    return problem
        except (ArithmeticError, ValueError, IndexError, TypeError) as e:  # no value: the candidate is refused
            return f"evaluation failed: {type(e).__name__}: {e}"
    return None


def _keep(original, grid, caps, be, shape) -> np.ndarray:
    m = original.func("mask")
    if m is None:
        return np.ones(shape, bool)
    return np.broadcast_to(np.asarray(eval_array(m, grid, caps, be), bool), shape)


def _score(original, low, grid, caps, be, keep, shape, scale, d, rng) -> str | None:
    qk = rng.standard_normal(shape) * np.sqrt(d)
    special = rng.random(shape)
    qk = np.where(special < 0.04, 0.0, np.where(special > 0.97, 40.0 * qk, qk))
    env = {**grid, "qk": qk, "scale": scale, "scale_log2": scale * LOG2E, "s": qk * scale}
    score = original.func("score")
    ref = LOG2E * (np.broadcast_to(eval_array(score, env, caps, be), shape) if score is not None else env["s"])
    got = np.broadcast_to(np.asarray(eval_array(low.func("score_log2"), env, caps, be), np.float64), shape)
    finite = np.isfinite(ref) & np.isfinite(got)
    same_special = (ref == got) | (np.isnan(ref) & np.isnan(got))
    bad = keep & ~finite & ~same_special
    if bad.any():
        return _first(f"score_log2 is not finite where the original is (or the reverse), at scale {scale:.4g}", bad)
    diff = np.where(keep & finite, got - ref, 0.0)
    if original.tensor("lse") is None:  # softmax is blind to a constant per row
        lo = np.where(keep & finite, diff, np.inf).min(-1, keepdims=True)
        hi = np.where(keep & finite, diff, -np.inf).max(-1, keepdims=True)
        shift = np.where(np.isfinite(lo), (lo + hi) / 2, 0.0)
        magnitude = np.where(keep & finite, np.abs(ref), 0.0).max(-1, keepdims=True)
        # ... but a shift far past the row's own values would cost f32 precision in the kernel.
        far = np.abs(shift) > 2 * magnitude + 1024
        if far.any():
            return _first("score_log2 shifts a row far past its own magnitude", np.broadcast_to(far, shape))
        diff = diff - shift
    wrong = keep & finite & (np.abs(diff) > ABS_TOL + REL_TOL * np.abs(ref))
    if wrong.any():
        return _first(f"score_log2 differs from log2(e) * score by up to {np.abs(np.where(wrong, diff, 0)).max():.3g}"
                      f" at scale {scale:.4g}", wrong)
    return None


def _tiles(low, grid, caps, be, keep, tm, tn) -> str | None:
    B, H, M, N = keep.shape
    q0, k0 = np.arange(0, M, tm), np.arange(0, N, tn)
    env = {**grid, "q0": q0.reshape(1, 1, -1, 1), "q1": (np.minimum(q0 + tm, M) - 1).reshape(1, 1, -1, 1),
           "k0": k0.reshape(1, 1, 1, -1), "k1": (np.minimum(k0 + tn, N) - 1).reshape(1, 1, 1, -1)}
    shape = (B, H, len(q0), len(k0))
    some = np.logical_or.reduceat(np.logical_or.reduceat(keep, q0, axis=2), k0, axis=3)
    every = np.logical_and.reduceat(np.logical_and.reduceat(keep, q0, axis=2), k0, axis=3)
    empty, full = (np.broadcast_to(np.asarray(eval_array(
        _summarised(low.func(name), grid, caps, be, env, q0, k0, keep.shape), env, caps, be), bool), shape)
        for name in ("tile_empty", "tile_full"))
    if (empty & some).any():
        return _tile("tile_empty holds for a tile with kept elements", empty & some, tm, tn)
    if (full & ~every).any():
        return _tile("tile_full holds for a tile with masked elements", full & ~every, tm, tn)
    return None


def _summarised(pred: ir.Expr, grid: dict, caps: dict, be, env: dict, q0, k0, shape) -> ir.Expr:
    """pred with each tile reduction, (qmin e) ... (tmax e), replaced by a variable bound in env
    to its value on every tile of the grid starting at rows q0 and keys k0: what the GPU's tile
    summary holds (kdsl/attention_summary.cuh), e's min or max over the tile's rows, keys or both."""
    if isinstance(pred, ir.Op) and pred.op in ir.TILE_REDUCTIONS:
        axis, which = ir.TILE_REDUCTIONS[pred.op]
        fold = np.minimum if which == "min" else np.maximum
        values = np.broadcast_to(np.asarray(eval_array(pred.args[0], grid, caps, be)), shape)
        values = fold.reduceat(values, q0, axis=2) if "q" in ir.TILE_AXES[axis] else values[:, :, :1]
        values = fold.reduceat(values, k0, axis=3) if "kv" in ir.TILE_AXES[axis] else values[:, :, :, :1]
        name = f"tile_reduction_{len(env)}"
        env[name] = values
        return ir.Var("i32", name)
    if isinstance(pred, ir.Op):
        return ir.Op(pred.ty, pred.op, tuple(_summarised(a, grid, caps, be, env, q0, k0, shape) for a in pred.args))
    return pred


def _first(what: str, where: np.ndarray) -> str:
    b, h, q, kv = (int(x) for x in np.argwhere(where)[0])
    return f"{what}: first at b={b} h={h} q={q} kv={kv}"


def _tile(what: str, where: np.ndarray, tm: int, tn: int) -> str:
    b, h, i, j = (int(x) for x in np.argwhere(where)[0])
    return f"{what}: {tm}x{tn} tile at b={b} h={h} rows {i * tm}.. columns {j * tn}.."
