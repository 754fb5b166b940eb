#!/usr/bin/env python3
"""Dense masks with block structure (documents, padding, a band) and without (random): kdsl
with whole-block tile summaries (mask_analysis.whole_tiles) against kdsl without them, compiled
FlexAttention with a BlockMask made from the same data (its creation untimed), and torch SDPA
given the mask as attn_mask (bool kernels only). Same inputs, timed in turns (bench.Timer).

    python3 tools/dev/structured_masks.py [--reps 20] [--shape B,H,L,D ...] [--kinds documents,random]
        [--backward]

Prints one table row per (kernel, kind, shape): µs and the ratios other / summary (> 1: the
summary is faster). --backward: a forward and the gradients of q, k and v (torch.autograd.grad),
kdsl against itself only.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


SWITCH = "KDSL_TILE_SUMMARY_2D"  # --switch: the environment variable compared on / off


def plan(source_ir, env: str, defines: str = ""):
    """A fresh kernel whose plan and build are made (on its first call, call_under) with
    SWITCH=env and KDSL_DEFINES=defines."""
    from kdsl.runtime.attention_launch import AttentionKernel
    return AttentionKernel(source_ir), {SWITCH: env, "KDSL_DEFINES": defines}


def call_under(kern_env, *args, **kw):
    kern, env = kern_env
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        return kern(*args, **kw)
    finally:
        for name, value in saved.items():
            if value is None:
                del os.environ[name]
            else:
                os.environ[name] = value


def main() -> None:
    global SWITCH
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--shape", nargs="*", default=["2,16,4096,128", "2,16,4096,64"])
    ap.add_argument("--kinds", default="documents,padded,band,random")
    ap.add_argument("--kernels", default="dense_bool,dense_i32_causal,segment_rules")
    ap.add_argument("--backward", action="store_true")
    ap.add_argument("--defines", default="", help="KDSL_DEFINES for a third kernel, the summary's with these "
                    "trial switches (NAME=1), timed beside the others")
    ap.add_argument("--switch", default=SWITCH, help="the variable set to 1 / 0 (KDSL_TILE_SUMMARY_HEADS: "
                    "per-head masks, kernel head_bool_causal)")
    ap.add_argument("--on", default="1", help="the switch's value for the summary's kernel (KDSL_SUMMARY_BESIDE_LOADS="
                    "forward: the forward's summary alone)")
    ap.add_argument("--off", default="0", help="the switch's value for the kernel compared (the columns 'no summary')")
    args = ap.parse_args()
    SWITCH = args.switch
    import torch
    import kdsl
    from kdsl.bench import Timer, flex_attend, kept_pairs
    from kdsl.testing import rel_frobenius
    from gpu.test_dense_mask_summary_gpu import SOURCE, _captures, _inputs
    timer = Timer(args.reps)
    mod = kdsl.compile(SOURCE)
    print(torch.cuda.get_device_name(), flush=True)
    print("| kernel | kind | B H L D | kept % | summary µs | its summary + attention | no summary µs | x | Flex µs | x | "
          "SDPA µs | x |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for shape in args.shape:
        B, H, L, D = map(int, shape.split(","))
        for name in args.kernels.split(","):
            kir = mod.ir[name]
            for kind in args.kinds.split(","):
                gen = torch.Generator(device="cuda").manual_seed(hash((name, kind, shape)) % 2**31)
                q, k, v = _inputs(torch, B, H, H, L, L, D, gen)
                caps = _captures(torch, name, kind, B, L, L, gen, H)
                on, off = plan(kir, args.on), plan(kir, args.off)
                if args.backward:
                    q, k, v = (x.requires_grad_() for x in (q, k, v))
                    dout = torch.randn_like(q)
                    step = lambda kern: torch.autograd.grad(kern(q, k, v, **caps), (q, k, v), dout)
                    grads_on = call_under((lambda *a, **kw: step(on[0]), on[1]))
                    grads_off = call_under((lambda *a, **kw: step(off[0]), off[1]))
                    err = max(rel_frobenius(a, b) for a, b in zip(grads_on, grads_off))
                    assert err < 2e-2, (name, kind, err)
                    timed = {"on": lambda: step(on[0]), "off": lambda: step(off[0])}
                    if args.defines:  # the summary kernel built with the trial switches, a third column
                        trial = plan(kir, args.on, args.defines)
                        grads_trial = call_under((lambda *a, **kw: step(trial[0]), trial[1]))
                        err = max(rel_frobenius(a, b) for a, b in zip(grads_trial, grads_off))
                        assert err < 2e-2, (name, kind, "trial", err)
                        timed["trial"] = lambda: step(trial[0])
                    t = timer.in_turns(timed)
                    trial_cells = (f"{t['trial'] * 1e3:.1f} (with {args.defines}) | {t['off'] / t['trial']:.2f}"
                                   if args.defines else " | ")
                    print(f"| {name} fwd+bwd | {kind} | {B} {H} {L} {D} | | {t['on'] * 1e3:.1f} | {t['off'] * 1e3:.1f} | "
                          f"{t['off'] / t['on']:.2f} | {trial_cells} | | |", flush=True)
                    continue
                out = call_under(on, q, k, v, **caps)
                base = call_under(off, q, k, v, **caps)
                if args.defines:  # the same summary kernel built with the trial switches
                    trial = plan(kir, args.on, args.defines)
                    assert rel_frobenius(call_under(trial, q, k, v, **caps), out) < 1e-2
                    given_trial = trial[0].tile_summary(q, k, v, **caps)
                    assert torch.equal(given_trial.buffer, on[0].tile_summary(q, k, v, **caps).buffer)
                assert rel_frobenius(out, base) < 1e-2, (name, kind, rel_frobenius(out, base))
                timed = {"on": lambda: on[0](q, k, v, **caps), "off": lambda: off[0](q, k, v, **caps)}
                dims = {"B": B, "H": H, "Hkv": H, "M": L, "N": L, "D": D, "Dv": D}
                try:
                    attend = flex_attend(kir, q, k, v, caps)
                    if rel_frobenius(attend(q, k, v), out) < 5e-2:
                        timed["flex"] = lambda: attend(q, k, v)
                except Exception as e:  # noqa: BLE001 - a peer that cannot run is reported, not fatal
                    print(f"  flex: {type(e).__name__}: {str(e)[:120]}", flush=True)
                if name == "dense_bool":
                    m = caps["keep"][:, None]
                    sdpa = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=m)
                    timed["sdpa"] = sdpa
                # the two halves of a call: the summary kernel alone, the attention kernel given it
                given = on[0].tile_summary(q, k, v, **caps)
                timed["summary"] = lambda: on[0].tile_summary(q, k, v, **caps)
                timed["given"] = lambda: on[0](q, k, v, **caps, tile_summary=given)
                if args.defines:
                    timed["trial"] = lambda: trial[0](q, k, v, **caps)
                    timed["trial summary"] = lambda: trial[0].tile_summary(q, k, v, **caps)
                t = timer.in_turns(timed)
                kept = kept_pairs(kir, dims, caps, B, H, L, L) / (B * H * L * L)
                cell = lambda p: f"{t[p] * 1e3:.1f} | {t[p] / t['on']:.2f}" if p in t else "n/a | n/a"
                print(f"| {name} | {kind} | {B} {H} {L} {D} | {100 * kept:.1f} | {t['on'] * 1e3:.1f} | "
                      f"{t['summary'] * 1e3:.1f} + {t['given'] * 1e3:.1f} | {cell('off')} | {cell('flex')} | "
                      f"{cell('sdpa')} |", flush=True)
                if args.defines:
                    print(f"|   with {args.defines} | | | | {t['trial'] * 1e3:.1f} | {t['trial summary'] * 1e3:.1f} + | "
                          f"x{t['on'] / t['trial']:.3f} (summary default / this) | | | | | |", flush=True)
                timed = None  # let the inputs go before the next row allocates its own
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
