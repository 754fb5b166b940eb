"""The backward kernel alone, timed against builds of itself with other NVRTC defines (A/B),
in turns on the same inputs: e.g. KDSL_BWD_MIN_BLOCKS=1 (no register cap) against the default.
Prints each build's registers, local memory and CTAs per SM.

    python tools/dev/backward_ab.py --programs plain,causal --shape 2,16,4096,4096,128 \
        --variants "default;-DKDSL_BWD_MIN_BLOCKS=1" [--reps 20]
"""
import argparse
import ctypes
import pathlib
import statistics

import torch

import kdsl
from kdsl import sass
from kdsl.codegen import emit
from kdsl.passes.target import get_target
from kdsl.runtime import attention_backward as ab, nvrtc
from kdsl.runtime.driver import _libcuda
from kdsl.runtime.launch import Loaded
from kdsl.testing import attention_inputs

ROOT = pathlib.Path(__file__).resolve().parents[2]


def build(kern, D, Dv, dev, options):
    from kdsl.runtime.compiler import _generate
    lowered, gen, base, _ = _generate(kern._kernel_ir(False), kern._arch(), D, Dv, ab.BACKWARD)
    compiled = nvrtc.compile_cuda(gen.source, gen.entry, base + options)
    plan = emit.backward_plan(D, Dv, get_target(kern._arch()))
    smem, threads = plan.smem, plan.threads
    loaded = Loaded(compiled.cubin, gen.entry, smem)
    n = ctypes.c_int()
    _libcuda().cuOccupancyMaxActiveBlocksPerMultiprocessor(ctypes.byref(n), ctypes.c_void_p(loaded.fn_ptr),
                                                          threads, smem)
    rep = sass.inspect(compiled.cubin, gen.entry)
    return loaded, f"{rep.registers} regs, {rep.local_bytes} B local, {n.value} CTAs/SM"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--programs", default="plain,causal,relpos")
    ap.add_argument("--shape", default="2,16,4096,4096,128")
    ap.add_argument("--variants", default="default;-DKDSL_BWD_MIN_BLOCKS=1")
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    B, H, M, N, D = map(int, args.shape.split(","))
    variants = args.variants.split(";")
    print(f"device: {torch.cuda.get_device_name()}; backward alone, B={B} H={H} M={M} N={N} D={D}, us")
    for name in args.programs.split(","):
        mod = kdsl.load(ROOT / "samples" / f"{name}.kd")
        kern = getattr(mod, name)
        q, k, v, caps = attention_inputs(kern.ir, B, H, H, M, N, D)
        cap_list = [caps[t.name] for t in kern.captures]
        out, lse = kern._run(q, k, v, cap_list, None, None, None, None, keep_lse=True)
        dout = torch.randn_like(out)
        # a first call loads the default build; each variant then replaces its kernel under the
        # runtime's own key (a key of our own making once went unread, and every variant ran the default)
        ab.backward(kern, q, k, v, out, dout, lse, None, cap_list, None)
        (key,) = [kk for kk in kern._loaded if kk[0] == "backward"]
        loaded_default = kern._loaded[key]
        builds = {}
        for var in variants:
            builds[var], info = build(kern, D, D, q.device.index, [] if var == "default" else var.split())
            print(f"  {name} [{var}]: {info}")
        install = lambda var: kern._loaded.__setitem__(key, (builds[var],) + loaded_default[1:])  # noqa: E731
        times, results = time_in_turns(variants, args.reps, install,
                                       lambda: ab.backward(kern, q, k, v, out, dout, lse, None, cap_list, None)[:3])
        report(name, variants, times, results)


def time_in_turns(variants, reps, install, run):
    """({variant: [us]}, {variant: run()'s last result}): rep r runs every variant once,
    starting at variant r % len, each after install(variant) puts it in place."""
    times, results = {var: [] for var in variants}, {}
    for r in range(reps):
        for var in variants[r % len(variants):] + variants[:r % len(variants)]:
            install(var)
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            results[var] = run()
            e1.record()
            e1.synchronize()
            times[var].append(e0.elapsed_time(e1) * 1e3)
    return times, results


def report(name, variants, times, results):
    """A row a variant: median us, speed against the first, and how far its gradients are from
    the first's (dQ's fp32 sums over key blocks land in no fixed order: builds agree to rounding,
    not bits)."""
    first = variants[0]
    for var in variants:
        diff = max(float((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-30))
                   for a, b in zip(results[var], results[first]))
        t = statistics.median(times[var])
        print(f"| {name} | {var} | {t:.0f} | x{statistics.median(times[first]) / t:.3f} | "
              f"grads differ from the first by {diff:.1e} of their max |", flush=True)

if __name__ == "__main__":
    main()
