"""The backward alone with each backward kernel forced (KDSL_BWD_KERNEL: codegen/emit.py
backward_plan), timed in turns on the same inputs: e.g. the wide wgmma kernel against the
<= 128 one at head dim 128, on programs whose <= 128 build spills. A kind KIND/LOADS forces
how it loads Q and dO too (KDSL_BWD_LOADS: tma, cp_async). Prints each build's registers and
local memory, then a row a kind as backward_ab.py prints them (its timing in turns and report).

    python tools/dev/backward_kind_ab.py --file samples/causal.kd --shape 2,16,4096,4096,128 \
        --kinds "wgmma;wgmma_wide" [--kernels causal] [--reps 20]
    ... --shape 2,16,4096,4096,256 --kinds "wgmma_wide;wgmma_wide/cp_async"
"""
import argparse

import torch

import kdsl
from backward_ab import compare  # tools/dev on sys.path


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--file", default="samples/causal.kd")
    ap.add_argument("--kernels", help="comma-separated kernel names (default: every attention kernel of the file)")
    ap.add_argument("--shape", default="2,16,4096,4096,128")
    ap.add_argument("--kinds", default="wgmma;wgmma_wide")
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    shape = tuple(map(int, args.shape.split(",")))
    B, H, M, N, D = shape
    print(f"device: {torch.cuda.get_device_name()}; backward alone, B={B} H={H} M={M} N={N} D={D}")
    mod = kdsl.load(args.file)
    names = args.kernels.split(",") if args.kernels else [n for n in mod.kernels if mod.ir[n].kind == "attention"]
    for name in names:
        compare(getattr(mod, name), name, {kind: kind_env(kind) for kind in args.kinds.split(";")}, shape, args.reps)


def kind_env(kind: str) -> dict:
    """'KIND' or 'KIND/LOADS' as the environment that forces it."""
    kernel, _, loads = kind.partition("/")
    return {"KDSL_BWD_KERNEL": kernel, "KDSL_BWD_LOADS": loads or None}


if __name__ == "__main__":
    main()
