#!/usr/bin/env python3
"""How evenly the backward's CTAs finish, simulated: one CTA an SM (255 registers x 256
threads), dispatched in blockIdx order as SMs free up; a CTA costs its live query steps (the
64-query tiles of its 128-key block that the mask leaves, times the query heads it walks) plus
a per-CTA overhead, in steps. Compares backward_block's order (attention_common.cuh: units of a
(b, k/v head) pair and a range of its query heads, in head groups of
geometry.backward_head_group, key block by key block within a group, the last group taking the
remainder), with the last kBackwardTailGroups groups run as one, with one group of every unit
(KDSL_BWD_HEAD_GROUP = units: key block by key block across all) and with longest first; with
GQA / MQA (--Hkv) also without the query-head split (geometry.backward_head_splits). No GPU:
what a device A/B should look for.

    python3 tools/dev/backward_order_sim.py [--docs 3] [--B 2 --H 16 --Hkv 16 --M 4096 --D 128]
"""
from __future__ import annotations

import argparse
import heapq
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from kdsl.runtime import geometry  # noqa: E402


def makespan(costs, sms: int) -> float:
    free = [0.0] * sms
    for c in costs:
        heapq.heappush(free, heapq.heappop(free) + c)
    return max(free)


def live_steps(doc, kb: int, M: int, BN: int = 128, BM: int = 64) -> int:
    """A causal document mask's live 64-query steps of key block kb (document ids sorted)."""
    n0, n1 = kb * BN, kb * BN + BN - 1
    return sum(1 for mt in range(M // BM)
               if not (doc[mt * BM + BM - 1] < doc[n0] or doc[n1] < doc[mt * BM] or n0 > mt * BM + BM - 1))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=3, help="document ids drawn in [0, docs), sorted (1: causal)")
    ap.add_argument("--B", type=int, default=2)
    ap.add_argument("--H", type=int, default=16)
    ap.add_argument("--Hkv", type=int, help="k/v heads (default: H)")
    ap.add_argument("--M", type=int, default=4096)
    ap.add_argument("--D", type=int, default=128)
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--overhead", type=float, default=0.5, help="a CTA's cost beyond its steps, in steps")
    ap.add_argument("--l2", type=float, default=50e6, help="L2 bytes (geometry.attention_head_group)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rnd = random.Random(args.seed)
    B, H, M, D, kbs = args.B, args.H, args.M, args.D, args.M // 128
    Hkv = args.Hkv or H
    docs = [sorted(rnd.randrange(args.docs) for _ in range(M)) for _ in range(B)]
    live = {(b, kb): live_steps(docs[b], kb, M) for b in range(B) for kb in range(kbs)}
    chosen = geometry.backward_head_splits(H // Hkv, kbs * B * Hkv, args.sms)
    print(f"docs={args.docs} B={B} H={H} Hkv={Hkv} M={M}: {kbs * B * Hkv} CTAs without a split, "
          f"ideal {sum(live.values()) * H / args.sms:.1f} steps an SM")
    for splits in sorted({1, chosen}):
        units, heads = B * Hkv * splits, H // Hkv // splits
        cost = {(u, kb): heads * live[(u // (Hkv * splits), kb)] + args.overhead for u in range(units) for kb in range(kbs)}

        def order(group: int, tail_groups: int = 1) -> list[float]:  # backward_block's blockIdx -> (unit, key block)
            out, last = [], max(1, units // group - (tail_groups - 1)) - 1
            for g in range(last + 1):
                size = group if g < last else units - g * group
                out += [cost[(g * group + r, kb)] for kb in range(kbs) for r in range(size)]
            return out

        group = geometry.backward_head_group(B, H, Hkv, M, D, D, 2, kbs, args.sms, int(args.l2), splits=splits)
        ideal = sum(cost.values()) / args.sms
        print(f" {splits} split{'s' * (splits > 1)} of the query heads{' (the rule)' * (splits == chosen)}: "
              f"{len(cost)} CTAs")
        for label, costs in ((f"head groups of {group} (default)", order(group)),
                             *((f"the last {t} groups as one", order(group, t)) for t in (2, 4)),
                             (f"one group of {units}", order(units)),
                             ("longest first", sorted(cost.values(), reverse=True))):
            span = makespan(costs, args.sms)
            print(f"  {label:28s} makespan {span:7.1f}  ({ideal / span:.0%} of the SMs' time busy)")


if __name__ == "__main__":
    main()
