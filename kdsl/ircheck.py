"""Type checking of IR that did not come from the .kd type checker: an IR file given to
`kdsl.load` / `kdsl compile` (what `kdsl tune` writes), and every block a rewriter proposes.

It re-establishes what passes/typecheck.py guarantees for the kernels it builds, and what
the passes, codegen and runtime rely on: every op applied to operands of its types, only the
variables a function may see, loads of captured tensors only with one i32 index per axis,
and the tensor declarations of a well-formed attention kernel or FP8 GEMM. Messages name
the kernel and the block; IrTypeError carries no span (kdsl.tune reports it per proposal,
kdsl.runtime.module locates it at the kernel).
"""
from __future__ import annotations

from . import ir
from .passes import tiling
from .passes.typecheck import ATTN_ELEMS, CAPTURE_DTYPES

_INDEX = ("b", "h", "q", "kv")
_TILE = ("b", "h", "q0", "q1", "k0", "k1")
# The functions an attention kernel may define: result type and the variables each may use
# besides the kernel's dims. score and mask define the program (and its float64 reference);
# score_log2 and the tile predicates are what the kernel evaluates (derived by the passes
# unless given).
FUNCS = {"scale": ("f32", ()), "score": ("f32", ("s", *_INDEX)), "mask": ("bool", _INDEX),
         "score_log2": ("f32", ("qk", "scale", "scale_log2", "qf", "kvf", "dqkf", "kvt", *_INDEX)),
         "tile_empty": ("bool", _TILE), "tile_full": ("bool", _TILE),
         "kv_lo": ("i32", ("b", "h", "q", "k0")), "kv_hi": ("i32", ("b", "h", "q", "k0")), "tile_keys": ("bool", _TILE),
         "stream_rest_full": ("bool", _TILE),  # passes/stream_mask.py's
         "score_slope": ("f32", ("scale", "scale_log2", "b", "h")),
         "score_base": ("f32", ("scale", "scale_log2", "b", "h", "q", "qf", "kvf", "dqkf")),
         "score_offset": ("f32", ("scale", "scale_log2", "b", "h", "dqk")),
         # passes/key_table.py's (it derives them again from score_log2): the part per key, the
         # score reading it as kt, and a row's gain and base
         "key_part": ("f32", ("scale", "scale_log2", "b", "h", "kv", "kvf")),
         "score_keyed": ("f32", ("qk", "scale", "scale_log2", "qf", "kvf", "dqkf", "kt", *_INDEX)),
         "key_gain": ("f32", ("scale", "scale_log2", "b", "h", "q", "qf")),
         "key_base": ("f32", ("scale", "scale_log2", "b", "h", "q", "qf"))}
_BINARY_SAME = ("add", "sub", "mul", "min", "max")
_COMPARE = ("lt", "le", "gt", "ge")
_ARITY = {**{o: 2 for o in (*_BINARY_SAME, *_COMPARE, "div", "floordiv", "mod", "eq", "ne", "and", "or")},
          **{o: 1 for o in ("neg", "abs", "not", "int", "float", *ir.FLOAT_FUNCS)}, "where": 3,
          **{o: 3 for o in ir.WIDENINGS}, **{o: 1 for o in ir.FLOAT_ORDER}}


class IrTypeError(ValueError):
    """An ill-typed or ill-formed IR kernel or block; the message says where and why."""


def check_func(k: ir.Kernel, name: str, e: ir.Expr) -> None:
    """`def name = e` type-checks in kernel k (which supplies dims and captured tensors)."""
    if k.kind != "attention":
        raise IrTypeError(f"a {k.kind} kernel defines no functions ('{name}')")
    if name not in FUNCS:
        raise IrTypeError(f"unknown function '{name}'; an attention kernel's IR defines {', '.join(FUNCS)}")
    want, params = FUNCS[name]
    dims = set(k.dims)
    got = _type(e, k, set(params) | dims, name)
    if got != want:
        raise IrTypeError(f"def {name} must be {want}, got {got}")


