"""Interval arithmetic over an index's value at concrete (or sample) shapes.

b in [0, B), h in [0, H), q in [0, M), kv in [0, N) and the dims: the interval an i32 index
(interval) or an f32 value under int() (float_interval) lies in, an unknown side infinite.
runtime/bounds.py proves each call's capture indices in bounds with it; passes/masked_index.py
asks it, at a sample shape, which score indices only the mask keeps in range."""
from __future__ import annotations

import math

import numpy

from .. import ir
from ..semantics import I32_MAX, I32_MIN, scalar_op


INF = math.inf
UNKNOWN = (-INF, INF)
# ranges' entry holding the range of each captured tensor whose element type bounds it: a u8
# id lies in [0, 255] however it was drawn (not a name a program can give a dim)
ELEMENTS = "<elements>"
ELEMENT_RANGES = {name: (int(numpy.iinfo(t).min), int(numpy.iinfo(t).max))
                  for name, t in (("u8", numpy.uint8), ("i8", numpy.int8))}


# ranges' entry holding, inside a branch of where(), the intervals of the expressions its
# comparison bounds there (_branch_ranges): {expr: (lo, hi)}
NARROWED = "<narrowed>"


def interval(e: ir.Expr, ranges: dict) -> tuple:
    """[lo, hi] that e's value lies in; an unknown side is infinite, so a clamp bounds even a
    value read from a captured tensor: min(max(ids[b, i], 0), T - 1) lies in [0, T - 1]. Inside
    a branch of where(), what its condition says of an expression holds too: in T5's bucket
    where(abs(i - j) < 8, abs(i - j), 8 + int(log(float(abs(i - j)) / 8.0) ...)) the second
    branch's log is of at least 1."""
    lo, hi = _interval(e, ranges)
    narrowed = ranges.get(NARROWED)
    if narrowed and e in narrowed:
        return max(lo, narrowed[e][0]), min(hi, narrowed[e][1])
    return lo, hi


def _interval(e: ir.Expr, ranges: dict) -> tuple:
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
        taken = [interval(x, r) for x, r in zip(e.args[1:], _branch_ranges(e.args[0], ranges)) if r is not None]
        return (min(t[0] for t in taken), max(t[1] for t in taken)) if taken else UNKNOWN
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


_NEGATED = {"lt": "ge", "le": "gt", "gt": "le", "ge": "lt", "eq": "ne", "ne": "eq"}


# x op y as bounds on x - y
_DIFFERENCE = {"lt": (-INF, -1), "le": (-INF, 0), "gt": (1, INF), "ge": (0, INF), "eq": (0, 0), "ne": (-INF, INF)}


def _branch_ranges(cond: ir.Expr, ranges: dict) -> tuple:
    """ranges inside where(cond, ...)'s two branches: an i32 comparison's sides narrowed to
    what it says there (x < y: x at most y's largest - 1, y at least x's smallest + 1), and
    its difference (x - y at most -1, y - x at least 1: `j > i` bounds `j - i` below by 1);
    None for a branch no value can take; ranges itself where cond is anything else."""
    if not (isinstance(cond, ir.Op) and cond.op in _NEGATED and cond.args[0].ty == "i32"):
        return ranges, ranges
    return tuple(_holding(op, *cond.args, ranges) for op in (cond.op, _NEGATED[cond.op]))


def _holding(op: str, x: ir.Expr, y: ir.Expr, ranges: dict) -> dict | None:
    """ranges where `x op y` holds (_branch_ranges), None where it cannot."""
    (xl, xh), (yl, yh) = interval(x, ranges), interval(y, ranges)
    dl, dh = _DIFFERENCE[op]  # on x - y
    nx = (max(xl, yl + dl), min(xh, yh + dh))
    ny = (max(yl, xl - dh), min(yh, xh - dl))
    x_minus_y, y_minus_x = ir.Op("i32", "sub", (x, y)), ir.Op("i32", "sub", (y, x))
    (al, ah) = interval(x_minus_y, ranges)
    nd = (max(al, dl, xl - yh), min(ah, dh, xh - yl))
    if nx[0] > nx[1] or ny[0] > ny[1] or nd[0] > nd[1]:
        return None
    narrowed = dict(ranges.get(NARROWED, {}))
    narrowed.update({x: nx, y: ny, x_minus_y: nd, y_minus_x: (-nd[1], -nd[0])})
    return {**ranges, NARROWED: narrowed}


