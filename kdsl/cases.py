"""Test cases for any kdsl program, and their random inputs on either array backend.

A case is a shape and a seed (plus, for captured tensors, the sizes of dims only they use
and the range of their integer values): small, printable and replayable. `kdsl check`
sweeps fixed awkward ones; kdsl.testing's Hypothesis strategies draw and shrink them; both
build the inputs here, with numpy (the CPU interpreter) or torch (the GPU).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from . import fp8, ir
from .passes import pipeline, tiling
from .passes.target import get_target
from .semantics import eval_scalar

# Which case field each axis of q, k, v stands for.
_FIELDS = {"q": ("B", "H", "M", "D"), "k": ("B", "Hkv", "N", "D"), "v": ("B", "Hkv", "N", "Dv")}
# q/k head dims a program whose head dim is free is checked at: the prebuilt ones first, then
# others the Hopper kernel takes: the smallest common one, one that is no multiple of 64, and
# the largest ones (pipeline.head_dims are the ones built ahead of a call).
CHECK_HEAD_DIMS = (64, 128, 32, 96, 192, 256)
# Call-time softmax scales the checks also pass, besides the kernel's own: 0 (every q.k term
# vanishes) and a negative one; the kernel's fast paths (a max on raw q.k, the affine form)
# need a positive factor, and the runtime must arrange it (runtime/attention_launch.py).
CHECK_SCALES = (0.0, -0.3)
INT_TOP = {"i32": 2**31, "i8": 2**7, "u8": 2**8}  # one past each integer element type's largest value


@dataclass(frozen=True)
class AttentionCase:
    B: int
    H: int
    Hkv: int
    M: int
    N: int
    D: int
    seed: int = 0
    sizes: tuple = ()  # ((dim, size), ...) for dims only captured tensors use; default 2 * max(M, N)
    ids: int = 3       # i32 captures not used as indices hold sorted (document-id-like) values in [0, ids),
                       # or positions in [0, max(M, N)] when they have no query or key axis (lengths);
                       # both widened where a comparison needs it (compared_ranges)
    Dv: int = 0        # v's (and out's) head dim; 0: the same as D
    scale: float | None = None  # the call's softmax scale (None: the kernel's own)

    def __post_init__(self):
        if not self.Dv:
            object.__setattr__(self, "Dv", self.D)

    def label(self) -> str:
        extra = "".join(f" {n}={s}" for n, s in self.sizes)
        dv = f" Dv={self.Dv}" if self.Dv != self.D else ""
        scale = f" scale={self.scale:g}" if self.scale is not None else ""
        return f"B={self.B} H={self.H} Hkv={self.Hkv} M={self.M} N={self.N} D={self.D}{dv}{extra}{scale}"


@dataclass(frozen=True)
class GemmCase:
    M: int
    N: int
    K: int
    G: int = 1
    seed: int = 0

    def label(self) -> str:
        return (f"G={self.G} " if self.G > 1 else "") + f"M={self.M} N={self.N} K={self.K}"


def tiles(kernel: ir.Kernel, head_dim: int = 0, arch: str = "sm_90a", value_dim: int = 0) -> tuple[int, int]:
    """(tile_m, tile_n) the compiled kernel (and the interpreter) use."""
    low = pipeline.lower(kernel, get_target(arch), head_dim, value_dim)
    return low.attr("tile_m"), low.attr("tile_n")


def head_dim_pairs(k: ir.Kernel, arch: str = "sm_90a") -> list[tuple[int, int]]:
    """(q/k head dim, v head dim) pairs to check a program at: its literal head dims, else
    CHECK_HEAD_DIMS; where v's head dim is a dim of its own, also MLA's 192 / 128 and a v
    wider than q. Only pairs the target compiles (the mma.sync kernel: 64 or 128, equal)."""
    dq, dv = k.tensor("q").shape[3], k.tensor("v").shape[3]
    ds = [dq.value] if isinstance(dq, ir.Const) else list(CHECK_HEAD_DIMS)
    if isinstance(dv, ir.Const):
        pairs = [(d, dv.value) for d in ds]
    elif dv == dq:
        pairs = [(d, d) for d in ds]
    else:
        pairs = [(d, d) for d in ds] + [(d, v) for d, v in ((192, 128), (64, 128)) if d in ds] + \
            ([(ds[0], 64 if ds[0] != 64 else 128)] if len(ds) == 1 else [])
    if not get_target(arch).has_wgmma:
        pairs = [(d, v) for d, v in pairs if d == v and d in tiling.ATTENTION_TILES]
    return pairs


def attention_shapes(k: ir.Kernel, arch: str = "sm_90a", pairs=None) -> list[AttentionCase]:
    """Awkward cases: lengths 1, tile +- 1, ragged, M != N, GQA where declared; the head
    dims of head_dim_pairs (or the (D, Dv) pairs given) in turn."""
    pairs = pairs or head_dim_pairs(k, arch) or [(pipeline.head_dims(k)[0],) * 2]
    tm, tn = tiles(k, pairs[0][0], arch, pairs[0][1])
    gqa = k.tensor("k").shape[1] != k.tensor("q").shape[1]
    cases = []
    # N = 704 and 1000: whole 16-byte rows of a 1-byte and of a 16-bit tensor, where the calls
    # take the programs that stream a mask or a score's table (passes/streaming.py); the others
    # the programs that read them per element
    for i, (m, n) in enumerate([(1, 1), (1, 300), (tm - 1, tn + 1), (tm + 1, tn - 1),
                                (2 * tm + 3, 3 * tn + 5), (1000, 704), (64, 1000), (257, 257)]):
        h, hkv = (8, 2) if gqa and i % 2 else (4, 4)
        d, dv = pairs[i % len(pairs)]
        cases.append(conform(k, AttentionCase(1 + i % 2, h, hkv, m, n, d, Dv=dv)))
    # the scales of CHECK_SCALES on two of them (one with GQA where declared)
    for i, scale in zip((3, 5), CHECK_SCALES):
        cases[i] = replace(cases[i], scale=scale)
    return cases


def gemm_shapes(grouping: str) -> list[GemmCase]:
    """Sizes at 128-blocks' boundaries (K blocks, b_scale row blocks), 1 row, long K."""
    if grouping == "masked":
        shapes = [(4, 256, 384, 256), (2, 129, 2112, 128), (3, 1, 129, 384)]
    elif grouping == "contiguous":
        shapes = [(4, 300, 384, 256), (2, 128, 2112, 128), (3, 1, 129, 384)]
    else:
        shapes = [(1, 1, 1, 128), (1, 127, 129, 256), (1, 128, 2112, 128), (1, 129, 127, 384), (1, 300, 7168, 128),
                  (1, 1, 2112, 7168)]
    return [GemmCase(m, n, k, g) for g, m, n, k in shapes]


