"""The steady-state kv loop of a Hopper attention kernel in its SASS, counted: the opcode
histogram of the whole loop body, of its cheapest path from the loop head back to the head
(a full tile: no mask, no ragged kv edge) and of its longest acyclic path (a general tile).
For comparing a header change against the kernel before it (no GPU needed).

    python tools/dev/sass_loop.py [--json] SAMPLE:KERNEL:HEAD_DIM[:split] ...

kdsl is imported from PYTHONPATH, so the same command run against another tree (a copy of
an older commit) prints that tree's numbers. The loop is the innermost loop of the entry
function that holds at least two HGMMA instructions (Q K^T and P V of the kv loop).
"""
from __future__ import annotations

import heapq
import json
import re
import sys
from collections import Counter
from pathlib import Path

from devtools import sass_text

OPS = ("HGMMA", "MUFU", "FFMA", "FMUL", "FADD", "FMNMX", "FSEL", "F2FP")
_INSN = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P[T0-9]+\s+)?([A-Z0-9_]+)([.\w]*)\s*([^;]*);")


def build(sample: str, kernel: str, head_dim: int, split_kv: bool = False):
    from kdsl.grammar import parse
    from kdsl.passes import pipeline
    from kdsl.runtime.compiler import build as kbuild
    from kdsl.runtime.programs import Program
    path = Path(sample)
    k = next(k for k in pipeline.check(parse(path.read_text(), str(path))) if k.name == kernel)
    return kbuild(k, "sm_90a", head_dim, program=Program(split_kv=True)) if split_kv else kbuild(k, "sm_90a", head_dim)


def sass_of(cubin: bytes, entry: str) -> list[tuple[int, bool, str, str]]:
    """(address, predicated, opcode with modifiers, operands) of each instruction of entry."""
    from kdsl.sass import _section
    code = _section(sass_text(cubin), rf"Function : {re.escape(entry)}\s")
    return [(int(m.group(1), 16), bool(m.group(2)), m.group(3) + m.group(4), m.group(5).strip())
            for m in _INSN.finditer(code)]


def blocks(insns):
    """Basic blocks: {start address: (instructions, successor start addresses)}."""
    addrs = [a for a, *_ in insns]
    leaders = {addrs[0]}
    for i, (a, pred, op, args) in enumerate(insns):
        if op.split(".")[0] in ("BRA", "EXIT", "RET", "BRX", "JMP"):
            if i + 1 < len(insns):
                leaders.add(addrs[i + 1])
            t = _target(op, args)
            if t is not None:
                leaders.add(t)
    out, cur = {}, None
    for i, ins in enumerate(insns):
        if ins[0] in leaders:
            cur = ins[0]
            out[cur] = ([], [])
        out[cur][0].append(ins)
    starts = sorted(out)
    for n, s in enumerate(starts):
        body, succ = out[s]
        a, pred, op, args = body[-1]
        base = op.split(".")[0]
        nxt = starts[n + 1] if n + 1 < len(starts) else None
        if base == "BRA":
            succ.append(_target(op, args))
            if pred and nxt is not None:
                succ.append(nxt)
        elif base in ("EXIT", "RET"):
            if pred and nxt is not None:
                succ.append(nxt)
        elif nxt is not None:
            succ.append(nxt)
    return out


def _target(op, args):
    m = re.search(r"0x([0-9a-f]+)", args)
    return int(m.group(1), 16) if m and op.startswith("BRA") else None


def main_loop(bb):
    """(header, body block set) of the innermost loop with >= 2 HGMMAs (every back edge to
    the header counts: the natural loop)."""
    preds = {s: [] for s in bb}
    for s, (_, succ) in bb.items():
        for t in succ:
            preds.setdefault(t, []).append(s)
    best = None
    for hdr in bb:
        srcs = [p for p in preds.get(hdr, []) if p >= hdr]
        if not srcs:
            continue
        body, todo = {hdr, *srcs}, list(srcs)
        while todo:
            x = todo.pop()
            for p in preds.get(x, []):
                if p not in body:
                    body.add(p)
                    todo.append(p)
        n_mma = sum(op.startswith("HGMMA") for b in body for _, _, op, _ in bb[b][0])
        size = sum(len(bb[b][0]) for b in body)
        if n_mma >= 2 and (best is None or size < best[2]):
            best = (hdr, body, size)
    return best[:2]


