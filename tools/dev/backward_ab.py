"""The backward kernel alone, timed against builds of itself with other NVRTC defines (A/B),
in turns on the same inputs: e.g. KDSL_BWD_MIN_BLOCKS=1 (no register cap) against the default.
Prints each build's registers, local memory and a digest of its cubin (two variants with the
same digest built the same kernel: a define that changed nothing).

    python tools/dev/backward_ab.py --programs plain,causal --shape 2,16,4096,4096,128 \
        --variants "default;-DKDSL_BWD_MIN_BLOCKS=1" [--reps 20]
    python tools/dev/backward_ab.py --programs plain --shape 1,8,8192,1024,128 \
        --variants "default;KDSL_BWD_QUERY_SPLITS=1"

Each variant is built by the runtime itself (its defines through KDSL_DEFINES, part of every
cache key), and both of the runtime's entries for the backward are swapped in turn: the loaded
module and the launch plan that holds its kernel. Swapping the module alone once timed the
default build under every name (the plan, cached per signature since the forty-first session,
kept launching it)."""
from __future__ import annotations

import argparse
import hashlib
import os
import pathlib
import statistics
from contextlib import contextmanager

import torch

import kdsl
from kdsl import sass
from kdsl.runtime import attention_backward as ab
from kdsl.runtime.compiler import build
from kdsl.testing import attention_inputs

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _setenv(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


@contextmanager
def environment(env: dict):
    """os.environ with env's entries set (None: removed) for the block, restored after."""
    saved = {name: os.environ.get(name) for name in env}
    try:
        for name, value in env.items():
            _setenv(name, value)
        yield
    finally:
        for name, value in saved.items():
            _setenv(name, value)


def load_variant(kern, env: dict, q, k, v, out, dout, lse, caps):
    """The runtime's backward entries ((key, loaded module), (key, launch plan)) built with env
    (KDSL_DEFINES, KDSL_BWD_KERNEL, ...) set, and a line describing the build."""
    with environment(env):
        for cache in (kern._loaded, kern._plans):
            for key in [key for key in cache if key[0] == "backward"]:
                del cache[key]
        ab.backward(kern, q, k, v, out, dout, lse, None, caps, None)
        (lkey,) = [key for key in kern._loaded if key[0] == "backward"]
        (pkey,) = [key for key in kern._plans if key[0] == "backward"]
        # the program the runtime chose (its key: ..., capture_grads, query_split), not always the default
        program = ab.Program(backward=True, capture_grads=lkey[-2], query_split=lkey[-1])
        built = build(kern._kernel_ir(), kern._arch(), q.shape[3], value_dim=v.shape[3], program=program)
    rep = sass.inspect(built.compiled.cubin, built.generated.entry)
    info = f"{rep.registers} regs, {rep.local_bytes} B local" if rep else "no cuobjdump"
    info += f", cubin {hashlib.sha256(built.compiled.cubin).hexdigest()[:12]}"
    return ((lkey, kern._loaded[lkey]), (pkey, kern._plans[pkey])), info


def installer(kern, entries: dict):
    """install(variant): puts the variant's loaded module and launch plan in the runtime's caches."""
    def install(var):
        (lkey, loaded), (pkey, plan) = entries[var]
        kern._loaded[lkey], kern._plans[pkey] = loaded, plan
    return install


def defines_env(variant: str) -> dict:
    """'default', or '-DNAME[=V] ...' and 'KDSL_NAME=V ...' (a runtime switch: KDSL_BWD_QUERY_SPLITS=1)
    as the environment it stands for."""
    if variant == "default":
        return {"KDSL_DEFINES": None}
    items = variant.split()
    switches = [item for item in items if item.startswith("KDSL_") and "=" in item]
    defines = [item[2:] for item in items if item.startswith("-D")]
    if len(switches) + len(defines) != len(items):
        raise SystemExit(f"variant {variant!r}: 'default', -DNAME[=VALUE] options or KDSL_NAME=VALUE switches")
    return {"KDSL_DEFINES": " ".join(defines) or None, **dict(item.split("=", 1) for item in switches)}


def compare(kern, name: str, envs: dict, shape, reps: int, seed: int | None = None) -> None:
    """Time kern's backward alone at shape (B, H, M, N, D[, Hkv]) under each of envs ({label: env for
    load_variant}), in turns on the same inputs, and print a row a label (the first: the base)."""
    B, H, M, N, D, Hkv = shape if len(shape) == 6 else (*shape, shape[1])
    q, k, v, caps = attention_inputs(kern.ir, B, H, Hkv, M, N, D, seed=seed)
    cap_list = [caps[t.name] for t in kern.captures]
    out, lse = kern._run(q, k, v, cap_list, None, None, None, None, keep_lse=True)
    dout = torch.randn_like(out)
    entries = {}
    for label, env in envs.items():
        entries[label], info = load_variant(kern, env, q, k, v, out, dout, lse, cap_list)
        print(f"  {name} [{label}]: {info}")
    labels = list(envs)
    times, results = time_in_turns(labels, reps, installer(kern, entries),
                                   lambda: ab.backward(kern, q, k, v, out, dout, lse, None, cap_list, None)[:3])
    report(name, labels, times, results)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--programs", default="plain,causal,relpos")
    ap.add_argument("--file", help="the .kd file holding every program (default: samples/NAME.kd each)")
    ap.add_argument("--shape", default="2,16,4096,4096,128", help="B,H,M,N,D[,Hkv]")
    ap.add_argument("--variants", default="default;-DKDSL_BWD_MIN_BLOCKS=1",
                    help="';'-separated: 'default' or -DNAME[=VALUE] ...; write --variants=\"...\" when the first "
                         "starts with -D (argparse takes a separate '-D...' for an option)")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--seed", type=int, help="inputs from this seed (odd: bool captures sorted along their rows)")
    args = ap.parse_args()
    shape = tuple(map(int, args.shape.split(",")))
    B, H, M, N, D = shape[:5]
    gqa = f" Hkv={shape[5]}" if len(shape) == 6 else ""
    print(f"device: {torch.cuda.get_device_name()}; backward alone, B={B} H={H}{gqa} M={M} N={N} D={D}, us")
    for name in args.programs.split(","):
        kern = getattr(kdsl.load(args.file or ROOT / "samples" / f"{name}.kd"), name)
        compare(kern, name, {var: defines_env(var) for var in args.variants.split(";")}, shape, args.reps, args.seed)


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
