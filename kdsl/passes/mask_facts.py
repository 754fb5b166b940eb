"""Simplify the score under what the mask implies.

A kernel uses an element's score only where the mask keeps the element: on tiles the mask
analysis proved full every element is kept, and on every other tile a masked element's score
is replaced by -inf before the softmax sees it (attention_wgmma.cuh, attention_mma.cuh). So
the score may be rewritten into any expression that agrees with it on kept elements.

Today: the sign of q - kv. Under a mask with a conjunct `kv <= q` (causal, sliding windows,
ALiBi's usual mask) |q - kv| is q - kv, and under `q <= kv` it is kv - q. ALiBi's
`slopes[h] * float(abs(i - j))` then becomes linear in q - kv, which codegen turns into one
FFMA an element (cexpr.py `_scaled_position`).

Only float arithmetic is rewritten, never a load's index: a masked element's loads are still
issued (the kernels compute every element of a tile), so an index must stay in bounds over
the whole (q, kv) domain, which runtime/bounds.py proves on the index as written.
"""
from __future__ import annotations

from dataclasses import replace

from .. import ir
from .simplify import simplify

# cmp(x, y) with {x, y} = {q, kv}: the sign of q - kv it implies when true
_SIGN = {("le", "kv", "q"): 1, ("lt", "kv", "q"): 1, ("ge", "q", "kv"): 1, ("gt", "q", "kv"): 1,
         ("le", "q", "kv"): -1, ("lt", "q", "kv"): -1, ("ge", "kv", "q"): -1, ("gt", "kv", "q"): -1}


def run(k: ir.Kernel) -> ir.Kernel:
    if k.kind != "attention":
        return k
    score, mask = k.func("score_log2"), k.func("mask")
    if score is None or mask is None:
        return k
    sign = q_minus_kv_sign(mask)
    if sign == 0:
        return k
    rewritten = simplify(_drop_abs(score, sign))
    return k if rewritten == score else k.with_func("score_log2", rewritten)


def q_minus_kv_sign(mask: ir.Expr) -> int:
    """+1 if the mask keeps only elements with q >= kv, -1 if only q <= kv, else 0."""
    signs = {_SIGN.get((c.op, *(a.name for a in c.args)))
             for c in ir.conjuncts(mask)
             if isinstance(c, ir.Op) and len(c.args) == 2 and all(isinstance(a, ir.Var) for a in c.args)}
    signs.discard(None)
    return signs.pop() if len(signs) == 1 else 0


def _drop_abs(e: ir.Expr, sign: int) -> ir.Expr:
    if isinstance(e, ir.Load):
        return e  # indices stay as written (module docstring)
    if not isinstance(e, ir.Op):
        return e
    if e.op == "abs" and e.ty == "f32" and _is_q_minus_kv(e.args[0]) != 0:
        dq = e.args[0]
        return dq if _is_q_minus_kv(dq) == sign else ir.Op("f32", "neg", (dq,))
    return replace(e, args=tuple(_drop_abs(a, sign) for a in e.args))


def _is_q_minus_kv(e: ir.Expr) -> int:
    """+1 for q - kv (dqkf, qf - kvf), -1 for kv - q, 0 for anything else."""
    if isinstance(e, ir.Var) and e.name == "dqkf":
        return 1
    if isinstance(e, ir.Op) and e.op == "neg":
        return -_is_q_minus_kv(e.args[0])
    if isinstance(e, ir.Op) and e.op == "sub" and all(isinstance(a, ir.Var) for a in e.args):
        return {("qf", "kvf"): 1, ("kvf", "qf"): -1}.get(tuple(a.name for a in e.args), 0)
    return 0
