"""The backward alone with each backward kernel forced (KDSL_BWD_KERNEL: codegen/emit.py
backward_plan), timed in turns on the same inputs: e.g. the wide wgmma kernel against the
<= 128 one at head dim 128, on programs whose <= 128 build spills. Prints each build's
registers and local memory, then a row a kind as backward_ab.py prints them (its timing in
turns and report).

    python tools/dev/backward_kind_ab.py --file samples/causal.kd --shape 2,16,4096,4096,128 \
        --kinds "wgmma;wgmma_wide" [--kernels causal] [--reps 20]
"""
import argparse

import torch

import kdsl
from kdsl.runtime import attention_backward as ab
from kdsl.testing import attention_inputs

from backward_ab import installer, load_variant, report, time_in_turns  # tools/dev on sys.path


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--file", default="samples/causal.kd")
    ap.add_argument("--kernels", help="comma-separated kernel names (default: every attention kernel of the file)")
    ap.add_argument("--shape", default="2,16,4096,4096,128")
    ap.add_argument("--kinds", default="wgmma;wgmma_wide")
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    B, H, M, N, D = map(int, args.shape.split(","))
    kinds = args.kinds.split(";")
    print(f"device: {torch.cuda.get_device_name()}; backward alone, B={B} H={H} M={M} N={N} D={D}")
    mod = kdsl.load(args.file)
    names = args.kernels.split(",") if args.kernels else [n for n in mod.kernels if mod.ir[n].kind == "attention"]
    for name in names:
        kern = getattr(mod, name)
        q, k, v, caps = attention_inputs(kern.ir, B, H, H, M, N, D)
        cap_list = [caps[t.name] for t in kern.captures]
        out, lse = kern._run(q, k, v, cap_list, None, None, None, None, keep_lse=True)
        dout = torch.randn_like(out)
        entries = {}
        for kind in kinds:
            entries[kind], info = load_variant(kern, {"KDSL_BWD_KERNEL": kind}, q, k, v, out, dout, lse, cap_list)
            print(f"  {name} [{kind}]: {info}")
        times, results = time_in_turns(kinds, args.reps, installer(kern, entries),
                                       lambda: ab.backward(kern, q, k, v, out, dout, lse, None, cap_list, None)[:3])
        report(name, kinds, times, results)


if __name__ == "__main__":
    main()
