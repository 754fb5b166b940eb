"""The meaning of every IR op, in one place: on Python scalars (constant folding, shapes)
and on numpy arrays or torch tensors (the float64 reference, the CPU interpreter, the
FlexAttention translation)."""
from __future__ import annotations

import numpy

from . import ir


I32_MIN, I32_MAX = -2**31, 2**31 - 1
UNTYPED_INT_MAX = 2**63 - 1  # an untyped integer constant (literal) stays within +-this


def _ieee(fn):
    """A float function with IEEE-754 double results: overflow gives +-inf and an invalid
    operation NaN, as on the GPU, instead of Python's exceptions."""
    def f(*args):
        with numpy.errstate(all="ignore"):
            return float(fn(*(numpy.float64(a) for a in args)))
    return f


def _div(a, b):
    """IEEE division: x/0 is +-inf or NaN. Python numbers give a Python float; numpy
    scalars keep their type (the interpreter's float32)."""
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return _ieee(numpy.divide)(a, b)
    with numpy.errstate(all="ignore"):
        return a / b


def _nan_ignoring(pick):
    """fminf / fmaxf: a NaN operand yields the other one. Exact on ints."""
    return lambda a, b: b if a != a else (a if b != b else pick(a, b))


_SCALAR = {
    # Python's + - * are exact on ints and IEEE on floats already (overflow gives inf)
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "div": _div, "floordiv": lambda a, b: a // b, "mod": lambda a, b: a % b,
    "min": _nan_ignoring(min), "max": _nan_ignoring(max),
    "neg": lambda a: -a, "abs": abs,
    "lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b,
    "and": lambda a, b: a and b, "or": lambda a, b: a or b, "not": lambda a: not a,
    "where": lambda c, a, b: a if c else b,
    "int": lambda a: int(a), "float": lambda a: float(a),
    "exp": _ieee(numpy.exp), "exp2": _ieee(numpy.exp2), "log": _ieee(numpy.log), "log2": _ieee(numpy.log2),
    "sqrt": _ieee(numpy.sqrt), "rsqrt": _ieee(lambda a: 1.0 / numpy.sqrt(a)), "tanh": _ieee(numpy.tanh),
    "sin": _ieee(numpy.sin), "cos": _ieee(numpy.cos), "tan": _ieee(numpy.tan),
    "sigmoid": _ieee(lambda a: 1.0 / (1.0 + numpy.exp(-a))),
    "widen_up": lambda x, r, a: x + (abs(x) * r + a), "widen_down": lambda x, r, a: x - (abs(x) * r + a),
    "f32_order": lambda x: _flip(int(numpy.asarray(x, numpy.float32).view(numpy.int32))),
    "order_f32": lambda s: float(numpy.asarray(_flip(s), numpy.int32).view(numpy.float32)),
}


def _flip(bits):
    """An f32's bits (as a signed int) to an int that orders as the floats do, and back: a
    negative float's magnitude bits inverted (an involution on i32)."""
    return (bits < 0) * (bits ^ 0x7FFFFFFF) + (bits >= 0) * bits


def scalar_op(op: str, vals):
    """Evaluate one op on Python values. Floats follow IEEE-754 (inf and NaN are values);
    integer division by zero raises ZeroDivisionError, int() of NaN or inf ValueError or
    OverflowError, as Python does."""
    return _SCALAR[op](*vals)


def eval_scalar(e: ir.Expr, dims: dict):
    """A dimension-only expression (a shape, the default scale) on Python numbers."""
    if isinstance(e, ir.Const):
        return e.value
    if isinstance(e, ir.Var):
        return dims[e.name]
    return scalar_op(e.op, [eval_scalar(a, dims) for a in e.args])


class FoldError(ArithmeticError):
    """A constant expression with no value in its type: integer division by zero, an
    integer result out of range, int() of NaN, +-inf or a float beyond i32."""


def fold(op: str, ty: str | None, vals):
    """The value of `op` on constants, as docs/language.md ("Constants") defines it: floats
    in IEEE-754 double precision, integers exact and required to fit their type: i32, or
    +-UNTYPED_INT_MAX for an untyped integer literal (ty None). Raises FoldError."""
    try:
        v = scalar_op(op, vals)
    except ZeroDivisionError:
        raise FoldError("integer division by zero") from None
    except (ValueError, OverflowError):  # int() of NaN or +-inf
        raise FoldError(f"int() of {vals[0]} has no integer value") from None
    if ty == "f32":
        return float(v)
    if ty == "bool":
        return bool(v)
    lo, hi = (I32_MIN, I32_MAX) if ty == "i32" else (-UNTYPED_INT_MAX, UNTYPED_INT_MAX)
    if not lo <= v <= hi:
        raise FoldError(f"{v} does not fit in {'i32' if ty == 'i32' else 'a 64-bit integer'}")
    return int(v)


def eval_torch(e: ir.Expr, env: dict, captures: dict, float_dtype=None):
    """Evaluate an IR expression with torch; env maps variable names to tensors or numbers."""
    from .backends import Torch
    return eval_array(e, env, captures, Torch(float_dtype=float_dtype))


def eval_numpy(e: ir.Expr, env: dict, captures: dict, float_dtype=None):
    from .backends import Numpy
    return eval_array(e, env, captures, Numpy(float_dtype))


