#!/usr/bin/env python3
"""Where a short FP8 GEMM call's time goes: the kernel built with -DKDSL_FP8_TRACE=1 records
(%globaltimer, clock64, event) at the points of each unit's life (fp8_gemm_config.cuh,
kFp8Trace*) for the producer's leader and the first thread of each math warpgroup of every
CTA. For one call, after an L2 flush, this prints the call's span on the global timer and, as
medians (and maxima) over the CTAs:

  start skew      a CTA's first record after the earliest CTA's (launch ramp), ns
  first issue     CTA start -> the producer's first loads issued, cycles
  load latency    first loads issued -> landed (a math warpgroup's first "full" wait returns), cycles
  first ready     CTA start -> its first stage landed (the two above), cycles
  first block     first stage landed -> its first K block promoted, cycles
  block period    one K block promoted -> the next (the steady state), cycles
  tail            last K block promoted -> the epilogue's stores issued and waited for, cycles
  end skew        a CTA's last record before the latest CTA's, ns

and, over every K block after a CTA's first (percentiles 10 / 50 / 90 over all CTAs' blocks):

  lead            the producer's issue of block i's loads -> math warpgroup 0's end of block i - 1
                  (when it turns to block i), cycles: a lead shorter than the load latency stalls it
  response        math warpgroup 0's end of block i - STAGES (its stage was released just before
                  that block's promotion) -> the producer's issue of block i, cycles

    python3 tools/dev/fp8_trace.py [--no-flush] [-DNAME=VALUE ...] 512x4096x7168 256x7168x4096:tile_m=128,tile_n=112 \
        masked:256x4096x7168x4 [...]

Each recorder keeps its first 512 records (PER_ROLE): on calls where a CTA walks more than
~8 units of 56 K blocks, the later ones go unrecorded, and the span and end skew then cover
the recorded part only (a line says so).

--no-flush leaves L2 as the previous call left it (the operands partly cached, no dirty lines
from the flush's writes to drain during the call).
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from devtools import extra_options  # noqa: E402

START, ISSUE, READY, BLOCK, EPILOGUE, STORED, END, MARK = range(8)
CTAS, ROLES, PER_ROLE = 256, 4, 512


def parse(spec: str):
    """'MxNxK[:attrs]' (dense) or 'masked:MxNxKxG[:attrs]' (G groups of at most M rows)."""
    grouping, shape = ("masked", spec[len("masked:"):]) if spec.startswith("masked:") else ("dense", spec)
    shape, _, attrs = shape.partition(":")
    m, n, k, *g = map(int, shape.split("x"))
    kv = dict(item.split("=") for item in attrs.split(",") if item)
    return grouping, (m, n, k, g[0] if g else 1), {key: int(v) if v.isdigit() else v for key, v in kv.items()}


def records(words, cta: int, role: int):
    base = 3 * (cta * ROLES + role) * PER_ROLE
    out = []
    for i in range(PER_ROLE):
        gt, clk, tag = (int(w) for w in words[base + 3 * i: base + 3 * i + 3])
        if gt == 0:
            break
        out.append((gt, clk, tag & 0xFF, tag >> 8))
    return out


def all_records(words):
    """Every recorder's records, parsed once: [cta][role] -> [(globaltimer, clock, event, arg)]."""
    return [[records(words, cta, role) for role in range(ROLES)] for cta in range(CTAS)]


def med_max(vals, unit: str) -> str:
    return f"median {statistics.median(vals):8.0f} {unit}  max {max(vals):8.0f}" if vals else "(none)"


def analyse(words, recs) -> None:
    starts, ends, first_ready, first_block, periods, tails, clocks = [], [], [], [], [], [], []
    first_issue, latency = [], []
    marks = {}
    for cta in range(CTAS):
        prod = recs[cta][0]
        if not prod:
            continue
        starts.append(prod[0][0])
        issues = [r for r in prod if r[2] == ISSUE]
        if issues:
            first_issue.append(issues[0][1] - prod[0][1])
        seen = set()
        for r in prod:  # the producer's first marks (fp8_gemm_producer.cuh): cycles after its start
            if r[2] == MARK and r[3] not in seen:
                seen.add(r[3])
                marks.setdefault(r[3], []).append(r[1] - prod[0][1])
        for role in range(1, ROLES):
            ev = recs[cta][role]
            if not ev:
                continue
            ends.append(ev[-1][0])
            clocks.append((ev[-1][1] - ev[0][1]) / max(1, ev[-1][0] - ev[0][0]))
            readies = [r for r in ev if r[2] == READY and r[3] < 2**23]  # (m0 < 0: the end unit)
            if readies:
                first_ready.append(readies[0][1] - prod[0][1])
                if issues:
                    latency.append(readies[0][1] - issues[0][1])
            last_block = None
            for i, (gt, clk, e, arg) in enumerate(ev):
                if e == BLOCK:
                    if last_block is not None and ev[i - 1][2] == BLOCK:
                        periods.append(clk - last_block)
                    elif ev[i - 1][2] == READY:
                        first_block.append(clk - ev[i - 1][1])
                    last_block = clk
                elif e == STORED and last_block is not None:
                    tails.append(clk - last_block)
    full = sum(1 for cta in range(CTAS) for role in range(ROLES) if words[3 * ((cta * ROLES + role) * PER_ROLE + PER_ROLE - 1)])
    if full:
        print(f"  ({full} recorders filled all {PER_ROLE} records: span and end skew cover the recorded units only)")
    t0 = min(starts)
    span = max(ends) - t0
    print(f"  span {span / 1e3:.1f} us over {len(starts)} CTAs; SM clock {statistics.median(clocks):.2f} GHz")
    print(f"  start skew    {med_max([s - t0 for s in starts], 'ns')}")
    names = {1: "descriptors prefetched", 2: "first unit", 3: "first empty wait"}
    for mark, vals in sorted(marks.items()):
        print(f"    mark {names.get(mark, mark):24s} {med_max(vals, 'cycles')}")
    print(f"  first issue   {med_max(first_issue, 'cycles')}")
    print(f"  load latency  {med_max(latency, 'cycles')}")
    print(f"  first ready   {med_max(first_ready, 'cycles')}")
    print(f"  first block   {med_max(first_block, 'cycles')}")
    print(f"  block period  {med_max(periods, 'cycles')}  ({len(periods)} periods)")
    print(f"  tail          {med_max(tails, 'cycles')}")
    print(f"  end skew      {med_max([max(ends) - e for e in ends], 'ns')}")


