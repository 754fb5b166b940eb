#!/usr/bin/env python3
"""One kdsl attention kernel and compiled FlexAttention on the same inputs, launched once each
between cudaProfilerStart / Stop after a warm-up, for Nsight Compute:

    ncu --profile-from-start off --section SpeedOfLight --section WarpStateStats \
        --section InstructionStats python3 tools/dev/ncu_versus_flex.py \
        tools/dev/key_scores.kd:rank1_bias:2,16,4096,4096,64

(where does a variant spend what Flex does not? Flex's launches are its block-mask-free
attention kernel; kdsl's its attention kernel and any tile summary it runs first).
--seed=S first draws the inputs from seed S (odd: bool captures sorted along their rows)."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from devtools import profile_once  # noqa: E402


def main() -> None:
    import kdsl
    from kdsl.bench import flex_attend
    from kdsl.testing import attention_inputs
    calls = []
    args = sys.argv[1:]
    seed = int(args.pop(0).split("=")[1]) if args and args[0].startswith("--seed=") else None
    for spec in args:
        path, name, shape = spec.split(":")
        B, H, M, N, D = map(int, shape.split(","))
        kern = getattr(kdsl.load(ROOT / path), name)
        q, k, v, caps = attention_inputs(kern.ir, B, H, H, M, N, D, seed=seed)
        flex = flex_attend(kern.ir, q, k, v, caps)
        calls += [lambda kern=kern, q=q, k=k, v=v, caps=caps: kern(q, k, v, **caps),
                  lambda flex=flex, q=q, k=k, v=v: flex(q, k, v)]
    profile_once(calls)


if __name__ == "__main__":
    main()
