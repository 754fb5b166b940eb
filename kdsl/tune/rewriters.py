"""Rewriters: where proposals come from. Both answer in the protocol's text form, so every
proposal, built-in or not, goes through the same parser and guard.

Search (the default, offline) proposes, in order, for the current program:
1. the fast-math choice (attr math = "fast": the hardware approximations docs/language.md
   bounds), then each legal value of each schedule attribute (tiles, warpgroups, stages, the
   CTA schedule);
2. algebraic rewrites of score_log2 from RULES, at every node where one applies;
3. pairs of tile width and stages (a wider tile often fits only with fewer stages).
Candidates illegal for any head dim are skipped before they cost a build. This is
coordinate descent: a pass goes through the list once, each candidate judged against the
program as it stands then; a pass that changed the program is followed by another (where a
value rejected as slower is tried again, its neighbours having moved), and a pass that
changed nothing ends the search.

Llm asks a chat-completions endpoint (llm_client) with protocol.messages.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from itertools import product

from .. import ir
from ..errors import KdslError
from ..passes import pipeline, tiling
from ..passes.simplify import op
from . import protocol


@dataclass
class Context:
    """What a rewriter sees for the next proposal."""
    current: ir.Kernel                  # the program so far (original + accepted proposals)
    lowered_ir: str                     # its lowered IR text, at the first head dim
    target: object                      # passes.target.Target
    target_text: str
    head_dims: tuple
    history: list = field(default_factory=list)   # earlier log entries for this kernel
    tried: set = field(default_factory=set)       # keys of (program, lines) already judged


def tried_key(current: ir.Kernel, lines: str) -> str:
    import hashlib
    return hashlib.sha256((ir.print_ir(current) + "\n--\n" + lines).encode()).hexdigest()[:24]


def fenced(lines: str) -> str:
    return f"```\n{lines}\n```"


class Search:
    name = "search"

    def __init__(self):
        self._cursor = 0          # where this pass over enumerate() has got to
        self._pass_start = None   # the program the pass started from

    def propose(self, ctx: Context) -> str | None:
        """The next untried candidate of this pass; a pass that changed the program is
        followed by another from the top, one that changed nothing ends the search."""
        while True:
            todo = list(self.enumerate(ctx))
            if self._pass_start is None:
                self._pass_start = ctx.current
            for i in range(self._cursor, len(todo)):
                if todo[i] is not None and tried_key(ctx.current, todo[i]) not in ctx.tried:
                    self._cursor = i + 1
                    return fenced(todo[i])
            if ctx.current == self._pass_start:
                return None
            self._cursor, self._pass_start = 0, None

    def upcoming(self, ctx: Context, n: int) -> list[str]:
        """The next n candidates of this pass (for building them ahead of their turn)."""
        todo = list(self.enumerate(ctx))[self._cursor:]
        return [x for x in todo if x is not None and tried_key(ctx.current, x) not in ctx.tried][:n]

    def enumerate(self, ctx: Context):
        """Candidate replacement lines, in order; None holds the place of a candidate that
        would change nothing or is illegal, so positions stay put as the program changes."""
        k = ctx.current
        _, attrs = protocol.offered(k, ctx.target)
        if "math" in attrs:
            yield 'attr math = "fast"' if k.attr("math") != "fast" else None
        singles = [{a: v} for a, values in attrs.items() if a != "math" for v in values]
        low = pipeline.lower(k, ctx.target, ctx.head_dims[0])
        yield from self._changes(k, low, ctx, singles)
        if k.kind == "attention":
            score = low.func("score_log2")
            seen = {score}
            for _, rule in RULES:
                for new in _everywhere(score, rule, k):
                    if new not in seen:
                        seen.add(new)
                        yield f"def score_log2 = {ir.print_expr(new)}"
        pairs = [{"tile_n": n, "stages": s} for n, s in product(attrs.get("tile_n", ()), attrs.get("stages", ()))]
        yield from self._changes(k, low, ctx, pairs)

    @staticmethod
    def _changes(k, low, ctx, changes):
        for change in changes:
            if all(low.attr(a) == v for a, v in change.items()) or not _legal(k, change, ctx):
                yield None
            else:
                yield "\n".join(f"attr {a} = {json.dumps(v)}" for a, v in change.items())


def _legal(k: ir.Kernel, change: dict, ctx: Context) -> bool:
    """Whether the schedule change lowers for every head dim: tiling's legality, which is
    what pipeline.lower applies (without the expression passes, which it does not touch)."""
    try:
        for d in ctx.head_dims:
            tiling.run(k.with_attrs(head_dim=d, **change) if k.kind == "attention" else k.with_attrs(**change),
                       ctx.target)
    except KdslError:
        return False
    return True


# ------------------------------------------------------------------- algebraic rules
# Each rule rewrites one node (or returns None); _everywhere applies it at each node in turn.
# "Uniform" values are the same for every element of a tile row and column: the compiler may
# not reassociate float math to hoist them, so the rewrite does.

def _varies(e: ir.Expr, names=("q", "kv", "qk")) -> bool:
    return any(isinstance(n, ir.Var) and n.name in names for n in ir.walk(e))


def _reassociate(e, k):
    """(x * u1) * u2 -> x * (u1 * u2) with u1, u2 uniform: one multiply per element fewer."""
    if isinstance(e, ir.Op) and e.op == "mul" and e.ty == "f32":
        for inner, u2 in ((e.args[0], e.args[1]), (e.args[1], e.args[0])):
            if isinstance(inner, ir.Op) and inner.op == "mul" and not _varies(u2):
                for x, u1 in ((inner.args[0], inner.args[1]), (inner.args[1], inner.args[0])):
                    if _varies(x) and not _varies(u1):
                        return op("f32", "mul", x, op("f32", "mul", u1, u2))
    return None


def _reciprocal(e, k):
    """x / c -> x * (1 / c) for a constant c (exact for powers of two, else within an ulp)."""
    if isinstance(e, ir.Op) and e.op == "div" and isinstance(e.args[1], ir.Const) and e.args[1].value not in (0, 0.0):
        return op("f32", "mul", e.args[0], ir.Const("f32", 1.0 / e.args[1].value))
    return None


def _factor(e, k):
    """a * c + b * c -> (a + b) * c: one multiply fewer."""
    if isinstance(e, ir.Op) and e.op in ("add", "sub") and e.ty == "f32":
        a, b = e.args
        if all(isinstance(x, ir.Op) and x.op == "mul" for x in (a, b)) and a.args[1] == b.args[1]:
            return op("f32", "mul", op("f32", e.op, a.args[0], b.args[0]), a.args[1])
    return None


def _drop_row_terms(e, k):
    """float(q - kv) * c -> -(float(kv) * c) when nothing reads lse: the row's constant
    q * c does not change its softmax."""
    if k.tensor("lse") is not None or not (isinstance(e, ir.Op) and e.op == "mul"):
        return None
    f, c = e.args
    if isinstance(f, ir.Op) and f.op == "float" and isinstance(f.args[0], ir.Op) and f.args[0].op == "sub":
        row, col = f.args[0].args
        if not _varies(row, ("kv", "qk")) and not _varies(c):
            return op("f32", "neg", op("f32", "mul", op("f32", "float", col), c))
    return None


def _sigmoid(e, k):
    """sigmoid(x) -> 0.5 + 0.5 * tanh(0.5 * x), one MUFU instead of an exp and a division."""
    if isinstance(e, ir.Op) and e.op == "sigmoid":
        half = ir.Const("f32", 0.5)
        return op("f32", "add", half, op("f32", "mul", half, op("f32", "tanh", op("f32", "mul", half, e.args[0]))))
    return None


RULES = [("reassociate", _reassociate), ("reciprocal", _reciprocal), ("factor", _factor),
         ("drop-row-constant", _drop_row_terms), ("sigmoid-tanh", _sigmoid)]


def _everywhere(e: ir.Expr, rule, k):
    """Every expression obtained by applying rule at exactly one node of e."""
    new = rule(e, k)
    if new is not None:
        yield new
    if isinstance(e, ir.Op):
        for i, a in enumerate(e.args):
            for sub in _everywhere(a, rule, k):
                yield ir.Op(e.ty, e.op, e.args[:i] + (sub,) + e.args[i + 1:])


class Llm:
    name = "llm"

    def __init__(self, client):
        self.client = client

    def propose(self, ctx: Context) -> str:
        msgs = protocol.messages(ctx.lowered_ir, ctx.current, ctx.target, ctx.target_text, ctx.history,
                                 ctx.head_dims)
        return self.client.complete(msgs)
