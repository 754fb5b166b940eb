#!/usr/bin/env python3
"""The backward kernel of a sample, launched once for Nsight Compute after a warm-up:

    ncu --profile-from-start off --kernel-name regex:_bwd$ --set full -o bwd \
        python3 tools/dev/ncu_backward.py plain 2,16,4096,128
    ncu -i bwd.ncu-rep --page source --csv --print-source sass > bwd.csv
    python3 tools/dev/ncu_hot_lines.py bwd.csv

(where a backward step's time goes: the wgmma waits, the elementwise part, the dQ atomics).
The kernel may be FILE.kd:NAME; --seed=S first draws the inputs from seed S (odd: bool
captures sorted along their rows). Without --kernel-name, ncu profiles every launch of the
backward: the tile summary, delta, the kernel and dQ's rows."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from devtools import profile_once  # noqa: E402


def main() -> None:
    import torch
    import kdsl
    from kdsl.runtime import attention_backward as ab
    from kdsl.testing import attention_inputs
    args = sys.argv[1:]
    seed = int(args.pop(0).split("=")[1]) if args and args[0].startswith("--seed=") else None
    name = args[0] if args else "plain"
    B, H, S, D = map(int, (args[1] if len(args) > 1 else "2,16,4096,128").split(","))
    path, name = name.split(":") if ":" in name else (f"samples/{name}.kd", name)
    kern = getattr(kdsl.load(ROOT / path), name)
    q, k, v, caps = attention_inputs(kern.ir, B, H, H, S, S, D, seed=seed)
    cap_list = [caps[t.name] for t in kern.captures]
    out, lse = kern._run(q, k, v, cap_list, None, None, None, None, keep_lse=True)
    dout = torch.randn_like(out)
    profile_once([lambda: ab.backward(kern, q, k, v, out, dout, lse, None, cap_list, None)])


if __name__ == "__main__":
    main()
