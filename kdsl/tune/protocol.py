"""The protocol between kdsl and a proposer (the search, or a language model).

The proposer is shown the kernel's lowered IR text, the blocks it may change (with the legal
values of each schedule attribute), the target, and the recent history of proposals with
their outcomes. It answers with replacement lines in a fenced code block:

    ```
    def score_log2 = (add:f32 (mul:f32 qk scale_log2) ...)
    attr tile_n = 176
    ```

extract() keeps only `def NAME = ...` / `attr NAME = ...` lines of the last fenced block that
has any (reasoning in <think> ... </think> is dropped first); everything else is ignored. Each
line is parsed by kdsl's IR parser inside a skeleton of the kernel's declarations, so names
and types resolve as in the kernel; numbers are parsed as numbers and attribute values as
JSON. Nothing of the answer is evaluated, executed or pasted into generated code as text.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from .. import ir
from ..errors import SourceError
from ..passes import gemm_tiles, tiling

MAX_ANSWER_CHARS = 64 * 1024   # an answer longer than this is refused unread
MAX_LINES = 16                 # replacement lines per proposal
MAX_LINE_CHARS = 4096          # one replacement line
HISTORY = 8                    # earlier proposals shown to a model

_FENCE = re.compile(r"```[^\n`]*\n(.*?)```", re.S)
_THINK = re.compile(r"<think>.*?(</think>|$)", re.S)
_LINE = re.compile(r"(def|attr)\s+([A-Za-z_][A-Za-z_0-9]*)\s*=")


class ProposalError(ValueError):
    """An answer kdsl cannot take; the message is the rejection reason."""


@dataclass(frozen=True)
class Proposal:
    defs: tuple[tuple[str, ir.Expr], ...]
    attrs: tuple[tuple[str, Any], ...]

    def lines(self) -> str:
        """The replacement lines in canonical IR text (what the log and history show)."""
        return "\n".join([f"def {n} = {ir.print_expr(e)}" for n, e in self.defs] +
                         [f"attr {n} = {_json(v)}" for n, v in self.attrs])

    def apply(self, k: ir.Kernel) -> ir.Kernel:
        for name, e in self.defs:
            k = k.with_func(name, e)
        return k.with_attrs(**dict(self.attrs)) if self.attrs else k


def _json(v) -> str:
    import json
    return json.dumps(list(v) if isinstance(v, tuple) else v)


def offered(k: ir.Kernel, target) -> tuple[tuple[str, ...], dict]:
    """(defs, {attr: legal values or a description}) a proposer may change in kernel k."""
    fam = tiling.family(k, target)
    gemm = fam == "gemm"
    legal = {"tile_n": {"wgmma": tiling.WGMMA_WIDTHS, "mma": tiling.MMA_WIDTHS, "gemm": gemm_tiles.BLOCK_N}[fam],
             "tile_m": gemm_tiles.BLOCK_M if gemm else (32, 64, 128, 256),
             "consumers": (1, 2, 3), "warps": (1, 2, 4, 8, 16),
             "stages": tuple(range(2, (gemm_tiles.MAX_STAGES if gemm else tiling.MAX_STAGES) + 1)),
             "cluster": (1, 2), "multicast": gemm_tiles.MULTICAST, "store": gemm_tiles.STORES, "stream_k": (False, True),
             "scale_load": gemm_tiles.SCALE_LOADS, "b_scale_load": gemm_tiles.B_SCALE_LOADS,
             "raster": "tiles per rasterisation group: a positive integer, even with cluster = 2",
             "schedule": tiling.SCHEDULES, "poly_exp2": tiling.POLY_EXP2, "lazy_rescale": tiling.LAZY_RESCALE,
             "slope_step": tiling.SLOPE_STEP, "tensor_row_sum": tiling.TENSOR_ROW_SUM, "offset_table": tiling.OFFSET_TABLE,
             "key_table": tiling.KEY_TABLE, "key_mask": tiling.KEY_MASK,
             "math": tiling.MATH_MODES}
    attrs = {a: legal[a] for a in tiling.SCHEDULE_ATTRS[fam]}
    if k.kind != "attention":
        return (), attrs
    attrs["math"] = legal["math"]
    defs = ("score_log2",) + (("mask", "tile_empty", "tile_full") if k.func("mask") is not None else ())
    return defs, attrs


def extract(answer: str, k: ir.Kernel) -> Proposal:
    """The proposal in an answer, parsed against kernel k's declarations; ProposalError
    names what is wrong with it."""
    if len(answer) > MAX_ANSWER_CHARS:
        raise ProposalError(f"answer of {len(answer)} characters, over the {MAX_ANSWER_CHARS} accepted")
    blocks = _FENCE.findall(_THINK.sub("", answer))
    if not blocks:
        raise ProposalError("no fenced code block with replacement lines")
    picked = [b for b in blocks if any(_LINE.match(line.strip()) for line in b.splitlines())]
    if not picked:
        raise ProposalError("no 'def NAME = ...' or 'attr NAME = ...' line in any fenced code block")
    lines = [line.strip() for line in picked[-1].splitlines() if _LINE.match(line.strip())]
    if len(lines) > MAX_LINES:
        raise ProposalError(f"{len(lines)} replacement lines, over the {MAX_LINES} accepted")
    defs, attrs, seen = [], [], set()
    skeleton = ir.print_ir(replace(k, funcs=(), attrs=())).rstrip().removesuffix("}")
    for line in lines:
        if len(line) > MAX_LINE_CHARS:
            raise ProposalError(f"a replacement line of {len(line)} characters, over the {MAX_LINE_CHARS} accepted")
        kind, name = _LINE.match(line).groups()
        if name in seen:
            raise ProposalError(f"'{name}' is replaced twice")
        seen.add(name)
        parsed = _parse_line(skeleton + "  " + line + "\n}\n", line)
        if kind == "def":
            if len(parsed.funcs) != 1 or parsed.attrs or parsed.funcs[0][0] != name:
                raise ProposalError(f"malformed IR: {line[:80]!r} is not one def line")
            defs.append(parsed.funcs[0])
        else:
            if len(parsed.attrs) != 1 or parsed.funcs or parsed.attrs[0][0] != name:
                raise ProposalError(f"malformed IR: {line[:80]!r} is not one attr line")
            attrs.append(parsed.attrs[0])
    return Proposal(tuple(defs), tuple(attrs))


def _parse_line(text: str, line: str) -> ir.Kernel:
    try:
        kernels = ir.parse_ir(text, "<proposal>")
    except SourceError as e:
        why = e.message.removeprefix("malformed IR: ").removeprefix("IR: ")
        raise ProposalError(f"malformed IR in {line[:80]!r}: {why}") from None
    if len(kernels) != 1:
        raise ProposalError(f"malformed IR: {line[:80]!r} is not one def or attr line")
    return kernels[0]


SYSTEM = """You optimise one GPU kernel written in kdsl's IR, a typed s-expression language.
Expressions are (op:type args...) with types i32, f32, bool; ops: add sub mul div floordiv mod neg
min max abs lt le gt ge eq ne and or not where int float exp exp2 log log2 sqrt rsqrt tanh sin cos
tan sigmoid, and (load:TYPE TENSOR INDEX...) for captured tensors. Float constants need a decimal
point (1.0, not 1). Attribute values are JSON.
Answer with replacement lines in ONE fenced code block, each either `def NAME = EXPR` or
`attr NAME = JSON`, only for the names you are offered. Everything outside those lines is ignored.
Every proposal is type-checked, checked for legality, evaluated against the original program on
edge-case indices and judged on fresh random inputs; only correct rewrites that run measurably
faster are kept. score_log2 must equal score * log2(e) (s = qk * scale) for every index kept by
the mask, up to a constant per query row when the kernel returns no lse; mask must equal the
original mask; tile_empty may hold only for tiles the mask removes entirely, tile_full only for
tiles it keeps entirely (tile rows q0..q1, columns k0..k1)."""


def messages(lowered_ir: str, k: ir.Kernel, target, target_text: str, history: list[dict], head_dims) -> list[dict]:
    """The chat messages for one request: the system rules, then the kernel, what may change,
    the target (a passes.target.Target, and how to describe it) and the recent history."""
    defs, attrs = offered(k, target)
    may = [f"- def {d}" for d in defs] + [f"- attr {a}: {_values(v)}" for a, v in attrs.items()]
    user = [f"Target: {target_text}. The schedule must be legal for head dims {', '.join(map(str, head_dims))}.",
            "Lowered IR of the kernel (derived attributes such as smem_bytes and threads follow from the schedule):",
            "```", lowered_ir.rstrip(), "```", "You may replace:", *may]
    if history:
        user.append("Earlier proposals, oldest first, with their outcomes:")
        for i, h in enumerate(history[-HISTORY:], 1):
            user += [f"{i}. ```", (h.get("lines") or h.get("text", ""))[:1500], "```", f"   {_outcome(h)}"]
    user.append("Propose one change that makes the kernel faster.")
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "\n".join(user)}]


def _values(v) -> str:
    return ", ".join(map(str, v)) if isinstance(v, tuple) else str(v)


def _outcome(h: dict) -> str:
    parts = [h.get("verdict", "")[:300]]
    if h.get("error"):
        parts.append(f"error {h['error'].get('value')} on {h['error'].get('shape')}")
    if h.get("time_ms"):
        parts.append(f"time {h['time_ms'].get('candidate')} ms (best so far {h['time_ms'].get('best')} ms)")
    r = h.get("resources") or {}
    if r:
        parts.append(", ".join(f"{n} {r[n]}" for n in ("registers", "spill_ops", "smem_bytes") if n in r))
    return "; ".join(p for p in parts if p)
