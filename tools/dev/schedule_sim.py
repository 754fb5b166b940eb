#!/usr/bin/env python3
"""How evenly a persistent attention launch's CTAs finish under causal masks, simulated: each
CTA takes the next item when it is done with its last (the kernel's work counter), an item
costs its kv tiles plus a per-item overhead (in tiles), with +-5 % noise. Compares the item
orders head by head (head_group 1) and in head groups (geometry.attention_head_group).
No GPU: this is how the head-group rule was chosen before it was measured.

    python3 tools/dev/schedule_sim.py [--sms 132] [--overhead 2.35]
"""
from __future__ import annotations

import argparse
import heapq
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from kdsl.runtime.geometry import attention_head_group  # noqa: E402

# (S, heads = B * H, query rows a tile): the suite's causal shapes and some others
CASES = [(2048, 128, 128), (8192, 32, 128), (4096, 64, 128), (16384, 8, 128), (1024, 256, 128),
         (8192, 32, 192), (3000, 20, 128), (32768, 4, 128), (2048, 96, 128), (1536, 40, 128)]


def makespan(costs, sms: int) -> float:
    free = [(0.0, i) for i in range(sms)]
    heapq.heapify(free)
    for c in costs:
        t, i = heapq.heappop(free)
        heapq.heappush(free, (t + c, i))
    return max(t for t, _ in free)


def order(heads: int, q_tiles: int, group: int) -> list[int]:
    """Causal kv-tile counts of the items in the kernel's order (attention_wgmma.cuh, item())."""
    groups, out = max(1, heads // group), []
    for g in range(groups):
        size = heads - g * group if g == groups - 1 else group
        for rank in range(q_tiles):
            out += [q_tiles - rank] * size
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--overhead", type=float, default=2.35, help="per-item cost in kv tiles")
    ap.add_argument("--trials", type=int, default=5)
    args = ap.parse_args()
    rng = random.Random(1)
    print(f"{'S':>6} {'heads':>5} {'BM':>4} {'group':>5}  head by head  grouped   (share of the ideal makespan)")
    for S, heads, bm in CASES:
        q_tiles = -(-S // bm)
        group = attention_head_group(heads, q_tiles, args.sms, 0, 1 << 62)  # L2 unbounded here
        eff = []
        for g in (1, group):
            items = order(heads, q_tiles, g)
            total = sum(n + args.overhead for n in items)
            runs = [makespan([(n + args.overhead) * rng.uniform(0.95, 1.05) for n in items], args.sms)
                    for _ in range(args.trials)]
            eff.append(total / args.sms / (sum(runs) / len(runs)))
        print(f"{S:6d} {heads:5d} {bm:4d} {group:5d}  {eff[0]:12.3f}  {eff[1]:7.3f}")


if __name__ == "__main__":
    main()