def conform(kernel: ir.Kernel, case: AttentionCase) -> AttentionCase:
    """The case with every size the declarations fix set as declared: a literal head dim, k
    declared with q's head count (no GQA) or q's length (N = M), ..."""
    f = {name: getattr(case, name) for name in ("B", "H", "Hkv", "M", "N", "D", "Dv")}
    dims: dict = {}
    for t, names in _FIELDS.items():
        for axis, e in enumerate(kernel.tensor(t).shape):
            if isinstance(e, ir.Var) and e.name not in dims:
                dims[e.name] = f[names[axis]]
            else:
                try:
                    f[names[axis]] = int(eval_scalar(e, dims))
                except KeyError:  # a shape expression over a dim bound later: leave it to the call's check
                    pass
    if f["H"] % f["Hkv"]:
        f["Hkv"] = math.gcd(f["H"], f["Hkv"])
    return replace(case, **f)


def case_at(kernel: ir.Kernel, shape: dict) -> AttentionCase | GemmCase:
    """The case of a shape as `--shapes` gives it (bench.parse_shape's dict: B, H, M, N, D and
    optional Hkv, Dv; or M, N, K and optional G), an attention shape taking the sizes the
    program's declarations fix (conform)."""
    if kernel.kind == "gemm":
        return GemmCase(shape["M"], shape["N"], shape["K"], shape.get("G", 1))
    return conform(kernel, AttentionCase(shape["B"], shape["H"], shape.get("Hkv", shape["H"]), shape["M"],
                                         shape["N"], shape["D"], Dv=shape.get("Dv", 0)))


