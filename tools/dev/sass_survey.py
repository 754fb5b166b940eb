#!/usr/bin/env python3
"""The sm_90a builds of the attention kernels in FILES (the backward's, or the forward's with
--forward; --loading-masks: only kernels whose mask loads data) under two sets of device-header
defines, with no GPU (NVRTC and cuobjdump): registers, local bytes, spill instructions and global
loads a build, one row a kernel. Which kernels a trial switch changes and how, before timing it on
a device (tools/dev/backward_ab.py, attrs_sweep.py), or which builds spill (--b "" twice: one column).

    python3 tools/dev/sass_survey.py --d 128 --loading-masks --a "" --b "KDSL_BWD_MASK_FIRST=0" \
        samples/*.kd tools/dev/heldout*.kd > survey.txt
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kdsl import ir, sass  # noqa: E402
from kdsl.errors import KdslError  # noqa: E402
from kdsl.grammar import parse  # noqa: E402
from kdsl.passes import pipeline  # noqa: E402
from kdsl.runtime.compiler import build  # noqa: E402
from kdsl.runtime.programs import Program  # noqa: E402


def mask_loads(k) -> bool:
    mask = k.func("mask")
    return mask is not None and any(isinstance(n, ir.Load) for n in ir.walk(mask))


def resources(k, d: int, defines: str, backward: bool) -> str:
    os.environ["KDSL_DEFINES"] = defines  # read by every build (part of its cache key)
    try:
        built = build(k, "sm_90a", d, program=Program(backward=backward))
    except KdslError as e:
        return f"FAIL {str(e).splitlines()[0][:160]}"
    r = sass.inspect(built.compiled.cubin, built.generated.entry)
    if r is None:
        raise SystemExit("no cuobjdump (pip install nvidia-cuda-cuobjdump)")
    return f"{r.registers} regs, {r.local_bytes} B local, {r.spill_ops} spill ops, {r.other_ops.get('LDG', 0)} LDG"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--d", type=int, default=128, help="head dim")
    ap.add_argument("--a", default="", help="KDSL_DEFINES of the first column ('' the defaults)")
    ap.add_argument("--b", default=None, help="KDSL_DEFINES of a second column (none by default)")
    ap.add_argument("--forward", action="store_true", help="the forward's builds (default: the backward's)")
    ap.add_argument("--loading-masks", action="store_true", help="only kernels whose mask loads data")
    ap.add_argument("--only", help="comma-separated kernel names (default: every kernel of FILES)")
    args = ap.parse_args()
    columns = [args.a] + ([args.b] if args.b is not None else [])
    print("| kernel | D | " + " | ".join(f"[{c or 'default'}]" for c in columns) + " |")
    print("|---|---|" + "---|" * len(columns))
    for f in args.files:
        for k in pipeline.check(parse(Path(f).read_text(), f)):
            if k.kind == "attention" and (mask_loads(k) or not args.loading_masks) and \
                    (not args.only or k.name in args.only.split(",")):
                cols = [resources(k, args.d, defs, not args.forward) for defs in columns]
                print(f"| {Path(f).stem}:{k.name} | {args.d} | " + " | ".join(cols) + " |", flush=True)


if __name__ == "__main__":
    main()