def _type(e: ir.Expr, k: ir.Kernel, names: set, where: str) -> str:
    def fail(msg):
        raise IrTypeError(f"in def {where}: {msg} in {_short(e)}")
    if isinstance(e, ir.Const):
        if e.ty == "i32" and (type(e.value) is not int or not -2**31 <= e.value < 2**31):
            fail(f"i32 constant {e.value!r} out of range")
        return e.ty
    if isinstance(e, ir.Var):
        if e.name not in names:
            fail(f"'{e.name}' is not available here (it may use {', '.join(sorted(names))})")
        return e.ty
    if isinstance(e, ir.Load):
        t = k.tensor(e.tensor)
        if t is None or t.role != "capture":
            fail(f"'{e.tensor}' is not a captured tensor")
        if len(e.indices) != len(t.shape):
            fail(f"'{e.tensor}' has {len(t.shape)} dimensions, indexed with {len(e.indices)}")
        if any(_type(i, k, names, where) != "i32" for i in e.indices):
            fail("an index must be i32")
        if e.ty != CAPTURE_DTYPES[t.dtype]:
            fail(f"a load of {t.dtype} tensor '{e.tensor}' is {CAPTURE_DTYPES[t.dtype]}, not {e.ty}")
        return e.ty
    if e.op in ir.TILE_REDUCTIONS:  # (qmin e): e over the block's rows (or keys), in a tile predicate
        axis = ir.TILE_REDUCTIONS[e.op][0]
        positions = set(ir.TILE_AXES[axis])
        if len(e.args) != 1 or "q0" not in names or e.ty != "i32" or _type(e.args[0], k, names | positions, where) != "i32":
            fail(f"'{e.op}' takes one i32 expression of {' and '.join(sorted(positions))}, in a tile predicate")
        return "i32"
    if len(e.args) != _ARITY[e.op]:
        fail(f"'{e.op}' takes {_ARITY[e.op]} operand(s), got {len(e.args)}")
    a = [_type(x, k, names, where) for x in e.args]
    if not _applies(e.op, a, e.ty):
        fail(f"'{e.op}:{e.ty}' does not apply to ({', '.join(a)})")
    return e.ty


def _applies(op: str, a: list, ty: str) -> bool:
    """Whether op with result type ty takes operands of types a (arity already checked)."""
    num = ("i32", "f32")
    if op in _BINARY_SAME:
        return a[0] == a[1] == ty and ty in num
    if op in _COMPARE:
        return a[0] == a[1] and a[0] in num and ty == "bool"
    if op in ("eq", "ne"):
        return a[0] == a[1] and ty == "bool"
    if op == "div":
        return a == ["f32", "f32"] and ty == "f32"
    if op in ("floordiv", "mod"):
        return a == ["i32", "i32"] and ty == "i32"
    if op in ("neg", "abs"):
        return a[0] in num and ty == a[0]
    if op in ("and", "or", "not"):
        return all(x == "bool" for x in a) and ty == "bool"
    if op == "where":
        return a[0] == "bool" and a[1] == a[2] == ty
    if op in ("int", "float"):  # of a bool too (1 or 0), as the .kd type checker allows
        return a[0] in (*num, "bool") and ty == ("i32" if op == "int" else "f32")
    if op in ir.WIDENINGS:
        return a == ["f32"] * 3 and ty == "f32"
    if op == "f32_order":
        return a == ["f32"] and ty == "i32"
    if op == "order_f32":
        return a == ["i32"] and ty == "f32"
    return a == ["f32"] and ty == "f32"  # the float functions


def _short(e: ir.Expr) -> str:
    text = ir.print_expr(e)
    return text if len(text) <= 80 else text[:77] + "..."


def check_kernel(k: ir.Kernel) -> None:
    """A whole kernel from IR text: declarations, then every function."""
    names = [t.name for t in k.tensors]
    if len(set(names)) != len(names):
        raise IrTypeError(f"kernel '{k.name}' declares a tensor twice")
    for t in k.tensors:
        for d in t.shape:
            if _shape_type(d, k) != "i32":
                raise IrTypeError(f"kernel '{k.name}': the shape of '{t.name}' must be i32 expressions of dims")
    if k.kind == "attention":
        _attention(k)
    elif k.kind == "gemm":
        _gemm(k)
    else:
        raise IrTypeError(f"kernel '{k.name}': unknown kind '{k.kind}' (attention or gemm)")
    fnames = [n for n, _ in k.funcs]
    if len(set(fnames)) != len(fnames):
        raise IrTypeError(f"kernel '{k.name}' defines a function twice")
    for name, e in k.funcs:
        check_func(k, name, e)


def _shape_type(d: ir.Expr, k: ir.Kernel) -> str:
    if any(isinstance(n, ir.Var) and n.name in ir.BUILTIN_VARS for n in ir.walk(d)):
        return "reserved"  # q, kv, s, ... are never dims
    try:
        return _type(d, k, set(k.dims), "shape")
    except IrTypeError:
        return "ill-typed"