def kept_ranges(mask: ir.Expr | None, ranges: dict) -> dict | None:
    """ranges where the mask keeps an element: narrowed by each of its top-level conjuncts that
    is an i32 comparison (`j <= i` bounds i - j below by 0, `i // 128 >= j // 128` the blocks'
    difference, `i - j < 256` it above); None where no element can be kept."""
    for c in ir.conjuncts(mask) if mask is not None else ():
        if ranges is None:
            return None
        if isinstance(c, ir.Op) and c.op in _NEGATED and c.args[0].ty == "i32":
            ranges = _holding(c.op, *c.args, ranges)
    return ranges


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
    if e.op == "where":  # each branch where its condition's ranges allow it (_branch_ranges)
        taken = [float_interval(x, r) for x, r in zip(e.args[1:], _branch_ranges(e.args[0], ranges)) if r is not None]
        if not taken or any(t is None for t in taken):
            return None
        return (min(t[0] for t in taken), max(t[1] for t in taken))
    args = [float_interval(a, ranges) for a in e.args]
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


def call_ranges(k: ir.Kernel, dims: dict) -> dict:
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


def clamp_to_axis(idx: ir.Expr, extent: ir.Expr) -> ir.Expr:
    """max(min(idx, extent - 1), 0): the form passes/masked_index.py writes (clamped_index reads it)."""
    last = ir.Op("i32", "sub", (extent, ir.Const("i32", 1)))
    return ir.Op("i32", "max", (ir.Op("i32", "min", (idx, last)), ir.Const("i32", 0)))


def clamped_index(e: ir.Expr) -> ir.Expr | None:
    """X of clamp_to_axis(X, extent), else None."""
    if isinstance(e, ir.Op) and e.op == "max" and isinstance(e.args[0], ir.Op) and e.args[0].op == "min":
        return e.args[0].args[0]
    return None


def sample_ranges(k: ir.Kernel, sizes: dict) -> dict:
    """call_ranges at a sample shape: the named sizes, 64 for every other dim."""
    return call_ranges(k, {name: sizes.get(name, 64) for name in k.dims})


def by_difference(e: ir.Expr) -> ir.Expr | None:
    """e with q - kv read as the variable dqk (kv - q as -dqk), or None where e reads q or kv
    otherwise or loads anything (an index of data: its range is the caller's)."""
    out = ir.as_difference(e, "q", "kv", ir.Var("i32", "dqk"))
    if any(isinstance(n, ir.Load) or (isinstance(n, ir.Var) and n.name in ("q", "kv", "qf", "kvf", "dqkf"))
           for n in ir.walk(out)):
        return None
    return out


def interval_where_kept(idx: ir.Expr, mask: ir.Expr | None, sign: int, ranges: dict) -> tuple:
    """idx's interval over the elements the mask keeps: under its comparisons (kept_ranges), and
    where it fixes q - kv's sign (+1: q >= kv, -1: q <= kv; mask_facts.q_minus_kv_sign) and idx
    reads the positions only through q - kv (by_difference), also over that sign; the tighter."""
    kept = kept_ranges(mask, ranges)
    if kept is None:  # nothing kept: no index is read where it matters
        return (0, 0)
    lo, hi = interval(idx, kept)
    d = by_difference(idx)
    if d is None or sign == 0:
        return lo, hi
    (q_lo, q_hi), (kv_lo, kv_hi) = ranges["q"], ranges["kv"]
    dqk = (max(0, q_lo - kv_hi), q_hi - kv_lo) if sign > 0 else (q_lo - kv_hi, min(0, q_hi - kv_lo))
    dl, dh = interval(d, {**ranges, "dqk": dqk})
    return max(lo, dl), min(hi, dh)



def dims_of(k, dims, tensor, axis):
    return eval_size(k.tensor(tensor).shape[axis], dims)


def eval_size(e, dims):
    if isinstance(e, ir.Const):
        return int(e.value)
    if isinstance(e, ir.Var):
        return dims[e.name]
    return int(scalar_op(e.op, [eval_size(a, dims) for a in e.args]))
