"""kdsl's IR: typed expression trees inside a kernel record, with a stable text form.

The text form is what `kdsl compile --emit ir` prints and what later passes (and the LLM
pass) read and write; `parse_ir(print_ir(k)) == k` for every kernel (tested).

    attention relpos {
      input q: bf16[B, H, M, D]
      ...
      def score = (add:f32 s (float:f32 (sub:i32 q kv)))
      attr tile = [128, 64]
    }

Expressions are s-expressions `(op:type args...)`; variables are bare names whose types
come from the kernel (index variables and dims are i32; s, qk, scale are f32).
"""
from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import lark

from .errors import SourceError, Span

TYPES = ("i32", "f32", "bool")
# Variables every kernel may use, with their types; dims are added per kernel (all i32).
BUILTIN_VARS = {
    "s": "f32", "qk": "f32", "scale": "f32", "scale_log2": "f32",
    "b": "i32", "h": "i32", "q": "i32", "kv": "i32",
    "qf": "f32", "kvf": "f32", "dqkf": "f32",  # float(q), float(kv), float(q - kv) (passes/index_floats.py)
    "dqk": "i32",  # q - kv, in the offset part of a score (passes/offset_score.py)
    "kt": "f32",  # a score's key part, read from its table (passes/key_table.py score_keyed)
    "kvt": "i32",  # a key of the kv tile, the same for a thread's elements (passes/tile_blocks.py)
    # tile bounds (inclusive) used by the mask analysis' tile_empty / tile_full
    "q0": "i32", "q1": "i32", "k0": "i32", "k1": "i32",
}
# Only in tile predicates (passes/float_bounds.py): (widen_up:f32 x rel abs) is x + |x| rel + abs,
# a float bound moved past the kernel's rounding (widen_down: x - |x| rel - abs); one op, so that
# the bound's expression names x once.
WIDENINGS = ("widen_up", "widen_down")
# Also only in tile predicates: an f32's bits as an i32 that orders as the floats do (NaN with
# the sign bit below -inf, without it above +inf), and back, so that a tile summary's integer
# min / max bound float data (passes/float_bounds.py).
FLOAT_ORDER = ("f32_order", "order_f32")
FLOAT_FUNCS = ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "tanh", "sin", "cos", "tan", "sigmoid")
OPS = {
    # arithmetic (operands and result share a numeric type)
    "add", "sub", "mul", "div", "floordiv", "mod", "neg", "min", "max", "abs",
    # comparisons and logic (result bool)
    "lt", "le", "gt", "ge", "eq", "ne", "and", "or", "not",
    "where", "int", "float", *FLOAT_FUNCS,
    *("qmin", "qmax", "kvmin", "kvmax", "tmin", "tmax"),  # see TILE_REDUCTIONS
    *WIDENINGS, *FLOAT_ORDER,
}
# Only in tile predicates (mask analysis): the min / max of an i32 expression of the data over
# the block's query rows [q0, q1], its key columns [k0, k1], or the whole block ("tile": both).
# The GPU reads them from a tile summary that a small kernel computes before the attention
# kernel (kdsl/attention_summary.cuh).
TILE_REDUCTIONS = {"qmin": ("q", "min"), "qmax": ("q", "max"), "kvmin": ("kv", "min"), "kvmax": ("kv", "max"),
                   "tmin": ("tile", "min"), "tmax": ("tile", "max")}
TILE_AXES = {"q": ("q",), "kv": ("kv",), "tile": ("q", "kv")}  # the positions each axis ranges over


@dataclass(frozen=True)
class Expr:
    ty: str


@dataclass(frozen=True)
class Const(Expr):
    value: int | float | bool

    def __post_init__(self):
        # One NaN object for every NaN constant: NaN != NaN as floats, but tuples compare the
        # same object as equal, so equal kernels stay equal (parse_ir(print_ir(k)) == k).
        if isinstance(self.value, float) and math.isnan(self.value):
            object.__setattr__(self, "value", math.nan)


