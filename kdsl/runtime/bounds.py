"""Prove, for concrete shapes, that every captured-tensor index stays in bounds.

Interval arithmetic over b in [0, B), h in [0, H), q in [0, M), kv in [0, N): if an index
might leave its axis, the call is refused before launch — never a CUDA fault, never a read
of someone else's memory. Write indices so the bound follows (clamp with min/max)."""
from __future__ import annotations

import math

import numpy

from .. import ir
from ..errors import LaunchError
from ..passes.int_signs import POSITIONS, item_level
from ..passes.mask_facts import q_minus_kv_sign
from ..semantics import I32_MAX, I32_MIN, eval_numpy, scalar_op

INF = math.inf
UNKNOWN = (-INF, INF)
# ranges' entry holding the range of each captured tensor whose element type bounds it: a u8
# id lies in [0, 255] however it was drawn (not a name a program can give a dim)
ELEMENTS = "<elements>"
ELEMENT_RANGES = {name: (int(numpy.iinfo(t).min), int(numpy.iinfo(t).max))
                  for name, t in (("u8", numpy.uint8), ("i8", numpy.int8))}


def interval(e: ir.Expr, ranges: dict) -> tuple:
    """[lo, hi] that e's value lies in; an unknown side is infinite, so a clamp bounds even a
    value read from a captured tensor: min(max(ids[b, i], 0), T - 1) lies in [0, T - 1]."""
    if isinstance(e, ir.Const):
        return (e.value, e.value) if e.ty == "i32" else UNKNOWN
    if isinstance(e, ir.Var):
        return ranges.get(e.name, UNKNOWN)
    if isinstance(e, ir.Load):  # an element: what its type allows (an i32 one: anything)
        return ranges.get(ELEMENTS, {}).get(e.tensor, UNKNOWN) if e.ty == "i32" else UNKNOWN
    if isinstance(e, ir.Op) and e.op == "int" and e.args[0].ty == "i32":  # int() of an integer
        return interval(e.args[0], ranges)
    if isinstance(e, ir.Op) and e.op == "int":  # truncation toward zero, saturating: monotone
        f = float_interval(e.args[0], ranges)
        if f is None:
            return UNKNOWN
        lo, hi = (min(max(math.trunc(x), I32_MIN), I32_MAX) if math.isfinite(x) else x for x in f)
        return (I32_MAX if lo == INF else lo, I32_MIN if hi == -INF else hi)
    if not isinstance(e, ir.Op) or e.ty != "i32":
        return UNKNOWN  # loads and anything not integer
    if e.op == "where":
        a, b = interval(e.args[1], ranges), interval(e.args[2], ranges)
        return (min(a[0], b[0]), max(a[1], b[1]))
    args = [interval(a, ranges) for a in e.args]
    finite = all(math.isfinite(x) for a in args for x in a)
    if e.op in ("add", "sub", "min", "max"):  # safe with infinities: lo is never +inf, hi never -inf
        (al, ah), (bl, bh) = args
        if e.op == "add":
            return (al + bl, ah + bh)
        if e.op == "sub":
            return (al - bh, ah - bl)
        f = min if e.op == "min" else max
        return (f(al, bl), f(ah, bh))
    if e.op == "neg":
        return (-args[0][1], -args[0][0])
    if e.op == "abs":
        lo, hi = args[0]
        return (0 if lo <= 0 <= hi else min(abs(lo), abs(hi)), max(abs(lo), abs(hi)))
    if e.op == "mul" and finite:
        (al, ah), (bl, bh) = args
        prods = [al * bl, al * bh, ah * bl, ah * bh]
        return (min(prods), max(prods))
    if e.op in ("floordiv", "mod") and args[1][0] > 0:  # a positive divisor: `i % W` lies in [0, W - 1]
        (al, ah), (bl, bh) = args
        if e.op == "mod":
            return (al % bl, ah % bl) if finite and bl == bh and al // bl == ah // bl else (0, bh - 1)
        # floor(a / d) rises with a, and falls with d where a >= 0 (rises where a < 0): its extremes
        # are at the corners
        quotients = [_floor_quotient(a, d) for a in (al, ah) for d in (bl, bh)]
        return (min(quotients), max(quotients))
    return UNKNOWN


def _floor_quotient(a, d):
    """a // d for d >= 1, either side possibly infinite: an infinite divisor leaves 0 of a
    finite a >= 0 and -1 of one below 0."""
    if not math.isfinite(a):
        return a
    if not math.isfinite(d):
        return 0 if a >= 0 else -1
    return a // d


# How far the GPU's float ops may land from the exact value, as a relative and an absolute
# part (docs/language.md, "Precision of the float functions"), with room to spare: an f32
# rounding is 2^-24, tanh.approx 2^-11, lg2.approx 2^-22 absolute, sin.approx 2^-20.
ROUNDING = (2.0 ** -20, 0.0)
APPROX = (2.0 ** -10, 2.0 ** -18)
MONOTONE = {"exp": math.exp, "exp2": lambda x: 2.0 ** x, "tanh": math.tanh,
            "sigmoid": lambda x: 0.5 + 0.5 * math.tanh(x / 2)}