def path(bb, hdr, body, longest: bool):
    """Blocks of the cheapest (or longest acyclic) path from hdr around to hdr in body."""
    end = -1  # stands for the header reached again
    cost = lambda b: 0 if b == end else len(bb[b][0])
    edges = {b: [end if t == hdr else t for t in bb[b][1] if t in body] for b in body}
    edges[end] = []
    body = body | {end}
    if not longest:
        dist, prev, heap = {hdr: cost(hdr)}, {}, [(cost(hdr), hdr)]
        while heap:
            d, b = heapq.heappop(heap)
            if d > dist[b]:
                continue
            for t in edges[b]:
                if d + cost(t) < dist.get(t, 1 << 60):
                    dist[t], prev[t] = d + cost(t), b
                    heapq.heappush(heap, (dist[t], t))
    else:  # acyclic: without the edges that go back to a block dominating their source
        dom = _dominators(edges, hdr, body)
        dag = {b: [t for t in edges[b] if t not in dom[b]] for b in body}
        order, seen = [], set()

        def visit(b):
            seen.add(b)
            for t in dag[b]:
                if t not in seen:
                    visit(t)
            order.append(b)
        visit(hdr)
        dist, prev = {hdr: cost(hdr)}, {}
        for b in reversed(order):  # topological order
            for t in dag[b]:
                if b in dist and dist[b] + cost(t) > dist.get(t, -1):
                    dist[t], prev[t] = dist[b] + cost(t), b
    out, b = [], prev[end]
    while b != hdr:
        out.append(b)
        b = prev[b]
    return [hdr] + out[::-1]


def _dominators(edges, hdr, body):
    preds = {b: [] for b in body}
    for b in body:
        for t in edges[b]:
            preds[t].append(b)
    dom = {b: set(body) for b in body}
    dom[hdr] = {hdr}
    changed = True
    while changed:
        changed = False
        for b in body:
            if b == hdr:
                continue
            ps = [dom[p] for p in preds[b]]
            new = (set.intersection(*ps) if ps else set()) | {b}
            if new != dom[b]:
                dom[b], changed = new, True
    return dom


def histogram(bb, blocks_):
    c = Counter(op.split(".")[0] for b in blocks_ for _, _, op, _ in bb[b][0])
    row = {k: c.get(k, 0) for k in OPS}
    row["total"] = sum(c.values())
    return row


def report(spec: str) -> dict:
    sample, kernel, d, *split = spec.split(":")
    built = build(sample, kernel, int(d), split == ["split"])
    from kdsl.sass import inspect
    rep = inspect(built.compiled.cubin, built.generated.entry)
    bb = blocks(sass_of(built.compiled.cubin, built.generated.entry))
    hdr, body = main_loop(bb)
    return {"kernel": f"{kernel} D={d}" + " split" * bool(split), "registers": rep.registers, "spills": rep.spill_ops,
            "local": rep.local_bytes, "loop": histogram(bb, body),
            "full_path": histogram(bb, path(bb, hdr, body, False)),
            "general_path": histogram(bb, path(bb, hdr, body, True))}


if __name__ == "__main__":
    args = sys.argv[1:]
    as_json = args[:1] == ["--json"]
    rows = [report(s) for s in args[as_json:]]
    if as_json:
        print(json.dumps(rows))
    else:
        for r in rows:
            print(f"{r['kernel']}: regs {r['registers']} spills {r['spills']} local {r['local']}")
            for part in ("loop", "full_path", "general_path"):
                print(f"  {part:13s}", " ".join(f"{k} {v}" for k, v in r[part].items()))