@dataclass(frozen=True)
class Var(Expr):
    name: str


@dataclass(frozen=True)
class Op(Expr):
    op: str
    args: tuple[Expr, ...]


@dataclass(frozen=True)
class Load(Expr):
    tensor: str
    indices: tuple[Expr, ...]


@dataclass(frozen=True)
class Tensor:
    role: str  # input | output | capture
    name: str
    dtype: str
    shape: tuple[Expr, ...]
    block: tuple[int, int] | None = None


@dataclass(frozen=True)
class Kernel:
    kind: str  # attention | gemm
    name: str
    tensors: tuple[Tensor, ...]
    funcs: tuple[tuple[str, Expr], ...] = ()
    attrs: tuple[tuple[str, Any], ...] = ()
    source: str = field(default="", compare=False)  # file:line, for messages only
    # Per function, the user's name of each parameter (kdsl's canonical name -> the user's),
    # so that messages quote expressions as they were written; for messages only.
    params: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = field(default=(), compare=False)

    def tensor(self, name: str) -> Tensor | None:
        return next((t for t in self.tensors if t.name == name), None)

    def func(self, name: str) -> Expr | None:
        return dict(self.funcs).get(name)

    def param_names(self, func: str) -> dict[str, str]:
        return dict(dict(self.params).get(func, ()))

    def attr(self, name: str, default=None):
        return dict(self.attrs).get(name, default)

    def with_func(self, name: str, expr: Expr) -> "Kernel":
        funcs = [(n, e) for n, e in self.funcs if n != name] + [(name, expr)]
        return replace(self, funcs=tuple(funcs))

    def with_attrs(self, **attrs) -> "Kernel":
        kept = [(n, v) for n, v in self.attrs if n not in attrs]
        return replace(self, attrs=tuple(kept + [(n, _freeze(v)) for n, v in attrs.items()]))

    @property
    def dims(self) -> dict[str, tuple[str, int]]:
        """Each runtime dimension symbol -> (tensor, axis) where it is first bound."""
        out: dict[str, tuple[str, int]] = {}
        for t in self.tensors:
            for axis, d in enumerate(t.shape):
                if isinstance(d, Var) and d.name not in out:
                    out[d.name] = (t.name, axis)
        return out


def entry_symbol(kind: str, name: str, head_dim: int, value_dim: int = 0) -> str:
    """The extern "C" symbol of a kernel's specialisation, and (without 'kdsl_') the stem of
    every file written for it: the type checker refuses two kernels that would share one.
    A value head dim other than q's is part of it: kdsl_mla_d192v128."""
    if kind != "attention":
        return f"kdsl_{name}"
    return f"kdsl_{name}_d{head_dim}" + (f"v{value_dim}" if value_dim and value_dim != head_dim else "")


def _freeze(v):
    return tuple(_freeze(x) for x in v) if isinstance(v, (list, tuple)) else v


# ---------------------------------------------------------------------------------- printing

def print_expr(e: Expr) -> str:
    if isinstance(e, Const):
        return _const_text(e)
    if isinstance(e, Var):
        return e.name
    if isinstance(e, Op):
        return f"({e.op}:{e.ty} " + " ".join(print_expr(a) for a in e.args) + ")"
    if isinstance(e, Load):
        return f"(load:{e.ty} {e.tensor} " + " ".join(print_expr(a) for a in e.indices) + ")"
    raise TypeError(e)


# How tightly each operator binds in kdsl's surface syntax (docs/language.md), loosest first.
_INFIX = {"or": ("or", 1), "and": ("and", 2), "lt": ("<", 4), "le": ("<=", 4), "gt": (">", 4), "ge": (">=", 4),
          "eq": ("==", 4), "ne": ("!=", 4), "add": ("+", 5), "sub": ("-", 5), "mul": ("*", 6), "div": ("/", 6),
          "floordiv": ("//", 6), "mod": ("%", 6)}
_ATOM = 8