SMALLEST_NORMAL = 2.0 ** -126  # below it the approximations flush to zero


def float_interval(e: ir.Expr, ranges: dict):
    """[lo, hi] (either side possibly infinite) that the f32 value of e lies in on the GPU,
    or None where it might be NaN or nothing is known: a tensor's element, the score. What
    int(...) of a float index needs: int(4.0 * log2(float(abs(i - j) + 1))) is at least 0."""
    if isinstance(e, ir.Const):  # folded in double precision; the kernel holds the nearest f32
        with numpy.errstate(over="ignore"):  # past f32's range: inf
            v = float(numpy.float32(e.value))
        return None if v != v else (v, v)
    if isinstance(e, ir.Var) and e.name in ("qf", "kvf", "dqkf"):  # float(q), float(kv), float(q - kv)
        a, b = ranges["q"], ranges["kv"]
        return (float(a[0]), float(a[1])) if e.name == "qf" else (float(b[0]), float(b[1])) \
            if e.name == "kvf" else (float(a[0] - b[1]), float(a[1] - b[0]))
    if not isinstance(e, ir.Op) or e.ty != "f32":
        return None
    if e.op == "float":
        lo, hi = interval(e.args[0], ranges)
        return _widen(float(lo), float(hi), ROUNDING)
    args = [float_interval(a, ranges) for a in e.args[1:] if e.op == "where"] if e.op == "where" else \
        [float_interval(a, ranges) for a in e.args]
    if e.op in ("min", "max"):  # fminf / fmaxf: a NaN operand yields the other
        (a, b), pick = args, (min if e.op == "min" else max)
        if a is None and b is None:
            return None
        if a is None or b is None:
            known = a or b
            return (-INF, known[1]) if e.op == "min" else (known[0], INF)
        return (pick(a[0], b[0]), pick(a[1], b[1]))
    if any(a is None for a in args):
        return None
    if e.op == "where":
        return (min(args[0][0], args[1][0]), max(args[0][1], args[1][1]))
    if e.op == "neg":
        return (-args[0][1], -args[0][0])
    if e.op == "abs":
        lo, hi = args[0]
        return (0.0 if lo <= 0 <= hi else min(abs(lo), abs(hi)), max(abs(lo), abs(hi)))
    if e.op in ("add", "sub"):
        (al, ah), (bl, bh) = args
        if e.op == "sub":
            bl, bh = -bh, -bl
        if (al == -INF or bl == -INF) and (ah == INF or bh == INF):
            return None  # inf - inf
        return _widen(al + bl, ah + bh, ROUNDING)
    if e.op == "mul":
        (al, ah), (bl, bh) = args
        if (_infinite(al, ah) and bl <= 0 <= bh) or (_infinite(bl, bh) and al <= 0 <= ah):
            return None  # 0 * inf
        prods = [x * y for x in (al, ah) for y in (bl, bh)]
        return _widen(min(prods), max(prods), ROUNDING)
    if e.op == "div":
        (al, ah), (bl, bh) = args
        if bl <= 0 <= bh or _infinite(al, ah) or _infinite(bl, bh) or max(abs(bl), abs(bh)) > 2.0 ** 126:
            return None  # x / 0, and __fdividef's 0 for a huge divisor
        quots = [x / y for x in (al, ah) for y in (bl, bh)]
        return _widen(min(quots), max(quots), ROUNDING)
    lo, hi = args[0]  # the one-argument functions
    if e.op in MONOTONE:
        return _widen(_apply(MONOTONE[e.op], lo), _apply(MONOTONE[e.op], hi), APPROX)
    if e.op in ("log", "log2") and lo >= 0:
        f = math.log if e.op == "log" else math.log2
        # (a log of exactly 0, `log2(float(i) * (0.5 - 0.5))`, is -inf: math.log raised, an internal error)
        return _widen(-INF if lo < SMALLEST_NORMAL else f(lo), f(hi) if hi > 0 else -INF, APPROX)
    if e.op == "sqrt" and lo >= 0:
        return _widen(math.sqrt(lo), math.sqrt(hi), ROUNDING)
    if e.op in ("sin", "cos") and not _infinite(lo, hi):
        return _widen(-1.0, 1.0, APPROX)
    return None  # rsqrt, tan, and functions outside their domain


def _infinite(lo, hi):
    return lo == -INF or hi == INF


def _apply(f, x):
    try:
        return f(x)
    except OverflowError:
        return INF


def _widen(lo, hi, error):
    """[lo, hi] grown by the error an op may add, past f32's range as +-inf (an op's result
    there overflows); an infinite side stays as it is."""
    rel, absolute = error
    return (_f32(lo - abs(lo) * rel - absolute if math.isfinite(lo) else lo),
            _f32(hi + abs(hi) * rel + absolute if math.isfinite(hi) else hi))


FLT_MAX = 3.4028234663852886e38


