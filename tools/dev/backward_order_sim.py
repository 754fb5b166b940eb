#!/usr/bin/env python3
"""How evenly the backward's CTAs finish, simulated: one CTA an SM (255 registers x 256
threads), dispatched in blockIdx order as SMs free up; a CTA costs its live query steps (the
64-query tiles of its 128-key block that the mask leaves) plus a per-CTA overhead, in steps.
Compares backward_block's order (attention_common.cuh: head groups of
geometry.attention_head_group, key block by key block within a group, the last group taking the
remainder), with the last kBackwardTailGroups groups run as one, with one group of every
(b, k/v head) pair (KDSL_BWD_HEAD_GROUP = B * Hkv: key block by key block across all) and with
longest first. No GPU: what a device A/B of -DKDSL_BWD_HEAD_GROUP should look for.

    python3 tools/dev/backward_order_sim.py [--docs 3] [--B 2 --H 16 --M 4096 --D 128]
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
    ap.add_argument("--M", type=int, default=4096)
    ap.add_argument("--D", type=int, default=128)
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--overhead", type=float, default=0.5, help="a CTA's cost beyond its steps, in steps")
    ap.add_argument("--l2", type=float, default=50e6, help="L2 bytes (geometry.attention_head_group)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rnd = random.Random(args.seed)
    B, H, M, D, kbs = args.B, args.H, args.M, args.D, args.M // 128
    docs = [sorted(rnd.randrange(args.docs) for _ in range(M)) for _ in range(B)]
    cost = {(bh, kb): live_steps(docs[bh // H], kb, M) + args.overhead for bh in range(B * H) for kb in range(kbs)}

    def order(group: int, tail_groups: int = 1) -> list[float]:  # backward_block's blockIdx -> (pair, key block)
        out, last = [], max(1, B * H // group - (tail_groups - 1)) - 1
        for g in range(last + 1):
            size = group if g < last else B * H - g * group
            out += [cost[(g * group + r, kb)] for kb in range(kbs) for r in range(size)]
        return out

    per_pair = M * ((D + D) * 2 + D * 4)  # q, dO (bf16) and dq_acc (fp32) of a pair, as runtime/attention_backward.py
    group = geometry.attention_head_group(B * H, kbs, args.sms, per_pair, int(args.l2))
    ideal = sum(cost.values()) / args.sms
    print(f"docs={args.docs} B={B} H={H} M={M}: {len(cost)} CTAs, ideal {ideal:.1f} steps an SM")
    for label, costs in ((f"head groups of {group} (default)", order(group)),
                         *((f"the last {t} groups as one", order(group, t)) for t in (2, 4)),
                         (f"one group of {B * H}", order(B * H)), ("longest first", sorted(cost.values(), reverse=True))):
        span = makespan(costs, args.sms)
        print(f"  {label:28s} makespan {span:7.1f}  ({ideal / span:.0%} of the SMs' time busy)")


if __name__ == "__main__":
    main()
