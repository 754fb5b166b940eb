#!/usr/bin/env python3
"""Forward + backward of programs whose score reads a learned captured tensor (its gradient
wanted too), kdsl against compiled FlexAttention, in turns on the same inputs: how much the
captured tensors' gradients (fp32 atomics, one per kept element and load) cost against the
same program with the tensor held constant, and against Flex's.

    python3 tools/dev/learned_bias.py [--shape 2,16,2048,2048,64] [--reps 10]

Prints each program's median µs for kdsl with and without the tensor's gradient and for Flex
with it, and the relative error of each one's tensor gradient against the float64 reference's
(kdsl.check.reference_capture_grads, from kdsl's output as the backward's delta).
"""
import argparse
import statistics

import torch

import kdsl
from kdsl.bench import flex_attend
from kdsl.check import reference_capture_grads
from kdsl.testing import attention_inputs

# name -> (declaration, score, mask): a T5-like clamped relative-position table, learned ALiBi
# slopes (every element of a head adds into one entry), a per-head gain on s
PROGRAMS = {
    "relpos_table": ("bias: f32[H, 256]", "s + bias[h, max(0, min(255, i - j + 128))]", None),
    "alibi_slopes": ("slopes: f32[H]", "s - slopes[h] * float(i - j)", "j <= i"),
    "gain": ("gain: f32[H]", "s * gain[h]", None),
}


def program(name, decl, score, mask):
    lines = [f"attention {name} {{", "    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]",
             f"    {decl}", f"    score(s, b, h, i, j) = {score}"]
    if mask:
        lines.append(f"    mask(b, h, i, j) = {mask}")
    return "\n".join(lines + ["}"]) + "\n"


def rel_err(got, want) -> str:
    return f"{float((got.double() - want).norm() / want.norm()):.1e}"


def timed(fn):
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    fn()
    e1.record()
    e1.synchronize()
    return e0.elapsed_time(e1) * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="2,16,2048,2048,64")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--only", default=",".join(PROGRAMS))
    args = ap.parse_args()
    B, H, M, N, D = map(int, args.shape.split(","))
    print(f"device: {torch.cuda.get_device_name()}; B={B} H={H} M={M} N={N} D={D}; fwd + bwd, median of "
          f"{args.reps} in turns, us")
    print("| program | kdsl, tensor learned | kdsl, tensor constant | Flex, tensor learned | kdsl's speed vs Flex "
          "| tensor grad rel err: kdsl | Flex |\n|---|---|---|---|---|---|---|")
    for name in args.only.split(","):
        decl, score, mask = PROGRAMS[name]
        mod = kdsl.compile(program(name, decl, score, mask))
        kir = mod.ir[name]
        q, k, v, caps = attention_inputs(kir, B, H, H, M, N, D)
        q, k, v = (x.requires_grad_() for x in (q, k, v))
        ((cname, cap),) = caps.items()
        learned = cap.detach().clone().requires_grad_()
        dout = torch.randn_like(q)
        fn = getattr(mod, name)
        flex = flex_attend(kir, q, k, v, {cname: learned})

        def run(attend, with_cap):
            inputs = (q, k, v, learned) if with_cap else (q, k, v)
            return lambda: torch.autograd.grad(attend(q, k, v), inputs, dout)

        calls = {"learned": run(lambda q, k, v: fn(q, k, v, **{cname: learned}), True),
                 "constant": run(lambda q, k, v: fn(q, k, v, **{cname: cap}), False),
                 "flex": run(flex, True)}
        with torch.no_grad():
            out = fn(q, k, v, **{cname: cap})
        want = reference_capture_grads(kir, q, k, v, {cname: cap}, None, out, dout)[cname]
        del out
        errs = [rel_err(calls["learned"]()[-1], want)]  # each call warmed once
        calls["constant"]()
        try:
            errs.append(rel_err(calls["flex"]()[-1], want))
        except Exception as e:  # noqa: BLE001 - a peer that cannot differentiate the tensor is a finding
            print(f"Flex on {name}: {type(e).__name__}: {str(e)[:300]}")
            del calls["flex"]
            errs.append("—")
        del want
        torch.cuda.empty_cache()
        times = {c: [] for c in calls}
        for _ in range(args.reps):
            for c, f in calls.items():
                times[c].append(timed(f))
        med = {c: statistics.median(t) for c, t in times.items()}
        flex = f"{med['flex']:.0f} | x{med['flex'] / med['learned']:.2f}" if "flex" in med else "failed | —"
        print(f"| {name} | {med['learned']:.0f} | {med['constant']:.0f} | {flex} | {errs[0]} | {errs[1]} |", flush=True)


if __name__ == "__main__":
    main()
