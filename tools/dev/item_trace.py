#!/usr/bin/env python3
"""Where a work item's time goes in the Hopper attention kernel: the kernel built with
-DKDSL_TRACE=1 records clock64() at the points of each item's life (attention_wgmma.cuh,
kTrace*) in CTAs 0-3, for the producer and one thread of each consumer warpgroup; this prints,
in cycles, the median of each phase over the items of those CTAs.

    python3 tools/dev/item_trace.py samples/causal.kd:causal:8,16,2048,2048,128 [...]

Phases of a consumer warpgroup's item: start (the item's first K tile has landed) -> Q
ready -> first S ready (its Q K^T alone) -> [tile periods: S of one tile ready to S of the
next] -> last S ready -> last P V done -> epilogue start (out's row pointer known) -> O
stored -> the next item's start. The transition
is last S -> next item's first S: the work an item costs beyond its tiles' periods.
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from devtools import extra_options  # noqa: E402

(CLAIM, Q_ISSUED, LAST_ISSUED, ITEM, Q_READY, FIRST_S, TILE_S, LAST_PV, STORED, EPILOGUE) = range(10)
PER_ROLE, CTAS, ROLES = 8192, 4, 4


def events(words, cta: int, role: int):
    base = 2 * (cta * ROLES + role) * PER_ROLE
    out = []
    for n in range(PER_ROLE):
        clock, tag = int(words[base + 2 * n]), int(words[base + 2 * n + 1])
        if clock == 0:
            break
        out.append((clock, tag & 0xFF, tag >> 8))
    return out


def consumer_phases(ev):
    """Per item: (tiles, {phase: cycles}) from one warpgroup's events."""
    items, cur = [], None
    for clock, e, arg in ev:
        if e == ITEM:
            if cur:
                items.append(cur)
            cur = {"start": clock, "tiles": []}
        elif cur is not None:
            if e == TILE_S:
                cur["tiles"].append(clock)
            else:
                cur[{Q_READY: "q", FIRST_S: "s0", LAST_PV: "pv", STORED: "stored", EPILOGUE: "epi"}[e]] = clock
    if cur:
        items.append(cur)
    rows = []
    for it, nxt in zip(items, items[1:] + [None]):
        if "stored" not in it or not it["tiles"]:
            continue
        t = it["tiles"]
        ph = {"start -> Q ready": it["q"] - it["start"], "Q ready -> first S": it["s0"] - it["q"],
              "last S -> last PV done": it["pv"] - t[-1], "last PV -> stored": it["stored"] - it["pv"]}
        if "epi" in it:
            ph["last PV -> epilogue start"] = it["epi"] - it["pv"]
            ph["epilogue start -> stored"] = it["stored"] - it["epi"]
        if len(t) > 1:
            ph["tile period"] = (t[-1] - t[0]) / (len(t) - 1)
        if nxt is not None:
            ph["stored -> next start"] = nxt["start"] - it["stored"]
            ph["transition (last S -> next first S)"] = nxt["s0"] - t[-1]
        rows.append((len(t), ph))
    return rows


def summarize(rows, label):
    if not rows:
        print(f"  {label}: no items")
        return
    keys = list(dict.fromkeys(k for _, ph in rows for k in ph))
    period = statistics.median(ph["tile period"] for _, ph in rows if "tile period" in ph) \
        if any("tile period" in ph for _, ph in rows) else float("nan")
    print(f"  {label}: {len(rows)} items, {statistics.mean(n for n, _ in rows):.1f} tiles each on average")
    for k in keys:
        vals = [ph[k] for _, ph in rows if k in ph]
        print(f"    {k:38s} median {statistics.median(vals):8.0f} cycles  ({statistics.median(vals) / period:5.2f} "
              f"tile periods)")


def main() -> None:
    import cupy
    import torch
    import kdsl
    from kdsl.runtime.attention_launch import AttentionKernel
    from kdsl.testing import attention_inputs
    print(torch.cuda.get_device_name(), flush=True)
    for case in sys.argv[1:]:
        path, name, shape = case.split(":")
        B, H, M, N, D = map(int, shape.split(","))
        base = getattr(kdsl.load(ROOT / path), name)
        q, k, v, caps = attention_inputs(base.ir, B, H, H, M, N, D)
        kern = AttentionKernel(base.ir)
        with extra_options(["-DKDSL_TRACE=1"]):
            kern(q, k, v, **caps)
        loaded = next(iter(kern._loaded.values()))[1]
        ptr = int(loaded.module.get_global_var("kdsl_trace"))
        n = CTAS * ROLES * PER_ROLE * 2
        words = cupy.ndarray((n,), dtype=cupy.uint64,
                             memptr=cupy.cuda.MemoryPointer(cupy.cuda.UnownedMemory(ptr, n * 8, None), 0))
        for _ in range(3):  # the last of a few calls, its buffer cleared before it
            words.fill(0)
            torch.cuda.synchronize()
            kern(q, k, v, **caps)
            torch.cuda.synchronize()
        host = words.get()
        print(f"\n== {name} B={B} H={H} M={M} N={N} D={D}", flush=True)
        for role in (1, 2, 3):
            rows = [r for cta in range(CTAS) for r in consumer_phases(events(host, cta, role))]
            if rows:
                summarize(rows, f"consumer warpgroup {role - 1}")
        # Q's load, on the SM's one clock: issued (producer) -> ready (each warpgroup), and
        # issued against the previous item's last S of each warpgroup
        lat, after = [], []
        for cta in range(CTAS):
            issued = {arg: c for c, e, arg in events(host, cta, 0) if e == Q_ISSUED}
            for role in (1, 2, 3):
                ev = events(host, cta, role)
                last_s = None
                for c, e, arg in ev:
                    if e == Q_READY and arg in issued:
                        lat.append(c - issued[arg])
                        if last_s is not None:
                            after.append(issued[arg] - last_s)
                    elif e == TILE_S:
                        last_s = c
        if lat:
            print(f"  Q load: issued -> ready median {statistics.median(lat):.0f} cycles; issued after the previous "
                  f"item's last S (per warpgroup) median {statistics.median(after):.0f} cycles")
        waits = []
        for cta in range(CTAS):
            ev = events(host, cta, 0)
            claims = {arg: c for c, e, arg in ev if e == CLAIM}
            waits += [c - claims[arg] for c, e, arg in ev if e == Q_ISSUED and arg in claims]
        if waits:
            print(f"  producer: claim -> Q issued (waiting for the previous item's last Q K^T) median "
                  f"{statistics.median(waits):.0f} cycles over {len(waits)} items")


if __name__ == "__main__":
    main()
