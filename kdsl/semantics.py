"""The meaning of every IR op, in one place: on Python scalars (constant folding) and on
torch tensors (the float64 reference, and the FlexAttention translation)."""
from __future__ import annotations

import math

from . import ir


def _floordiv(a, b):
    return a // b


def _sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


_SCALAR = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b, "floordiv": _floordiv, "mod": lambda a, b: a % b,
    "neg": lambda a: -a, "min": min, "max": max, "abs": abs,
    "lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b,
    "and": lambda a, b: a and b, "or": lambda a, b: a or b, "not": lambda a: not a,
    "where": lambda c, a, b: a if c else b,
    "int": lambda a: int(a), "float": lambda a: float(a),
    "exp": math.exp, "exp2": lambda a: 2.0 ** a, "log": math.log, "log2": math.log2,
    "sqrt": math.sqrt, "rsqrt": lambda a: 1.0 / math.sqrt(a), "tanh": math.tanh,
    "sin": math.sin, "cos": math.cos, "tan": math.tan, "sigmoid": _sigmoid,
}


def scalar_op(op: str, vals):
    """Evaluate one op on Python values; raises ZeroDivisionError/ValueError as Python does."""
    return _SCALAR[op](*vals)


def eval_torch(e: ir.Expr, env: dict, captures: dict, float_dtype=None):
    """Evaluate an IR expression with torch; env maps variable names to tensors or numbers.

    Floats are computed in `float_dtype` (float64 for the reference), integers in int64,
    so the reference never overflows where the kernel's i32 would not either.
    """
    import torch

    fdt = float_dtype or torch.float64

    def go(x):
        if isinstance(x, ir.Const):
            return x.value
        if isinstance(x, ir.Var):
            return env[x.name]
        if isinstance(x, ir.Load):
            t = captures[x.tensor]
            idx = tuple(_as_long(go(i)) for i in x.indices)
            v = t[idx]
            return v.to(fdt) if x.ty == "f32" else v.to(torch.int64)
        args = [go(a) for a in x.args]
        return _torch_op(torch, x, args, fdt)

    def _as_long(v):
        return v.long() if isinstance(v, torch.Tensor) else int(v)

    return go(e)


def _torch_op(torch, x: ir.Op, args, fdt):
    op = x.op
    if all(not isinstance(a, torch.Tensor) for a in args):
        return scalar_op(op, args)
    t = [a if isinstance(a, torch.Tensor) else torch.tensor(a) for a in args]
    if op == "add": return args[0] + args[1]
    if op == "sub": return args[0] - args[1]
    if op == "mul": return args[0] * args[1]
    if op == "div": return args[0] / args[1]
    if op == "floordiv": return torch.div(t[0], t[1], rounding_mode="floor")
    if op == "mod": return torch.remainder(t[0], t[1])
    if op == "neg": return -args[0]
    if op == "min": return torch.minimum(t[0], t[1].to(t[0].device))
    if op == "max": return torch.maximum(t[0], t[1].to(t[0].device))
    if op == "abs": return torch.abs(t[0])
    if op in ("lt", "le", "gt", "ge", "eq", "ne"):
        return getattr(torch, op)(t[0], t[1].to(t[0].device)) if isinstance(args[0], torch.Tensor) \
            else getattr(torch, op)(t[1].new_tensor(args[0]), t[1])
    if op == "and": return torch.logical_and(t[0], t[1].to(t[0].device))
    if op == "or": return torch.logical_or(t[0], t[1].to(t[0].device))
    if op == "not": return torch.logical_not(t[0])
    if op == "where":
        c, a, b = args
        dev = next(v.device for v in args if isinstance(v, torch.Tensor))
        c = c if isinstance(c, torch.Tensor) else torch.tensor(c, device=dev)
        a = a if isinstance(a, torch.Tensor) else torch.tensor(a, device=dev, dtype=_dtype_of(torch, x.ty, fdt))
        b = b if isinstance(b, torch.Tensor) else torch.tensor(b, device=dev, dtype=_dtype_of(torch, x.ty, fdt))
        return torch.where(c, a, b)
    if op == "int": return t[0].to(torch.int64)  # truncation toward zero, as C and Python int()
    if op == "float": return t[0].to(fdt)
    if op == "rsqrt": return torch.rsqrt(t[0])
    return getattr(torch, op)(t[0])


def _dtype_of(torch, ty, fdt):
    return {"f32": fdt, "i32": torch.int64, "bool": torch.bool}[ty]