def pipeline(recs, stages: int) -> None:
    """Lead and response (the module docstring) over every K block after a CTA's first."""
    leads, responses = [], []
    for cta in range(CTAS):
        issues = [r[1] for r in recs[cta][0] if r[2] == ISSUE]
        ends = [r[1] for r in recs[cta][1] if r[2] == BLOCK]
        n = min(len(issues), len(ends))  # (the i-th issue and the i-th block are the same stage use)
        leads += [ends[i - 1] - issues[i] for i in range(1, n)]
        responses += [issues[i] - ends[i - stages] for i in range(stages, n)]

    def pct(vals) -> str:
        v = sorted(vals)
        return " / ".join(f"{v[int(q * (len(v) - 1))]:6d}" for q in (0.1, 0.5, 0.9)) if v else "(none)"
    print(f"  lead          {pct(leads)} cycles (p10 / p50 / p90, {len(leads)} blocks)")
    print(f"  response      {pct(responses)} cycles")


def main() -> None:
    import cupy
    import torch
    import kdsl
    from kdsl import fp8
    print(torch.cuda.get_device_name(), flush=True)
    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
    gemms = {"dense": kdsl.load(ROOT / "samples" / "fp8_gemm.kd").fp8_gemm,
             "masked": kdsl.load(ROOT / "samples" / "fp8_grouped_masked.kd").fp8_grouped_masked}
    args = sys.argv[1:]
    flushing = "--no-flush" not in args
    defines = [a for a in args if a.startswith("-D")]  # more NVRTC defines, e.g. -DKDSL_FP8_DEV_SKIP_PROMOTE=1
    specs = [a for a in args if a != "--no-flush" and not a.startswith("-D")]
    for spec in specs:
        grouping, (m, n, k, g), attrs = parse(spec)
        masked = grouping == "masked"
        a, sa = fp8.quantize_1x128(torch.randn((g, m, k) if masked else (m, k), device="cuda"))
        b, sb = fp8.quantize_128x128(torch.randn((g, n, k) if masked else (n, k), device="cuda"))
        # the suite's draw: each group holds between M / 2 and M rows
        extra = (torch.randint(m // 2, m + 1, (g,), device="cuda", dtype=torch.int32),) if masked else ()
        fn = gemms[grouping].with_attrs(**attrs)
        with extra_options(["-DKDSL_FP8_TRACE=1", *defines]):
            fn(a, sa, b, sb, *extra)
        built, loaded = next(iter(fn._loaded.values()))
        lk = built.kernel
        ptr = int(loaded.module.get_global_var("kdsl_fp8_trace"))
        count = CTAS * ROLES * PER_ROLE * 3
        words = cupy.ndarray((count,), dtype=cupy.uint64,
                             memptr=cupy.cuda.MemoryPointer(cupy.cuda.UnownedMemory(ptr, count * 8, None), 0))
        for _ in range(3):  # the last of a few calls, each after an L2 flush and with its buffer cleared
            words.fill(0)
            if flushing:
                flush.zero_()
            torch.cuda.synchronize()
            fn(a, sa, b, sb, *extra)
            torch.cuda.synchronize()
        host = words.get()
        tiles = g * -(-m // lk.attr("tile_m")) * -(-n // lk.attr("tile_n"))
        times = []
        for _ in range(10):  # the traced kernel's own time, for scale
            if flushing:
                flush.zero_()
            t = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
            t[0].record()
            fn(a, sa, b, sb, *extra)
            t[1].record()
            torch.cuda.synchronize()
            times.append(t[0].elapsed_time(t[1]) * 1e3)
        counts = f" counts {extra[0].tolist()}" if masked else ""
        print(f"\n== {'masked:' if masked else ''}{m}x{n}x{k}{'x' + str(g) if masked else ''}{counts} {attrs or ''}: tile {lk.attr('tile_m')}x{lk.attr('tile_n')}x{lk.attr('stages')} "
              f"cluster {lk.attr('cluster')}, {tiles} tiles, {k // 128} K blocks; traced call "
              f"{statistics.median(times):.1f} us (events)", flush=True)
        recs = all_records(host)
        analyse(host, recs)
        pipeline(recs, lk.attr("stages"))


if __name__ == "__main__":
    main()
