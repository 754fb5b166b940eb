"""Prove, for concrete shapes, that every captured-tensor index stays in bounds.

Interval arithmetic over b in [0, B), h in [0, H), q in [0, M), kv in [0, N): if an index
might leave its axis, the call is refused before launch — never a CUDA fault, never a read
of someone else's memory. Write indices so the bound follows (clamp with min/max)."""
from __future__ import annotations

import math

import numpy

from .. import ir
from ..errors import LaunchError
from ..passes.index_intervals import (MASKED_INDEX, call_ranges, clamped_index, eval_size, interval,
                                      interval_where_kept)
from ..passes.int_signs import POSITIONS, item_level
from ..passes.mask_facts import q_minus_kv_sign
from ..semantics import I32_MAX, I32_MIN, eval_numpy


def _clamped_inner(k: ir.Kernel, fname: str, node: ir.Load, axis: int, idx: ir.Expr) -> ir.Expr | None:
    """X of a score index max(min(X, S - 1), 0) that passes/masked_index.py clamped, else None."""
    if fname != "score" or f"{node.tensor}:{axis}" not in (k.attr(MASKED_INDEX) or ()):
        return None
    return clamped_index(idx)


def check_capture_indices(k: ir.Kernel, dims: dict, kname: str) -> None:
    """Every captured tensor's index in bounds, every integer value within i32 and no divisor
    0 (below)."""
    ranges = call_ranges(k, dims)
    sign = q_minus_kv_sign(k.func("mask")) if k.attr(MASKED_INDEX) else 0
    # Every function the kernel evaluates: score and mask, and the score_log2 and tile
    # predicates an IR file may carry (kdsl tune's output) in their place.
    for fname, e in k.funcs:
        if fname == "scale":
            continue
        for node in ir.walk(e):
            if not isinstance(node, ir.Load):
                continue
            t = k.tensor(node.tensor)
            for axis, (idx, extent) in enumerate(zip(node.indices, t.shape)):
                size = eval_size(extent, dims)
                inner = _clamped_inner(k, fname, node, axis, idx)
                if inner is not None:  # clamped in the kernel: X itself wherever the mask keeps
                    shown, where, (lo, hi) = inner, " where the mask keeps the element,", \
                        interval_where_kept(inner, k.func("mask"), sign, ranges)
                else:
                    shown, where, (lo, hi) = idx, "", interval(idx, ranges)
                if lo < 0 or hi >= size:
                    text = ir.format_expr(shown, k.param_names(fname))
                    hint = _other_positions_axis(k, idx, t, axis, text) or _clamp_hint(lo, hi, size)
                    raise LaunchError(
                        f"{kname}: in {fname}(), index {axis} of '{node.tensor}' ({text}) {_out_of(lo, hi)}{where} "
                        f"for these shapes, but that axis has size {size}; {hint}")
    check_integer_ranges(k, ranges, kname)
    check_divisors(k, ranges, kname)


def _out_of(lo, hi) -> str:
    """What an index's interval says: the side that cannot be bounded (log2 of a value that may be
    0 or less is NaN, an i32 element anything), or its range."""
    if not math.isfinite(lo) and not math.isfinite(hi):
        return "cannot be bounded"
    if not math.isfinite(lo):
        return f"cannot be bounded below (at most {hi})"
    if not math.isfinite(hi):
        return f"cannot be bounded above (at least {lo})"
    return f"ranges over [{lo}, {hi}]"


# a position and the size of the other one's axis: the query's is M, the key's N
# (and the operands whose length that size is)
_OTHER_AXIS = {"q": ("N", "M", "keys", "M <= N", ("q",)), "kv": ("M", "N", "queries", "N <= M", ("k", "v"))}


def _other_positions_axis(k: ir.Kernel, idx: ir.Expr, t: ir.Tensor, axis: int, text: str) -> str | None:
    """The hint where a position itself indexes an axis as long as the other position's
    (`img[b, i]` with img: i32[B, N], as self-attention writes it): a clamp would change what the
    kernel means, so the message says which calls it takes and what to declare instead: the
    queries (or keys and values) at the other length, which makes M and N one size (and `kdsl
    check` draw them equal), or a tensor of the position's own."""
    extent = t.shape[axis]
    if not (isinstance(idx, ir.Var) and idx.name in _OTHER_AXIS and isinstance(extent, ir.Var)):
        return None
    other, own, what, takes, operands = _OTHER_AXIS[idx.name]
    if extent.name != other:
        return None
    shape = ", ".join(own if n == axis else ir.format_expr(x) for n, x in enumerate(t.shape))
    same = "; ".join(_declared(k.tensor(n), own, other) for n in operands if k.tensor(n) is not None)
    return (f"the position {text} indexes an axis of {other} {what}, so the kernel takes calls with {takes} only; "
            f"for self-attention alone declare {same}, so every call has M = N; for others give that position a "
            f"tensor of its own ({t.name}_{text}: {t.dtype}[{shape}]), or clamp it, e.g. min({text}, {other} - 1)")


def _declared(t: ir.Tensor, old: str, new: str) -> str:
    """t's declaration with its size `old` renamed `new` (`q: bf16[B, H, N, D]`)."""
    dims = ", ".join(new if isinstance(x, ir.Var) and x.name == old else ir.format_expr(x) for x in t.shape)
    return f"{t.name}: {t.dtype}[{dims}]"


def _clamp_hint(lo, hi, size) -> str:
    """The clamp the index needs, on the side(s) it may leave the axis: an index clamped above
    only is still refused where it may be negative, and the message says so."""
    below, above = lo < 0, hi >= size
    if below and above:
        return f"clamp it, e.g. max(min(..., {size - 1}), 0)"
    if below:
        return ("clamp it below, e.g. max(..., 0) (the kernel evaluates the score and mask at every "
                "element of a tile, also those the mask drops)")
    return f"clamp it above, e.g. min(..., {size - 1})"