def _attention(k: ir.Kernel) -> None:
    q, kk, v, out = (k.tensor(n) for n in ("q", "k", "v", "out"))
    if None in (q, kk, v, out):
        raise IrTypeError(f"attention kernel '{k.name}' must declare q, k, v and out")
    if any(t.role != "input" or len(t.shape) != 4 or t.dtype != q.dtype for t in (q, kk, v)) or q.dtype not in ATTN_ELEMS:
        raise IrTypeError(f"kernel '{k.name}': q, k, v must be 4-D inputs of one type ({' or '.join(ATTN_ELEMS)})")
    # the language's rules (passes/typecheck.py): v may have a head dim of its own, which out takes
    if kk.shape[0] != q.shape[0] or kk.shape[3] != q.shape[3] or v.shape[:3] != kk.shape[:3]:
        raise IrTypeError(f"kernel '{k.name}': k must share q's batch and head dims, and v k's batch, heads and "
                          f"length")
    for what, d in (("head dimension", q.shape[3]), ("value head dimension", v.shape[3])):
        if isinstance(d, ir.Const) and tiling.head_dim_problem(d.value):
            raise IrTypeError(f"kernel '{k.name}': {what} {d.value} is not supported: it "
                              f"{tiling.head_dim_problem(d.value)}")
    if out.role != "output" or out.dtype != q.dtype or out.shape != q.shape[:3] + v.shape[3:]:
        raise IrTypeError(f"kernel '{k.name}': out must be an output of q's type, q's batch, heads and length and v's "
                          f"head dimension")
    lse = k.tensor("lse")
    if lse is not None and (lse.role != "output" or lse.dtype != "f32" or lse.shape != q.shape[:3]):
        raise IrTypeError(f"kernel '{k.name}': lse must be an f32 output of shape q[:3]")
    for t in k.tensors:
        if t.name not in ("q", "k", "v", "out", "lse") and (t.role != "capture" or t.dtype not in CAPTURE_DTYPES
                                                            or t.block is not None):
            raise IrTypeError(f"kernel '{k.name}': '{t.name}' must be a captured tensor of type "
                              f"{', '.join(CAPTURE_DTYPES)}")
    if k.func("scale") is None:
        raise IrTypeError(f"kernel '{k.name}' must define scale")


def _gemm(k: ir.Kernel) -> None:
    a, b, out = k.tensor("a"), k.tensor("b"), k.tensor("out")
    if None in (a, b, out) or a.role != "input" or b.role != "input" or out.role != "output":
        raise IrTypeError(f"gemm kernel '{k.name}' must declare inputs a, b and output out")
    if (a.dtype, a.block, b.dtype, b.block) != ("e4m3", (1, 128), "e4m3", (128, 128)) or out.dtype not in ("bf16", "f32"):
        raise IrTypeError(f"kernel '{k.name}': a: e4m3 block(1, 128), b: e4m3 block(128, 128), out: bf16 or f32")
    ranks = (len(a.shape), len(b.shape))
    grouping = {(2, 2): "dense", (2, 3): "contiguous", (3, 3): "masked"}.get(ranks)
    if grouping is None or k.attr("grouping") != grouping:
        raise IrTypeError(f"kernel '{k.name}': a and b of ranks {ranks} need attr grouping = "
                          f"\"{grouping or 'dense'}\", got {k.attr('grouping')!r}")
    if a.shape[-1] != b.shape[-1] or out.shape != a.shape[:-1] + b.shape[-2:-1]:
        raise IrTypeError(f"kernel '{k.name}': b's K must match a's, and out be a's rows by b's N")
    extra = {"contiguous": ("group", a.shape[:1]), "masked": ("count", b.shape[:1])}.get(grouping)
    for t in k.tensors:
        if t.name in ("a", "b", "out"):
            continue
        if extra is None or t.name != extra[0] or t.role != "input" or t.dtype != "i32" or t.shape != extra[1]:
            raise IrTypeError(f"kernel '{k.name}': unexpected tensor '{t.name}' for a {grouping} gemm")
    if extra and k.tensor(extra[0]) is None:
        raise IrTypeError(f"kernel '{k.name}': a {grouping} gemm declares '{extra[0]}'")
    if k.funcs:
        raise IrTypeError(f"gemm kernel '{k.name}' defines no functions")