def fits(kernel: ir.Kernel, shape: dict) -> bool:
    """Whether a `--shapes` shape is of the kernel's kind (a GEMM's names K)."""
    return ("K" in shape) == (kernel.kind == "gemm")


def attention_dims(kernel: ir.Kernel, case: AttentionCase) -> dict:
    """Every dim of the program for this case: from q, k, v, then the captured tensors' own."""
    dims: dict = {}
    for t, names in _FIELDS.items():
        for axis, e in enumerate(kernel.tensor(t).shape):
            if isinstance(e, ir.Var) and e.name not in dims:
                dims[e.name] = getattr(case, names[axis])
    sizes = dict(case.sizes)
    for t in kernel.tensors:
        for e in t.shape if t.role == "capture" else ():
            if isinstance(e, ir.Var) and e.name not in dims:
                dims[e.name] = sizes.get(e.name, 2 * max(case.M, case.N))  # generous: clamped indices fit
    return dims


def free_dims(kernel: ir.Kernel) -> list[str]:
    """Dims that only captured tensors use (their sizes are part of a case)."""
    bound = {e.name for t in ("q", "k", "v") for e in kernel.tensor(t).shape if isinstance(e, ir.Var)}
    return sorted({e.name for t in kernel.tensors if t.role == "capture" for e in t.shape
                   if isinstance(e, ir.Var) and e.name not in bound})


def index_ranges(kernel: ir.Kernel, dims: dict) -> dict:
    """For each captured tensor whose values index another one, the size of the axis they
    index (the smallest, if several): its values are drawn in [0, size)."""
    ranges: dict = {}
    for fname in ("score", "mask"):
        e = kernel.func(fname)
        for node in ir.walk(e) if e is not None else ():
            if not isinstance(node, ir.Load):
                continue
            for idx, extent in zip(node.indices, kernel.tensor(node.tensor).shape):
                size = int(eval_scalar(extent, dims))
                for inner in ir.walk(idx):
                    if isinstance(inner, ir.Load):
                        ranges[inner.tensor] = min(ranges.get(inner.tensor, size), size)
    return ranges


_COMPARISONS = ("lt", "le", "gt", "ge", "eq", "ne")
INT_BOTTOM = {"i32": -2**31, "i8": -2**7, "u8": 0}  # each integer element type's smallest value


def _value_loads(e: ir.Expr) -> list[ir.Load]:
    """The loads whose values e computes with (not those inside another load's indices)."""
    if isinstance(e, ir.Load):
        return [e]
    return [x for a in getattr(e, "args", ()) for x in _value_loads(a)]


def compared_ranges(kernel: ir.Kernel, defaults: dict, positional: set) -> dict:
    """Integer captured tensors that a comparison in the score or the mask sets against a
    constant or against another captured tensor, with the range [lo, hi) to draw them in so that
    the comparison goes both ways on some elements. defaults: the range each integer capture
    that is no index is drawn in otherwise; positional: those drawn as positions (no query or
    key axis: lengths, prefixes). A constant widens its tensor's range to hold it and a value
    either side (`lab != 3`, ids in [0, 3), kept every pair; `sel > 100` dropped them all); a
    positional tensor compared with one of ids takes that one's range (`int(lvl[b, i, j]) >=
    thr[h]` with thresholds drawn as positions, past every level, kept no pair). A positional
    tensor whose element itself only `==` or `!=` sets against constants is drawn among them and a value either
    side (`where(kind[h] == 0, ..., where(kind[h] == 1, ...))` over kinds drawn as positions
    took neither branch in any case)."""
    consts: dict = {}
    partners: dict = {}
    ordered: set = set()  # tensors some comparison sets against other than a constant by == / !=
    for node, loaded in _comparisons(kernel):
        sides = [side & set(defaults) for side in loaded]
        for mine, other in ((0, 1), (1, 0)):
            c = node.args[other]
            if isinstance(c, ir.Const) and type(c.value) is int:
                for t in sides[mine]:
                    consts.setdefault(t, []).append(c.value)
            if not (isinstance(c, ir.Const) and node.op in ("eq", "ne") and isinstance(node.args[mine], ir.Load)):
                ordered.update(sides[mine])  # (`(i - j) % max(dil[h], 1) == 0` needs dilations of all sizes)
            for t in sides[mine] & positional:
                partners.setdefault(t, set()).update(sides[other] - positional)
    out = dict(defaults)
    for t, values in consts.items():
        dtype = kernel.tensor(t).dtype
        lo, hi = out[t] if t not in positional or t in ordered else (min(values), min(values) + 1)
        out[t] = (max(INT_BOTTOM[dtype], min([lo] + [v - 1 for v in values])),
                  min(INT_TOP[dtype], max([hi] + [v + 2 for v in values])))
    for t, ids in partners.items():
        if ids:  # the union of their ranges, as t's values are set against each
            out[t] = (min(out[u][0] for u in ids), max(out[u][1] for u in ids))
    return {t: r for t, r in out.items() if r != defaults[t]}


