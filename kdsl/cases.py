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
from .passes import pipeline
from .passes.target import get_target
from .semantics import eval_scalar

# Which case field each axis of q, k, v stands for.
_FIELDS = {"q": ("B", "H", "M", "D"), "k": ("B", "Hkv", "N", "D"), "v": ("B", "Hkv", "N", "D")}


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
                       # or positions in [0, max(M, N)] when they have no query or key axis (lengths)

    def label(self) -> str:
        extra = "".join(f" {n}={s}" for n, s in self.sizes)
        return f"B={self.B} H={self.H} Hkv={self.Hkv} M={self.M} N={self.N} D={self.D}{extra}"


@dataclass(frozen=True)
class GemmCase:
    M: int
    N: int
    K: int
    G: int = 1
    seed: int = 0

    def label(self) -> str:
        return (f"G={self.G} " if self.G > 1 else "") + f"M={self.M} N={self.N} K={self.K}"


def tiles(kernel: ir.Kernel, head_dim: int = 0, arch: str = "sm_90a") -> tuple[int, int]:
    """(tile_m, tile_n) the compiled kernel (and the interpreter) use."""
    low = pipeline.lower(kernel, get_target(arch), head_dim)
    return low.attr("tile_m"), low.attr("tile_n")


def attention_shapes(k: ir.Kernel) -> list[AttentionCase]:
    """Awkward cases: lengths 1, tile +- 1, ragged, M != N, GQA where declared; both head dims."""
    ds = pipeline.head_dims(k)
    tm, tn = tiles(k, ds[0])
    gqa = k.tensor("k").shape[1] != k.tensor("q").shape[1]
    cases = []
    for i, (m, n) in enumerate([(1, 1), (1, 300), (tm - 1, tn + 1), (tm + 1, tn - 1),
                                (2 * tm + 3, 3 * tn + 5), (1000, 700), (64, 1000), (257, 257)]):
        h, hkv = (8, 2) if gqa and i % 2 else (4, 4)
        cases.append(conform(k, AttentionCase(1 + i % 2, h, hkv, m, n, ds[i % len(ds)])))
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
    f = {name: getattr(case, name) for name in ("B", "H", "Hkv", "M", "N", "D")}
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


def attention_inputs(kernel: ir.Kernel, case: AttentionCase, be):
    """q, k, v (standard normal, in the declared element type) and the captured tensors
    (floats: 0.1 * standard normal, bias-like; ints: see index_ranges and AttentionCase.ids)."""
    seq_dims = {kernel.tensor(t).shape[2] for t in ("q", "k")}
    gen = be.rng(case.seed)
    elem = kernel.tensor("q").dtype
    q = be.cast(be.randn((case.B, case.H, case.M, case.D), gen), elem)
    k = be.cast(be.randn((case.B, case.Hkv, case.N, case.D), gen), elem)
    v = be.cast(be.randn((case.B, case.Hkv, case.N, case.D), gen), elem)
    dims = attention_dims(kernel, case)
    ranges = index_ranges(kernel, dims)
    caps = {}
    for t in kernel.tensors:
        if t.role != "capture":
            continue
        shape = [int(eval_scalar(e, dims)) for e in t.shape]
        if t.dtype != "i32":
            caps[t.name] = be.cast(0.1 * be.randn(shape, gen), t.dtype)
        elif t.name in ranges:
            caps[t.name] = be.randint(0, ranges[t.name], shape, gen)
        elif not seq_dims & set(t.shape):  # per sequence or head: a length, a prefix, a position
            caps[t.name] = be.randint(0, max(case.M, case.N) + 1, shape, gen)
        else:
            caps[t.name] = be.sort_last(be.randint(0, case.ids, shape, gen))
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
