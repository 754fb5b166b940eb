"""Per-gradient errors (dq, dk, dv against float64 autograd of the reference, as kdsl check
--grad measures them) of one attention program at one case, and of variations of it: for
narrowing down a backward failure tools/gpu_fuzz.py found.

    python3 tools/dev/bwd_repro.py PROGRAM.kd B,H,Hkv,M,N,D,Dv [--seed S] [--env NAME=V ...]
"""
import argparse
import os
import sys
from pathlib import Path

import kdsl
from kdsl.backends import Torch
from kdsl.cases import AttentionCase, attention_inputs, conform
from kdsl.check import autograd_grads, gradient_error, reference_grads


def errors(text: str, shape, seed: int) -> str:
    import torch
    mod = kdsl.compile(text, "repro.kd")
    name = next(iter(mod.kernels))
    kir, fn = mod.ir[name], getattr(mod, name)
    B, H, Hkv, M, N, D, Dv = shape
    case = conform(kir, AttentionCase(B, H, Hkv, M, N, D, seed, Dv=Dv))
    q, k, v, caps = attention_inputs(kir, case, Torch("cuda"))
    gen = torch.Generator(device="cuda").manual_seed(seed % 2**63)
    dout = torch.randn((*q.shape[:3], v.shape[3]), generator=gen, device="cuda").to(q.dtype)
    got = autograd_grads(lambda q, k, v: fn(q, k, v, **caps), q, k, v, dout)
    with torch.no_grad():
        out = fn(q, k, v, **caps)
    out = out[0] if isinstance(out, tuple) else out
    want = reference_grads(kir, q, k, v, caps, None, out, dout)
    from kdsl import reference
    ref_out, ref_lse = reference.attention(kir, q, k, v, caps)
    with torch.no_grad():
        _, lse = fn._run(q, k, v, fn._collect_captures((), caps), None, None, None, None, keep_lse=True)
    parts = [f"out {gradient_error(out, ref_out):.2e}"]
    if lse is not None:
        fin = torch.isfinite(ref_lse)
        parts.append(f"lse max|d| {float((lse[fin].double() - ref_lse[fin]).abs().max()):.2e} "
                     f"inf-rows-ok {bool(torch.isneginf(lse[~fin]).all())}")
    for n, g, w in zip(("dq", "dk", "dv"), got, want):
        bad = (g.double() - w.double()).abs() > 1e-2 * (w.double().abs().max() + 1e-30)
        where = ""
        if bad.any():
            idx = bad.nonzero()
            where = f" bad {int(bad.sum())} rows {int(idx[:, 2].min())}..{int(idx[:, 2].max())} heads " \
                    f"{sorted(set(idx[:, 1].tolist()))[:6]} cols {int(idx[:, 3].min())}..{int(idx[:, 3].max())}"
        parts.append(f"{n} {gradient_error(g, w):.2e} |w| {float(w.double().norm()):.2e}{where}")
    return f"{case.label()}: " + "; ".join(parts)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("program", type=Path)
    p.add_argument("shape")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--env", action="append", default=[])
    a = p.parse_args(argv)
    for kv in a.env:
        n, v = kv.split("=", 1)
        os.environ[n] = v
    try:
        print(errors(a.program.read_text(), [int(x) for x in a.shape.split(",")], a.seed), flush=True)
    except Exception as e:
        print(f"{a.shape}: raised {type(e).__name__}: {str(e)[:300]}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