def compared_float_scales(kernel: ir.Kernel) -> dict:
    """Float captured tensors that a comparison sets against a constant larger than their usual
    draw (0.1 standard normal), each with the largest such constant as its draw's scale, so
    that the comparison goes both ways on some elements (held-out set 30's event_horizon,
    `t_q[b, i] - t_k[b, j] <= 20.0`, held everywhere over times drawn near 0)."""
    scales: dict = {}
    floats = {t.name: t.dtype for t in kernel.tensors if t.role == "capture" and t.dtype in _FLOAT_SCALE_TOP}
    for node, loaded in _comparisons(kernel):
        for mine, other in ((0, 1), (1, 0)):
            c = node.args[other]
            if isinstance(c, ir.Const) and c.ty == "f32" and abs(c.value) > 0.1:
                for t in loaded[mine] & set(floats):
                    top = _FLOAT_SCALE_TOP[floats[t]]
                    scales[t] = min(top, max(scales.get(t, 0.1), abs(float(c.value))))
    return scales


# the largest scale a float capture is drawn at: its draws (4 standard deviations) stay finite in
# its type, and sums of products with them in f32
_FLOAT_SCALE_TOP = {"f32": 1e6, "bf16": 1e6, "f16": 1e4}


def indices_compared_with_ids(kernel: ir.Kernel, ranges: dict, ids: set) -> dict:
    """Captured tensors that index another one (ranges) and that a comparison sets against a
    tensor of ids (`doc_q[b, i] == doc_k[b, j]` where doc_q also picks `temp[b, doc_q[b, i]]`),
    each with those ids' tensors. Drawn as ids (sorted runs) within the range they index, they
    match their partners on runs of pairs, as documents do; drawn as indices (scattered over the
    whole range) they matched almost no pair, and every tile held a few."""
    found: dict = {}
    for _, sides in _comparisons(kernel):
        for mine, other in ((0, 1), (1, 0)):
            for t in sides[mine] & set(ranges):
                if sides[other] & ids:
                    found.setdefault(t, set()).update(sides[other] & ids)
    return found


def _comparisons(kernel: ir.Kernel):
    """Each comparison of the score and the mask, with the captured tensors each side computes
    with (_value_loads: not those only inside another load's indices)."""
    for fname in ("score", "mask"):
        e = kernel.func(fname)
        for node in ir.walk(e) if e is not None else ():
            if isinstance(node, ir.Op) and node.op in _COMPARISONS:
                yield node, [{n.tensor for n in _value_loads(a)} for a in node.args]


# Float functions whose argument must be positive for a real value (log(-x) is NaN).
_POSITIVE_DOMAIN = ("log", "log2", "sqrt", "rsqrt")


def positive_captures(kernel: ir.Kernel) -> set:
    """Float captured tensors read inside the argument of a log or a square root (RetNet's
    log(gamma[h])): their draws are positive, as the program's users' values are; a standard
    normal would make the score NaN on half the heads, where the kernel's answer is NaN too."""
    found = set()

    def signed_loads(e):  # what an abs() wraps may have either sign
        if isinstance(e, ir.Load):
            found.update([e.tensor] if e.ty == "f32" else [])
        elif isinstance(e, ir.Op) and e.op != "abs":
            for a in e.args:
                signed_loads(a)
    for fname in ("score", "mask"):
        e = kernel.func(fname)
        for node in ir.walk(e) if e is not None else ():
            if isinstance(node, ir.Op) and node.op in _POSITIVE_DOMAIN:
                signed_loads(node.args[0])
    return found