def eval_array(e: ir.Expr, env: dict, captures: dict, backend, host=None, on_float_load=None, branch_gate=None):
    """Evaluate an IR expression on a kdsl.backends backend; env maps variable names to
    arrays or numbers. Floats are computed in the backend's float dtype (float64 for the
    reference), integers in int64, so the reference never overflows where the kernel's i32
    would not either.

    With `host` (a backend on the CPU), the operand of every int() over a float is evaluated
    there and its integer moved back. The GPU's float64 log, exp and pow differ from the CPU's
    libm in the last bit here and there, and where the exact value is an integer (the edge of
    a T5 bucket: log(64 / 8) / log(128 / 8) * 8 = 6) that bit decides which integer comes out.
    The CPU's answer is the one the interpreter and the CPU-only tests see, so the reference
    agrees with them on every machine.

    on_float_load: applied to each float element read (the reference's gradient gate).
    branch_gate: c -> (gate where c, gate where not c), each applied to the float variables and
    elements a float `where(c, a, b)`'s branch reads: the gradient of a branch stops where the
    other is taken (autograd's 0 times a NaN derivative of the branch not taken, sqrt(1 - s)
    at s > 1, would otherwise be NaN)."""
    def go(x, leaf):
        if isinstance(x, ir.Const):
            return x.value
        if isinstance(x, ir.Var):
            return leaf(env[x.name]) if leaf is not None and x.ty == "f32" else env[x.name]
        if isinstance(x, ir.Load):
            v = backend.index(captures[x.tensor], [go(i, None) for i in x.indices])
            if x.ty == "bool":  # a bool tensor's element (0 / 1), never an int under not / and;
                # already bool in torch / numpy / cupy: as it is (FlexAttention's mask_mod then
                # reads the tensor as its users write it, with no compare)
                return v if str(getattr(v, "dtype", "")).endswith("bool") else v != 0
            if x.ty != "f32":
                return backend.to_int(v)
            v = backend.to_float(v) if on_float_load is None else on_float_load(backend.to_float(v))
            return v if leaf is None else leaf(v)
        if host is not None and x.op == "int" and x.args[0].ty == "f32":
            arg, used = x.args[0], list(ir.walk(x.args[0]))
            names = {n.name for n in used if isinstance(n, ir.Var)}
            tensors = {n.tensor for n in used if isinstance(n, ir.Load)}
            on_host = eval_array(arg, {n: host.move(env[n]) for n in names},
                                 {n: host.move(captures[n]) for n in tensors}, host)
            return _array_op(backend, x, [backend.move(on_host)])
        if branch_gate is not None and x.op == "where" and x.ty == "f32":
            c = go(x.args[0], None)
            taken, other = branch_gate(c)
            then = taken if leaf is None else (lambda v: taken(leaf(v)))
            orelse = other if leaf is None else (lambda v: other(leaf(v)))
            return _array_op(backend, x, [c, go(x.args[1], then), go(x.args[2], orelse)])
        return _array_op(backend, x, [go(a, leaf) for a in x.args])
    with backend.quiet():
        return go(e, None)


def _floor_division(be, op: str, a, b):
    """Python's floor // and % (the remainder takes the divisor's sign) on arrays, and 0 where
    the divisor is 0, as the kernel computes them (common.cuh): a divisor of positions and
    sizes that may be 0 is refused before launch (runtime/bounds.py), so a zero here is in a
    `where` branch not taken, or read from data (docs/language.md)."""
    if not isinstance(b, be.array):  # a divisor of the dims alone: a Python int
        if b == 0:
            return a * 0
        return a // b if op == "floordiv" else a % b
    zero = b == 0
    b = be.xp.where(zero, 1, b)
    return be.xp.where(zero, 0, a // b if op == "floordiv" else a % b)


def _array_op(be, x: ir.Op, args):
    """Operator syntax where it exists, so the same code traces under torch.compile (the
    FlexAttention translation) and runs eagerly on broadcast index grids."""
    op, xp = x.op, be.xp
    if all(not isinstance(a, be.array) for a in args):
        return scalar_op(op, args)
    a = args[0]
    b = args[1] if len(args) > 1 else None
    if op == "add": return a + b
    if op == "sub": return a - b
    if op == "mul": return a * b
    if op == "div": return a / b
    if op in ("floordiv", "mod"): return _floor_division(be, op, a, b)
    if op == "neg": return -a
    if op == "lt": return a < b
    if op == "le": return a <= b
    if op == "gt": return a > b
    if op == "ge": return a >= b
    if op == "eq": return a == b
    if op == "ne": return a != b
    if op == "and": return a & b
    if op == "or": return a | b
    if op == "not": return ~a if isinstance(a, be.array) else (not a)
    if op in ("min", "max"):
        if not isinstance(a, be.array):
            a, b = b, a
        if x.ty == "f32":  # fminf / fmaxf, as the GPU and fold compute: a NaN operand yields the other
            return be.fmin(a, b) if op == "min" else be.fmax(a, b)
        if not isinstance(b, be.array):
            return be.clamp(a, hi=b) if op == "min" else be.clamp(a, lo=b)
        return xp.minimum(a, b) if op == "min" else xp.maximum(a, b)
    if op == "abs": return xp.abs(a)
    if op == "f32_order": return _flip(be.f32_bits(a))
    if op == "order_f32": return be.bits_f32(_flip(a))
    if op == "widen_up": return a + (xp.abs(a) * args[1] + args[2])
    if op == "widen_down": return a - (xp.abs(a) * args[1] + args[2])
    if op == "where":  # a condition over dims only is a Python bool, which torch.where refuses
        return xp.where(*args) if isinstance(args[0], be.array) else (args[1] if args[0] else args[2])
    if op == "int": return be.to_int(a) if x.ty == "i32" else a  # truncates toward zero
    if op == "float": return be.to_float(a)
    if op == "rsqrt": return 1 / xp.sqrt(a)
    if op == "sigmoid": return 1 / (1 + xp.exp(-a))
    return getattr(xp, op)(a)