def format_expr(e: Expr, names: dict[str, str] | None = None) -> str:
    """An expression as kdsl source would write it (`bias[h, i - j + N - 1]`), for messages
    meant for users; `names` renames variables (canonical parameter names to the user's)."""
    return _infix(e, names or {})[0]


def _infix(e: Expr, names: dict) -> tuple[str, int]:
    """(text, how tightly it binds)."""
    if isinstance(e, Const):
        text = _const_text(e)
        return text, 7 if text.startswith("-") else _ATOM
    if isinstance(e, Var):
        return names.get(e.name, e.name), _ATOM
    if isinstance(e, Load):
        return f"{e.tensor}[" + ", ".join(format_expr(i, names) for i in e.indices) + "]", _ATOM
    args = [_infix(a, names) for a in e.args]
    if e.op in _INFIX:
        sym, prec = _INFIX[e.op]
        (left, lp), (right, rp) = args
        # left-associative, comparisons not associative: parentheses keep the tree as it is
        return f"{_paren(left, lp, prec + (prec == 4))} {sym} {_paren(right, rp, prec + 1)}", prec
    if e.op == "not":
        return f"not {_paren(*args[0], 3)}", 3
    if e.op == "neg":
        return f"-{_paren(*args[0], _ATOM)}", 7
    return f"{e.op}(" + ", ".join(text for text, _ in args) + ")", _ATOM


def _paren(text: str, prec: int, at_least: int) -> str:
    return text if prec >= at_least else f"({text})"


def _const_text(c: Const) -> str:
    if c.ty == "bool":
        return "true" if c.value else "false"
    if c.ty == "i32":
        return str(int(c.value))
    v = float(c.value)
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if math.isnan(v):
        return "nan"
    text = repr(v)
    return text if any(ch in text for ch in ".en") else text + ".0"


def _shape_text(t: Tensor) -> str:
    s = f"{t.dtype}[" + ", ".join(print_expr(d) for d in t.shape) + "]"
    return s + (f" block({t.block[0]}, {t.block[1]})" if t.block else "")


def print_ir(k: Kernel) -> str:
    lines = [f"{k.kind} {k.name} {{"]
    lines += [f"  {t.role} {t.name}: {_shape_text(t)}" for t in k.tensors]
    lines += [f"  def {n} = {print_expr(e)}" for n, e in k.funcs]
    lines += [f"  attr {n} = {json.dumps(v)}" for n, v in k.attrs]
    return "\n".join(lines + ["}"]) + "\n"


# ---------------------------------------------------------------------------------- parsing

_IR_GRAMMAR = r"""
start: kernel*
kernel: NAME NAME "{" item* "}"
?item: tensor | func | attr
tensor: ROLE NAME ":" NAME "[" [sexpr ("," sexpr)*] "]" block?
block: "block" "(" INT "," INT ")"
func: "def" NAME "=" sexpr
attr: "attr" NAME "=" JSON
ROLE: "input" | "output" | "capture"
?sexpr: "(" OPTY sexpr* ")"  -> op
      | NUMBER                -> num
      | NAME                  -> name
OPTY: /[a-z_0-9]+:[a-z0-9]+/
NUMBER: /-?(inf|nan|[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?)/
NAME: /[A-Za-z_][A-Za-z_0-9]*/
INT: /[0-9]+/
JSON: /[^\n]+/
COMMENT: /#[^\n]*/
%import common.WS
%ignore WS
%ignore COMMENT
"""

# Deepest expression the parser builds: twice the language's own nesting limit, room for
# what the passes derive from such an expression, and far from Python's recursion limit.
MAX_IR_DEPTH = 128


@functools.cache
def _ir_lark() -> lark.Lark:
    return lark.Lark(_IR_GRAMMAR, parser="lalr", propagate_positions=True)