def check_divisors(k: ir.Kernel, ranges: dict, kname: str) -> None:
    """Refuse a call where an integer // or % divides by zero for these shapes: Python raises
    there, and the kernel's 0 (docs/language.md) would answer silently what is almost surely a
    mistake (`(i - j) % h` at head 0). A divisor of the batch and head indices and the sizes is
    judged exactly, at every (b, h) of the call where the `where`s it sits under choose it; one
    of the positions by its interval, outside any `where` (inside one, the condition is taken
    to guard it); one read from data is the caller's, as its range is."""
    for fname, e in k.funcs:
        if fname == "scale":
            continue
        for node, guards in _divisions(e, ()):
            divisor = node.args[1]
            kind = _kind(divisor, ranges)
            if isinstance(divisor, ir.Const) or kind == "data":
                continue
            lo, hi = interval(divisor, ranges)
            if lo > 0 or hi < 0:
                continue
            if kind == "item":
                at = _zero_item(divisor, guards, ranges)
                if at is None:
                    continue
                why = f"is 0 at {at}"
            elif guards:
                continue
            else:
                why = f"ranges over [{lo}, {hi}]"
            names = k.param_names(fname)
            raise LaunchError(
                f"{kname}: in {fname}(), {ir.format_expr(node, names)} divides by "
                f"{ir.format_expr(divisor, names)}, which {why} for these shapes (Python raises "
                f"ZeroDivisionError there); keep the divisor off 0, e.g. with max(..., 1), or choose "
                f"another value there with where(...)")


def _divisions(e: ir.Expr, guards: tuple):
    """Every integer // and % of e with the conditions under which it is evaluated: the
    `where`s above it (a condition, or its negation on the other branch)."""
    if isinstance(e, ir.Op) and e.op in ("floordiv", "mod") and e.ty == "i32":
        yield e, guards
    for i, a in enumerate(getattr(e, "args", ()) or getattr(e, "indices", ())):
        if isinstance(e, ir.Op) and e.op == "where" and i > 0:
            cond = e.args[0] if i == 1 else ir.Op("bool", "not", (e.args[0],))
            yield from _divisions(a, guards + (cond,))
        else:
            yield from _divisions(a, guards)


def _kind(e: ir.Expr, ranges: dict) -> str:
    """'item': e reads the batch and head indices and the sizes at most (int_signs.item_level, as
    the passes judge it); 'positions': the query and key positions too; 'data': a captured tensor
    or the score (no bound to judge)."""
    if item_level(e):
        return "item"
    if any(isinstance(n, ir.Load) or (isinstance(n, ir.Op) and n.op in ir.TILE_REDUCTIONS) for n in ir.walk(e)):
        return "data"
    names = {n.name for n in ir.walk(e) if isinstance(n, ir.Var)}
    return "positions" if names <= {"b", "h", *POSITIONS, *_sizes(ranges)} else "data"


def _sizes(ranges: dict) -> dict:
    return {n: r[0] for n, r in ranges.items() if n not in ("b", "h", *POSITIONS) and isinstance(r, tuple)}


def _zero_item(divisor: ir.Expr, guards: tuple, ranges: dict) -> str | None:
    """The first (b, h) of the call where the divisor is 0 and every guard of the batch and
    head indices and the sizes holds (one that reads more may hold anywhere), as text; None if
    there is none."""
    (_, b_hi), (_, h_hi) = ranges["b"], ranges["h"]
    env = _sizes(ranges)
    env.update(b=numpy.arange(b_hi + 1).reshape(-1, 1), h=numpy.arange(h_hi + 1).reshape(1, -1))
    zero = numpy.broadcast_to(eval_numpy(divisor, env, {}) == 0, (b_hi + 1, h_hi + 1))
    for g in guards:
        if _kind(g, ranges) == "item":
            zero = zero & eval_numpy(g, env, {})
    if not zero.any():
        return None
    b, h = (int(x) for x in numpy.argwhere(zero)[0])
    used = lambda name: any(ir.uses(e, name) for e in (divisor, *guards))  # noqa: E731
    return ", ".join(f"{n} = {v}" for n, v in (("b", b), ("h", h)) if used(n)) or "every (b, h)"


def check_integer_ranges(k: ir.Kernel, ranges: dict, kname: str) -> None:
    """Refuse a call where an integer value of the positions and sizes leaves i32 for these
    shapes: the kernel computes ints in 32 bits, the reference exactly, so `(i * 7919 + j *
    104729) % 10` at N = 32768 would wrap on the GPU alone (a silent wrong answer). The first
    such value (innermost) is named. A value computed from a captured tensor's elements has
    no bound to judge: the data's range is the caller's."""
    for fname, e in k.funcs:
        if fname == "scale":
            continue
        for node in ir.walk_operands_first(e):  # the innermost value that leaves i32 first
            if not (isinstance(node, ir.Op) and node.ty == "i32" and node.op != "int"):
                continue
            lo, hi = interval(node, ranges)
            if math.isfinite(lo) and math.isfinite(hi) and not I32_MIN <= lo <= hi <= I32_MAX:
                text = ir.format_expr(node, k.param_names(fname))
                raise LaunchError(
                    f"{kname}: in {fname}(), the integer {text} ranges over [{lo}, {hi}] for these shapes, "
                    f"beyond the 32-bit ints the kernel computes in ({I32_MIN} .. {I32_MAX}); keep it within "
                    f"them, e.g. take a factor modulo first or compute it as a float")
