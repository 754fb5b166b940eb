"""IR expression -> CUDA C++ expression text, and the names user identifiers get in C++."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy

from .. import ir
from ..passes.int_signs import item_level, nonnegative
from ..passes.invariant_factors import invariant

# `and` and `or` evaluate both sides (& and | on bools): no branch, so NVVM may issue a mask's
# loads together and merge equal ones across elements. Safe: runtime/bounds.py proves every
# index in bounds over the whole (b, h, q, kv) domain, guards or not.
_BINARY = {"add": "+", "sub": "-", "mul": "*", "div": "/", "lt": "<", "le": "<=", "gt": ">",
           "ge": ">=", "eq": "==", "ne": "!=", "and": "&", "or": "|"}
# kdsl::math_* (common.cuh) use the hardware approximations unless KDSL_EXACT_MATH is defined.
_FLOAT_FN = {"exp": "kdsl::math_exp", "exp2": "kdsl::math_exp2", "log": "kdsl::math_log",
             "log2": "kdsl::math_log2", "sqrt": "sqrtf", "rsqrt": "rsqrtf", "tanh": "kdsl::math_tanh",
             "sin": "kdsl::math_sin", "cos": "kdsl::math_cos", "tan": "tanf", "sigmoid": "kdsl::math_sigmoid"}
# common.cuh's reader of each captured element type (overloaded on the pointer type); floats by load_f32
_LOADERS = {"i32": "kdsl::load_i32", "i8": "kdsl::load_i32", "u8": "kdsl::load_i32", "bool": "kdsl::load_bool"}

# Positions as floats, which the attention kernels pass in two parts (attention_variant.cu.j2):
# a base per row or tile, and the element's column offset `col`, a constant once the caller's
# loop over a thread's elements is unrolled. name -> (base, sign of col).
SPLIT_POSITIONS = {"kvf": ("kvf0", 1), "dqkf": ("dq0", -1)}


def split_position(name: str) -> str:
    base, sign = SPLIT_POSITIONS[name]
    return f"({base} {'+' if sign > 0 else '-'} col)"


# User names reach generated C++ only through these two functions. Every identifier they
# make starts with 'cap_' or 'dim_', and no identifier kdsl itself writes (template locals,
# entry parameters, header names) does; so a user may name a tensor or a dimension like a
# C++ keyword, a macro or one of kdsl's own parameters without a collision.
def capture_ident(name: str) -> str:
    """C++ identifier of captured tensor `name` (a struct field, an entry parameter)."""
    return f"cap_{name}"


def dim_ident(name: str) -> str:
    """C++ identifier of dimension `name` when it travels as its own int parameter."""
    return f"dim_{name}"


@dataclass(frozen=True)
class Capture:
    """How generated code reaches a captured tensor: its field and C++ shape expressions."""

    field: str
    dtype: str
    shape: tuple[str, ...]


class CEmitter:
    hoists_item_divisions = True  # a work item's divisions in the form NVVM hoists (floordiv_invariant)

    def __init__(self, variables: dict[str, str], captures: dict[str, Capture],
                 summary_slots: dict[tuple[str, ir.Expr], int] | None = None, streamed: dict[str, str] | None = None,
                 divisors: tuple[ir.Expr, ...] = (), sizes: frozenset[str] = frozenset(),
                 prepared: dict[ir.Expr, str] | None = None):
        # summary_slots: (axis, expression) -> slot of the runtime tile summary, for the tile
        # reductions of the mask analysis' predicates (kdsl/attention_summary.cuh).
        # streamed: the captured tensors whose elements the Variant's score and mask_at get as
        # arguments (tensor -> its name: sv, sv2), read from their tiles in shared memory
        # (passes/streaming.py), in programs that stream them.
        self.variables, self.captures, self.summary_slots = variables, captures, summary_slots or {}
        self.streamed = streamed or {}
        # divisors: those a kernel prepares once an item (passes/item_divisions.py divisors()); an
        # element's // or % by one goes through kdsl::floordiv_by / floormod_by (divisor.cuh),
        # told which operands are >= 0 (the dims, sizes, are)
        self.divisors, self.sizes = divisors, sizes
        # prepared: divisors the function being emitted holds as a kdsl::Divisor local (the
        # Variant's tile(): attention_variant.cu.j2), by the local's name
        self.prepared = prepared or {}
        self._depths: dict[int, tuple[ir.Expr, int]] = {}  # _min_max_depth by node: id -> (node kept alive, depth)

    def _min_max_depth(self, e: ir.Expr) -> int:
        """Integer min / max ops on the longest path from e down to a leaf, remembered per node
        (by identity: an Expr's hash walks its whole tree): asked at every min / max of a nested
        chain, a walk each took time quadratic in its depth (0.5 of a fuzzed program's 0.9 s)."""
        hit = self._depths.get(id(e))
        if hit is None:
            below = max((self._min_max_depth(x) for x in getattr(e, "args", ())), default=0)
            hit = self._depths[id(e)] = (e, below + (isinstance(e, ir.Op) and e.op in ("min", "max") and e.ty == "i32"))
        return hit[1]

    def __call__(self, e: ir.Expr) -> str:
        if isinstance(e, ir.Const):
            return _const(e)
        if isinstance(e, ir.Var):
            return self.variables[e.name]
        if isinstance(e, ir.Load):
            return self._load(e)
        if e.op in ir.TILE_REDUCTIONS:
            return self._tile_reduction(e)
        if e.op == "mul" and e.ty == "f32":
            scaled = self._scaled_position(e)
            if scaled is not None:
                return scaled
        a = [self(x) for x in e.args]
        op = e.op
        if op == "div":  # floats only (the type checker refuses '/' on ints)
            return f"kdsl::math_div({a[0]}, {a[1]})"
        if op in _BINARY:
            return f"({a[0]} {_BINARY[op]} {a[1]})"
        if op in ("floordiv", "mod"):
            name = "floordiv" if op == "floordiv" else "floormod"
            if e.args[1] in self.divisors or e.args[1] in self.prepared:
                signs = ", ".join("true" if nonnegative(x, self.sizes) else "false" for x in e.args[::-1])
                return f"kdsl::{name}_by<{signs}>({a[0]}, {self.prepared.get(e.args[1], a[1])})"
            # a divisor that varies per element (an item's is divided once an item), both operands
            # >= 0: unsigned, no floor fixup (common.cuh)
            if not item_level(e.args[1]) and all(nonnegative(x, self.sizes) for x in e.args):
                return f"kdsl::{name}_nonneg({a[0]}, {a[1]})"
            # both operands the same for a whole work item (`h // (H // Hkv)`): in the form that
            # never traps, which NVVM hoists out of the kv loop (divisor.cuh floordiv_invariant)
            if self.hoists_item_divisions and item_level(e) and not isinstance(e.args[1], ir.Const):
                return f"kdsl::{name}_invariant({a[0]}, {a[1]})"
            # a constant divisor of a dividend >= 0 by its form (`i % 96`, `(i // 3 + j // 5) % 7`):
            # unsigned, a multiply-high and a shift, no sign or floor fixup (a power of two is a
            # shift or a mask already)
            divisor = e.args[1]
            if isinstance(divisor, ir.Const) and divisor.value > 0 and not _power_of_two(divisor) \
                    and nonnegative(e.args[0], self.sizes):
                return f"kdsl::{name}_nonneg({a[0]}, {a[1]})"
            return _floor_op(op, a, e.args[1])
        if op == "neg":  # the space keeps "- -1" from reading as a decrement
            return f"(- {a[0]})"
        if op == "not":
            return f"(!{a[0]})"
        if op in ("min", "max"):
            if e.ty == "f32":
                return f"f{op}f({a[0]}, {a[1]})"
            text = f"kdsl::i{op}({a[0]}, {a[1]})"
            return f"kdsl::opaque_value({text})" if self._min_max_depth(e) % OPAQUE_EVERY == 0 else text
        if op == "abs":
            return f"fabsf({a[0]})" if e.ty == "f32" else f"kdsl::iabs({a[0]})"
        if op == "where":
            return f"({a[0]} ? {a[1]} : {a[2]})"
        if op == "int":
            return f"((int)({a[0]}))"
        if op == "float":
            return f"((float)({a[0]}))"
        if op in (*ir.FLOAT_ORDER, *ir.WIDENINGS):  # common.cuh's, of the same name
            return f"kdsl::{op}({', '.join(a)})"
        return f"{_FLOAT_FN[op]}({a[0]})"

    def _scaled_position(self, e: ir.Op) -> str | None:
        """x * position, x the same for every element (a slope, a constant): distributed over
        the position's two parts, x * base + x * col, as fmaf(x, col, x * base). NVVM computes
        x * base once per row or tile and keeps one FFMA with an immediate per element; it
        could not distribute x itself (float arithmetic does not reassociate)."""
        for x, p in (e.args, e.args[::-1]):
            sign = 1
            while isinstance(p, ir.Op) and p.op == "neg":
                p, sign = p.args[0], -sign
            if not (isinstance(p, ir.Var) and p.name in SPLIT_POSITIONS
                    and self.variables.get(p.name) == split_position(p.name)):
                continue
            if not invariant(x):
                continue
            base, col_sign = SPLIT_POSITIONS[p.name]
            xs = self(x)
            scaled = f"({xs})" if sign > 0 else f"(- ({xs}))"
            return f"fmaf({scaled if col_sign > 0 else f'(- {scaled})'}, col, {scaled} * {base})"
        return None

    def _tile_reduction(self, e: ir.Op) -> str:
        axis, which = ir.TILE_REDUCTIONS[e.op]
        slot = self.summary_slots[(axis, e.args[0])]
        field = "x" if which == "min" else "y"
        v = self.variables
        return f"kdsl::tile_summary<Variant, {slot}>(a, c.summary, {v['b']}, {v['h']}, {v['q0']}, {v['k0']}).{field}"

    def linear_index(self, e: ir.Load) -> str:
        """The element offset a load reads (row-major over the captured tensor's shape), in i64."""
        cap = self.captures[e.tensor]
        idx = [self(i) for i in e.indices]
        linear = f"(kdsl::i64)({idx[0]})"
        for i, dim in zip(idx[1:], cap.shape[1:]):
            linear = f"({linear} * ({dim}) + ({i}))"
        return linear

    def _load(self, e: ir.Load) -> str:
        cap = self.captures[e.tensor]
        linear = self.linear_index(e)
        fn = _LOADERS.get(cap.dtype, "kdsl::load_f32")
        if e.tensor in self.streamed:  # sv: a float, or an int for integer and bool tensors
            sv = self.streamed[e.tensor]
            return f"(kStreamLoads ? {f'{sv} != 0' if cap.dtype == 'bool' else sv} : {fn}({cap.field}, {linear}))"
        return f"{fn}({cap.field}, {linear})"


class WideEmitter(CEmitter):
    """i32 arithmetic in 64 bits (every i32 leaf widened, kdsl::imin & co. have i64 forms): for
    bounds a pass derives (passes/kv_bounds.py), whose intermediate values may leave the i32
    range where the mask's own never do. Its divisions keep the signed form: an item's in 64
    bits, hoisted, called the 64-bit routine more often (kv_group_parity's forward, sm_90a)."""

    hoists_item_divisions = False

    def __call__(self, e: ir.Expr) -> str:
        text = super().__call__(e)
        if e.ty == "i32" and (not isinstance(e, ir.Op) or e.op == "int"):
            return f"((kdsl::i64){text})"
        return text


# NVVM's optimizer takes ~2.5x longer a level of nested integer min / max over positions (a
# capture index of 10 nested `min((...) - j, i)`: 20 s; 16: over 10 minutes), and the source
# stays linear. Every OPAQUE_EVERY levels the chain's value goes through kdsl::opaque_value, which
# the optimizer cannot see through; programs with shallower chains are emitted unchanged.
OPAQUE_EVERY = 6


def _power_of_two(c: ir.Const) -> bool:
    return c.value > 0 and c.value & (c.value - 1) == 0


def _floor_op(op: str, a, divisor: ir.Expr) -> str:
    # A positive power-of-two divisor makes floor division a shift and floor mod a mask.
    if isinstance(divisor, ir.Const) and _power_of_two(divisor):
        shift = int(divisor.value).bit_length() - 1
        return f"({a[0]} >> {shift})" if op == "floordiv" else f"({a[0]} & {divisor.value - 1})"
    return f"kdsl::{'floordiv' if op == 'floordiv' else 'floormod'}({a[0]}, {a[1]})"


def _const(c: ir.Const) -> str:
    """The IR's own spelling of a constant, plus the C++ float suffix; inf and NaN by bits.
    Constants are folded in double precision: the kernel's float is the nearest f32, so a
    value beyond the f32 range is +-inf here, as in any f32 arithmetic."""
    if c.ty == "i32" and c.value == -2**31:
        return "(-2147483647 - 1)"  # the literal 2147483648 is not an int
    if c.ty != "f32":
        return ir.print_expr(c)
    with numpy.errstate(over="ignore"):
        v = float(numpy.float32(c.value))
    if not math.isfinite(v):
        if math.isnan(v):
            return "__int_as_float(0x7fc00000)"
        return "(-kdsl::neg_inf())" if v > 0 else "kdsl::neg_inf()"
    return ir.print_expr(ir.Const("f32", v)) + "f"