def parse_ir(text: str, file: str = "<ir>") -> list[Kernel]:
    """Parse the IR text form back into kernels (`#` starts a comment line). Errors are
    located SourceErrors; parsing builds data only (numbers are parsed as numbers, attribute
    values as JSON), so any text, however hostile, is safe to hand it."""
    try:
        tree = _ir_lark().parse(text)
    except lark.exceptions.UnexpectedInput as e:
        line, col = getattr(e, "line", 1) or 1, getattr(e, "column", 1) or 1
        raise SourceError(f"malformed IR: {type(e).__name__}", Span(file, line, col, line, col, text)) from None
    return [_build_kernel(kt, file, text) for kt in tree.children]


def _build_kernel(kt, file: str, text: str) -> Kernel:
    def located(item, build):
        try:
            return build()
        except SourceError as e:
            if e.span is not None:
                raise
            m = item.meta
            raise SourceError(e.message, Span(file, m.line, m.column, m.line, m.column, text)) from None
    kind, name, *items = kt.children
    tensors, funcs, attrs = [], [], []
    # Dims are bound by bare names in shapes; collect them first so exprs can be typed.
    var_types = dict(BUILTIN_VARS)
    for it in items:
        if it.data == "tensor":
            for d in it.children[3:]:
                if d is not None and getattr(d, "data", None) == "name":
                    var_types[str(d.children[0])] = "i32"
    for it in items:
        if it.data == "tensor":
            role, tname, dtype, *rest = it.children
            block = None
            if rest and rest[-1] is not None and getattr(rest[-1], "data", None) == "block":
                blk = rest.pop()
                block = located(it, lambda: (_small_int(blk.children[0]), _small_int(blk.children[1])))
            shape = located(it, lambda: tuple(_build_expr(d, var_types) for d in rest if d is not None))
            tensors.append(Tensor(str(role), str(tname), str(dtype), shape, block))
        elif it.data == "func":
            funcs.append((str(it.children[0]), located(it, lambda: _build_expr(it.children[1], var_types))))
        else:
            attrs.append((str(it.children[0]), located(it, lambda: _attr_value(str(it.children[1])))))
    return Kernel(str(kind), str(name), tuple(tensors), tuple(funcs), tuple(attrs), source=f"{file}:{kt.meta.line}")


def _attr_value(text: str):
    try:
        return _freeze(json.loads(text))
    except (ValueError, RecursionError) as e:  # JSONDecodeError, or digits past int()'s limit
        raise SourceError(f"IR: attribute value is not JSON ({type(e).__name__}): {text[:60]}", None) from None


def _small_int(token) -> int:
    text = str(token)
    if len(text.lstrip("-")) > 19:  # past any i32 or i64 (and far from int()'s digit limit)
        raise SourceError(f"IR: integer {text[:30]}... is out of range", None)
    return int(text)


def _build_expr(t, var_types, depth: int = 1) -> Expr:
    if depth > MAX_IR_DEPTH:
        raise SourceError(f"IR: expression nests deeper than {MAX_IR_DEPTH} levels", None)
    if t.data == "num":
        text = str(t.children[0])
        if text.lstrip("-").isdigit():
            value = _small_int(text)
            if not -2**31 <= value < 2**31:
                raise SourceError(f"IR: integer constant {value} does not fit in i32", None)
            return Const("i32", value)
        return Const("f32", float(text))
    if t.data == "name":
        n = str(t.children[0])
        if n in ("true", "false"):
            return Const("bool", n == "true")
        if n not in var_types:
            raise SourceError(f"IR: unknown variable '{n}'", None)
        return Var(var_types[n], n)
    op, ty = str(t.children[0]).split(":")
    args = t.children[1:]
    if op == "load":
        if not args or getattr(args[0], "data", None) != "name":
            raise SourceError("IR: a load names its tensor first: (load:TYPE TENSOR INDEX...)", None)
        return Load(ty, str(args[0].children[0]), tuple(_build_expr(a, var_types, depth + 1) for a in args[1:]))
    if op not in OPS or ty not in TYPES:
        raise SourceError(f"IR: unknown op or type '{op}:{ty}'", None)
    return Op(ty, op, tuple(_build_expr(a, var_types, depth + 1) for a in args))


