#!/usr/bin/env python3
"""Masks over float data read at the query and key (event times), bounded by the tile summary
(passes/float_bounds.py) against the same kernel with float comparisons left per element
(KDSL_MASK_FLOATS=0) and compiled FlexAttention with a BlockMask from the same data (its creation
untimed). Times in order (a tile's keys span a narrow range) or keys shuffled (nothing to skip).

    python3 tools/dev/float_data_bench.py [--reps 20] [--shape B,H,L,D ...] [--backward]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools" / "dev"))
sys.path.insert(0, str(ROOT))

SOURCE = """
attention time_window {
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    tq: f32[B, M]; tk: f32[B, N]
    mask(b, h, i, j) = tk[b, j] <= tq[b, i] and tq[b, i] - tk[b, j] <= 64.0
}
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--shape", nargs="*", default=["2,16,4096,128"])
    ap.add_argument("--backward", action="store_true")
    args = ap.parse_args()
    import torch
    import kdsl
    import structured_masks as sm
    from kdsl.bench import Timer, flex_attend, kept_pairs
    from kdsl.testing import rel_frobenius
    sm.SWITCH = "KDSL_MASK_FLOATS"
    timer = Timer(args.reps)
    kir = kdsl.compile(SOURCE).ir["time_window"]
    print(torch.cuda.get_device_name(), flush=True)
    print("| kind | B H L D | kept % | bounded µs | per element µs | x | Flex µs | x |")
    print("|---|---|---|---|---|---|---|---|")
    for shape in args.shape:
        B, H, L, D = map(int, shape.split(","))
        for kind in ("in order", "keys shuffled"):
            gen = torch.Generator(device="cuda").manual_seed(L + D)
            q, k, v = (torch.randn((B, H, L, D), device="cuda", generator=gen).bfloat16() for _ in range(3))
            times = torch.rand((B, L), device="cuda", generator=gen).mul(0.5).cumsum(1)  # 0.25 a position
            caps = {"tq": times, "tk": times.clone()}
            if kind == "keys shuffled":
                caps["tk"] = caps["tk"][:, torch.randperm(L, device="cuda", generator=gen)]
            on, off = sm.plan(kir, "1"), sm.plan(kir, "0")
            if args.backward:
                q, k, v = (x.requires_grad_() for x in (q, k, v))
                dout = torch.randn_like(q)
                step = lambda kern: torch.autograd.grad(kern(q, k, v, **caps), (q, k, v), dout)  # noqa: E731
                got = sm.call_under((lambda *a, **kw: step(on[0]), on[1]))
                base = sm.call_under((lambda *a, **kw: step(off[0]), off[1]))
                assert max(rel_frobenius(a, b) for a, b in zip(got, base)) < 2e-2
                t = timer.in_turns({"on": lambda: step(on[0]), "off": lambda: step(off[0])})
                print(f"| {kind} fwd+bwd | {B} {H} {L} {D} | | {t['on'] * 1e3:.1f} | {t['off'] * 1e3:.1f} | "
                      f"{t['off'] / t['on']:.2f} | | |", flush=True)
                continue
            out, base = sm.call_under(on, q, k, v, **caps), sm.call_under(off, q, k, v, **caps)
            assert rel_frobenius(out, base) < 1e-2
            timed = {"on": lambda: on[0](q, k, v, **caps), "off": lambda: off[0](q, k, v, **caps)}
            dims = {"B": B, "H": H, "Hkv": H, "M": L, "N": L, "D": D, "Dv": D}
            attend = flex_attend(kir, q, k, v, caps)
            if rel_frobenius(attend(q, k, v), out) < 5e-2:
                timed["flex"] = lambda: attend(q, k, v)
            t = timer.in_turns(timed)
            kept = kept_pairs(kir, dims, caps, B, H, L, L) / (B * H * L * L)
            flex = f"{t['flex'] * 1e3:.1f} | {t['flex'] / t['on']:.2f}" if "flex" in t else "n/a | n/a"
            print(f"| {kind} | {B} {H} {L} {D} | {100 * kept:.1f} | {t['on'] * 1e3:.1f} | {t['off'] * 1e3:.1f} | "
                  f"{t['off'] / t['on']:.2f} | {flex} |", flush=True)
            timed = None
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
