#!/usr/bin/env python3
"""How good the FP8 tile model's picks are on shapes already timed: reads tools/dev/fp8_forms.py
logs (each shape timed with several forced tiles beside the model's pick, in turns), asks
kdsl/passes/gemm_tiles.py for its pick now, and prints each shape's pick, the time measured for
that tile, the fastest tile timed and the pick's shortfall (and, where the log timed `_scaled_mm`
beside them, the pick's speed against it). Run it before and after a change to
the model to see which picks moved and what the logs say they cost, with no GPU.

    python3 tools/dev/tile_model_eval.py bench/results/h100-*-midm-tiles-*.log [...] [--sms 132]

A pick that no log timed is reported as "untimed" and left out of the summary. Rows are keyed
by tile and cluster (BMxBN cNm); where two rows share a key (the pick also forced) the faster
counts, as both ran the same kernel unless stream-K differed.
"""
from __future__ import annotations

import argparse
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

HEAD = re.compile(r"^(fp8_\w+) M=(\d+) N=(\d+) K=(\d+) G=(\d+)")
ROW = re.compile(r"^\s+(.+?)\s+([\d.]+) us\s+[\d.]+ TFLOPS\s+x[\d.]+\s+(\d+)x(\d+)x\d+ c(\d)(\w)")
GROUPING = {"fp8_gemm": "dense", "fp8_grouped_contiguous": "contiguous", "fp8_grouped_masked": "masked"}


PEER = re.compile(r"^\s+scaled_mm\s+([\d.]+) us")


def read_logs(paths):
    """({(kernel, M, N, K, G): {(bm, bn, cluster, multicast initial): us}}, {same key: _scaled_mm's us});
    a later log's shape replaces an earlier's."""
    shapes, peers = {}, {}
    for path in paths:
        key = None
        for line in Path(path).read_text().splitlines():
            if m := HEAD.match(line):
                key = (m.group(1), *map(int, m.group(2, 3, 4, 5)))
                shapes[key] = {}
                peers.pop(key, None)
            elif key and (m := ROW.match(line)):
                tile = (int(m.group(3)), int(m.group(4)), int(m.group(5)), m.group(6))
                t = float(m.group(2))
                shapes[key][tile] = min(t, shapes[key].get(tile, t))
            elif key and (m := PEER.match(line)):
                peers[key] = float(m.group(1))
    return shapes, peers


def pick(kernel, m, n, k, g, sms):
    from kdsl.passes import gemm_tiles
    p = gemm_tiles.Problem(m, n, k, g, GROUPING[kernel], 2)
    c = gemm_tiles.choose(p, sms, 227 * 1024)
    return (c["tile_m"], c["tile_n"], c["cluster"], c["multicast"][0])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("logs", nargs="+")
    ap.add_argument("--sms", type=int, default=132)
    args = ap.parse_args()
    shortfalls, untimed, against_peer = [], 0, []
    shapes, peers = read_logs(args.logs)
    for (kernel, m, n, k, g), rows in shapes.items():
        mine = pick(kernel, m, n, k, g, args.sms)
        best = min(rows, key=rows.get)
        name = f"{kernel} {m}x{n}x{k}" + (f"x{g}" if g > 1 else "")
        tile = f"{mine[0]}x{mine[1]} c{mine[2]}{mine[3]}"
        if mine not in rows:
            untimed += 1
            print(f"{name:34s} pick {tile:14s} untimed     best {best[0]}x{best[1]} c{best[2]}{best[3]} {rows[best]:8.1f} us")
            continue
        s = rows[best] / rows[mine]
        shortfalls.append(s)
        if (kernel, m, n, k, g) in peers:
            against_peer.append(peers[kernel, m, n, k, g] / rows[mine])
        print(f"{name:34s} pick {tile:14s} {rows[mine]:8.1f} us  best {best[0]}x{best[1]} c{best[2]}{best[3]} "
              f"{rows[best]:8.1f} us  x{s:.3f}")
    if shortfalls:
        gm = statistics.geometric_mean(shortfalls)
        print(f"\n{len(shortfalls)} shapes: pick / best geometric mean x{gm:.4f}, worst x{min(shortfalls):.3f}, "
              f"within 2 %: {sum(s >= 0.98 for s in shortfalls)}; untimed picks: {untimed}")
    if against_peer:
        print(f"{len(against_peer)} of them timed beside _scaled_mm: the pick at median x{statistics.median(against_peer):.3f} "
              f"of its speed, lowest x{min(against_peer):.3f}, {sum(r < 1 for r in against_peer)} below 1")


if __name__ == "__main__":
    main()
