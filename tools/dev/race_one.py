"""One attention call for compute-sanitizer: a program's kernel at one shape, optionally with
attrs, printing the configuration the call built (warpgroups, tile, stages, NVRTC defines).

    compute-sanitizer --tool racecheck --racecheck-report all --print-limit 4 \
        python3 tools/dev/race_one.py samples/causal.kd causal 1,2,2,1000,1500,192 [--dv 128] [--attrs consumers=1]

SHAPE is B,H,Hkv,M,N,D. For racecheck past one pass of the forward's ring, run with
KDSL_DEFINES=KDSL_RACECHECK_ARRIVALS=1 (tools/dev/sanitize.py's docstring says why).
"""
import argparse

import torch

import kdsl
from kdsl.runtime.attention_launch import AttentionKernel
from kdsl.testing import attention_inputs

ap = argparse.ArgumentParser()
ap.add_argument("program")
ap.add_argument("kernel")
ap.add_argument("shape", help="B,H,Hkv,M,N,D")
ap.add_argument("--dv", type=int, default=0, help="v's head dim (0: the program's default)")
ap.add_argument("--attrs", default="", help="k=v[,k=v]: kernel attrs (integers)")
args = ap.parse_args()
mod = kdsl.load(args.program)
fn, kir = getattr(mod, args.kernel), mod.ir[args.kernel]
if args.attrs:
    fn = AttentionKernel(kir.with_attrs(**{k: int(v) for k, v in (kv.split("=") for kv in args.attrs.split(","))}))
B, H, Hkv, M, N, D = map(int, args.shape.split(","))
q, k, v, caps = attention_inputs(kir, B, H, Hkv, M, N, D, Dv=args.dv)
fn(q, k, v, **caps)
torch.cuda.synchronize()
plan = next(iter(fn._plans.values()))
built = next(b for b, loaded in fn._loaded.values() if loaded is plan.loaded)
lk = built.kernel
print(f"launch ok: {args.kernel} {args.shape} consumers {lk.attr('consumers')} tile {lk.attr('tile_m')}x{lk.attr('tile_n')} "
      f"stages {lk.attr('stages')} defines {[o for o in built.options if o.startswith('-D')]}")