def attention_inputs(kernel: ir.Kernel, case: AttentionCase, be):
    """q, k, v (standard normal, in the declared element type) and the captured tensors
    (floats: 0.1 * standard normal, bias-like, or 0.5 + 0.1 |standard normal| where a log or a
    square root reads them (positive_captures), or at the scale of a constant a comparison sets
    them against (compared_float_scales); ints: see index_ranges and AttentionCase.ids;
    bools: even odds, sorted along the last axis on odd seeds)."""
    seq_dims = {kernel.tensor(t).shape[2] for t in ("q", "k")}
    gen = be.rng(case.seed)
    elem = kernel.tensor("q").dtype
    q = be.cast(be.randn((case.B, case.H, case.M, case.D), gen), elem)
    k = be.cast(be.randn((case.B, case.Hkv, case.N, case.D), gen), elem)
    v = be.cast(be.randn((case.B, case.Hkv, case.N, case.Dv), gen), elem)
    dims = attention_dims(kernel, case)
    ranges = index_ranges(kernel, dims)
    positive = positive_captures(kernel)
    # integer captures that are no index: ids in [0, ids), or positions in [0, max(M, N)]; then
    # as comparisons between them and with constants need (compared_ranges)
    free = [t for t in kernel.tensors if t.role == "capture" and t.dtype in INT_TOP and t.name not in ranges]
    positional = {t.name for t in free if not seq_dims & set(t.shape)}
    drawn = {t.name: (0, min(max(case.M, case.N) + 1 if t.name in positional else case.ids, INT_TOP[t.dtype]))
             for t in free}
    drawn.update(compared_ranges(kernel, drawn, positional))
    id_indices = indices_compared_with_ids(kernel, ranges, set(drawn) - positional)
    float_scales = compared_float_scales(kernel)
    for t, partners in id_indices.items():  # ids within the range they index
        drawn[t] = (0, max(1, min(ranges[t], max(drawn[u][1] for u in partners))))
    caps = {}
    for t in kernel.tensors:
        if t.role != "capture":
            continue
        shape = [int(eval_scalar(e, dims)) for e in t.shape]
        top = INT_TOP.get(t.dtype)  # an integer type's largest value (+1), for its draws
        if t.dtype == "bool":  # a mask: each element kept or not, even odds; on odd seeds sorted
            # along its last axis (a padding-like row of false then true: whole blocks all false or
            # all true, which the whole-block tile summaries skip or run unchecked)
            bits = be.randint(0, 2, shape, gen)
            caps[t.name] = be.cast(be.sort_last(bits) if case.seed % 2 else bits, "bool")
        elif top is None and t.name in positive:
            caps[t.name] = be.cast(0.5 + 0.1 * abs(be.randn(shape, gen)), t.dtype)
        elif top is None:
            caps[t.name] = be.cast(float_scales.get(t.name, 0.1) * be.randn(shape, gen), t.dtype)
        elif t.name in ranges and t.name not in id_indices:
            caps[t.name] = be.cast(be.randint(0, min(ranges[t.name], top), shape, gen), t.dtype)
        elif t.name in positional:  # per sequence or head: a length, a prefix, a position
            caps[t.name] = be.cast(be.randint(*drawn[t.name], shape, gen), t.dtype)
        else:
            caps[t.name] = be.cast(be.sort_last(be.randint(*drawn[t.name], shape, gen)), t.dtype)
    return q, k, v, caps


def gemm_inputs(kernel: ir.Kernel, case: GemmCase, be):
    """(a, a_scale, b, b_scale, extra): quantised standard normals in kdsl.fp8's layouts;
    extra is () or the random expert per row (-1 = padding) / valid rows per group."""
    grouping = kernel.attr("grouping")
    gen = be.rng(case.seed)
    G, M, N, K = case.G, case.M, case.N, case.K
    a, sa = fp8.quantize_1x128(be.randn((G, M, K) if grouping == "masked" else (M, K), gen))
    b, sb = fp8.quantize_128x128(be.randn((N, K) if grouping == "dense" else (G, N, K), gen))
    extra = ()
    if grouping == "contiguous":
        extra = (be.randint(-1, G, (M,), gen),)
    elif grouping == "masked":
        extra = (be.randint(0, M + 1, (G,), gen),)
    return a, sa, b, sb, extra