def walk(e: Expr):
    """Yield every node of an expression, parents first."""
    yield e
    for c in getattr(e, "args", ()) or getattr(e, "indices", ()):
        yield from walk(c)


def walk_distinct(e: Expr):
    """Yield each distinct node of an expression once, by identity: a part that a derived
    expression names several times (the mask analysis' bounds) is visited once, where walk()
    visits it as often as it is named."""
    seen, stack = set(), [e]
    while stack:
        n = stack.pop()
        if id(n) not in seen:
            seen.add(id(n))
            yield n
            stack.extend(getattr(n, "args", ()) or getattr(n, "indices", ()))


def walk_operands_first(e: Expr):
    """Yield every node of an expression, each after its operands (innermost first)."""
    for c in getattr(e, "args", ()) or getattr(e, "indices", ()):
        yield from walk_operands_first(c)
    yield e


def conjuncts(e: Expr) -> list[Expr]:
    """The operands of a chain of `and`, left to right (e itself when it is no `and`)."""
    if isinstance(e, Op) and e.op == "and":
        return [c for a in e.args for c in conjuncts(a)]
    return [e]


def uses(e: Expr, name: str) -> bool:
    return any(isinstance(n, Var) and n.name == name for n in walk(e))


def only_largest(e: Expr, pred) -> Expr | None:
    """The one distinct largest subexpression of e that satisfies pred (no match inside a match
    is looked for), or None where there is none or there are several."""
    found = largest_all(e, pred)
    return found[0] if len(found) == 1 else None


def as_difference(e: Expr, q: str, kv: str, d: Var) -> Expr:
    """e with every `q - kv` (two variables) read as d and `kv - q` as -d."""
    if isinstance(e, Op) and e.op == "sub" and all(isinstance(a, Var) for a in e.args):
        names = tuple(a.name for a in e.args)
        if names == (q, kv):
            return d
        if names == (kv, q):
            return Op(d.ty, "neg", (d,))
    if isinstance(e, Op):
        return Op(e.ty, e.op, tuple(as_difference(a, q, kv, d) for a in e.args))
    return e


def largest_all(e: Expr, pred) -> list[Expr]:
    """The distinct largest subexpressions of e that satisfy pred (no match inside a match is
    looked for), in the order they are met."""
    found = []

    def visit(x):
        if pred(x):
            if x not in found:
                found.append(x)
            return
        for a in getattr(x, "args", ()) or getattr(x, "indices", ()):  # into a load's indices too (walk's)
            visit(a)
    visit(e)
    return found


def loads_at(e: Expr, names, skip: str | None = None) -> bool:
    """Whether e loads an element of a captured tensor (other than `skip`) at an index that
    depends on any of `names` (one name or several)."""
    names = (names,) if isinstance(names, str) else tuple(names)
    return any(isinstance(n, Load) and n.tensor != skip and any(uses(i, v) for i in n.indices for v in names)
               for n in walk(e))


def substitute(e: Expr, mapping: dict[str, Expr]) -> Expr:
    if isinstance(e, Var):
        return mapping.get(e.name, e)
    if isinstance(e, Op):
        return replace(e, args=tuple(substitute(a, mapping) for a in e.args))
    if isinstance(e, Load):
        return replace(e, indices=tuple(substitute(a, mapping) for a in e.indices))
    return e


def replace_expr(e: Expr, old: Expr, new: Expr) -> Expr:
    """e with every occurrence of the subexpression old (in operands and indices) read as new: a
    part evaluated once elsewhere, named by a variable (key_table's kt, key_mask's kb, key_values'
    kx and qx)."""
    if e == old:
        return new
    if isinstance(e, Op):
        return replace(e, args=tuple(replace_expr(a, old, new) for a in e.args))
    if isinstance(e, Load):
        return replace(e, indices=tuple(replace_expr(a, old, new) for a in e.indices))
    return e


GRAMMAR_PATH = Path(__file__)