def _f32(x: float) -> float:
    """x as an f32 bound: beyond the largest finite f32 it is +-inf (an op's result there overflows,
    and 0 * (1e30 * 1e30) is NaN on the GPU, where the constant is inf)."""
    return math.copysign(INF, x) if abs(x) > FLT_MAX else x


def _ranges(k: ir.Kernel, dims: dict) -> dict:
    """The interval of every variable a score or mask reads, for concrete shapes."""
    ranges = {n: (v, v) for n, v in dims.items()}
    ranges.update(b=(0, dims_of(k, dims, "q", 0) - 1), h=(0, dims_of(k, dims, "q", 1) - 1),
                  q=(0, dims_of(k, dims, "q", 2) - 1), kv=(0, dims_of(k, dims, "k", 2) - 1))
    ranges.update(q0=ranges["q"], q1=ranges["q"], k0=ranges["kv"], k1=ranges["kv"], kvt=ranges["kv"])
    ranges[ELEMENTS] = {t.name: ELEMENT_RANGES[t.dtype] for t in k.tensors if t.dtype in ELEMENT_RANGES}
    return ranges


# attr: the score's load indices passes/masked_index.py clamped ("tensor:axis"), each in range
# only where the mask keeps the element
MASKED_INDEX = "masked_index"


def sample_ranges(k: ir.Kernel, sizes: dict) -> dict:
    """_ranges at a sample shape: the named sizes, 64 for every other dim."""
    return _ranges(k, {name: sizes.get(name, 64) for name in k.dims})


def by_difference(e: ir.Expr) -> ir.Expr | None:
    """e with q - kv read as the variable dqk (kv - q as -dqk), or None where e reads q or kv
    otherwise or loads anything (an index of data: its range is the caller's)."""
    out = ir.as_difference(e, "q", "kv", ir.Var("i32", "dqk"))
    if any(isinstance(n, ir.Load) or (isinstance(n, ir.Var) and n.name in ("q", "kv", "qf", "kvf", "dqkf"))
           for n in ir.walk(out)):
        return None
    return out


def interval_where_kept(idx: ir.Expr, sign: int, ranges: dict) -> tuple:
    """idx's interval over the elements a mask keeps that fixes q - kv's sign (+1: q >= kv, -1:
    q <= kv); idx reads the positions only through q - kv (by_difference), else UNKNOWN."""
    d = by_difference(idx)
    if d is None or sign == 0:
        return UNKNOWN
    (q_lo, q_hi), (kv_lo, kv_hi) = ranges["q"], ranges["kv"]
    dqk = (max(0, q_lo - kv_hi), q_hi - kv_lo) if sign > 0 else (q_lo - kv_hi, min(0, q_hi - kv_lo))
    return interval(d, {**ranges, "dqk": dqk})


def _clamped_inner(k: ir.Kernel, fname: str, node: ir.Load, axis: int, idx: ir.Expr) -> ir.Expr | None:
    """X of a score index max(min(X, S - 1), 0) that passes/masked_index.py clamped, else None."""
    if fname != "score" or f"{node.tensor}:{axis}" not in (k.attr(MASKED_INDEX) or ()):
        return None
    if isinstance(idx, ir.Op) and idx.op == "max" and isinstance(idx.args[0], ir.Op) and idx.args[0].op == "min":
        return idx.args[0].args[0]
    return None


def check_capture_indices(k: ir.Kernel, dims: dict, kname: str) -> None:
    """Every captured tensor's index in bounds, every integer value within i32 and no divisor
    0 (below)."""
    ranges = _ranges(k, dims)
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
                size = _eval(extent, dims)
                inner = _clamped_inner(k, fname, node, axis, idx)
                if inner is not None:  # clamped in the kernel: X itself wherever the mask keeps
                    lo, hi = interval_where_kept(inner, q_minus_kv_sign(k.func("mask")), ranges)
                    if lo < 0 or hi >= size:
                        text = ir.format_expr(inner, k.param_names(fname))
                        raise LaunchError(
                            f"{kname}: in {fname}(), index {axis} of '{node.tensor}' ({text}) {_out_of(lo, hi)} "
                            f"where the mask keeps the element, for these shapes, but that axis has size {size}; "
                            f"{_clamp_hint(lo, hi, size)}")
                    continue
                lo, hi = interval(idx, ranges)
                if lo < 0 or hi >= size:
                    text = ir.format_expr(idx, k.param_names(fname))
                    raise LaunchError(
                        f"{kname}: in {fname}(), index {axis} of '{node.tensor}' ({text}) {_out_of(lo, hi)} "
                        f"for these shapes, but that axis has size {size}; {_clamp_hint(lo, hi, size)}")
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


def dims_of(k, dims, tensor, axis):
    return _eval(k.tensor(tensor).shape[axis], dims)


def _eval(e, dims):
    if isinstance(e, ir.Const):
        return int(e.value)
    if isinstance(e, ir.Var):
        return dims[e.name]
    return int(scalar_op(e.op, [_eval(a, dims) for a in e.args]))
