"""Build the backward kernel (NVRTC, sm_90a, no GPU) of generated attention programs that
compile (tests/fuzzgen.py), at a head dim drawn per program: every one must build. Counts
outcomes and prints the first program of each failure.

    python3 tools/dev/backward_build_fuzz.py --seconds 600 [--seed S] [--last FILE] [--capture-grads]
        [--query-split] [--head-dims 144,192,256] [--forward] [--key-maps]

--last FILE holds the program being built (with its head dim), so that a build that hangs or
runs past a caller's timeout can be found. --capture-grads builds the program that also adds
the captured tensors' gradients (KDSL_CAPTURE_GRADS: atomic, step-uniform and per-offset sums)
where the score reads a float captured tensor, and counts those builds apart. --query-split builds
the program whose CTAs may split their query tiles (Program.query_split). --forward builds the
forward kernel instead (what a first call builds); --key-maps the forward's KDSL_KEY_STRIDES
program beside the default one, counting kernels where it has more local memory. Where cuobjdump
is installed, a build whose wgmmas ptxas serialized (about a wait a product: no error says so)
counts as "serialized", by head dim.
"""
import argparse
import random
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402

import fuzzgen  # noqa: E402
from kdsl import sass  # noqa: E402
from kdsl.errors import SourceError  # noqa: E402
from kdsl.grammar import parse  # noqa: E402
from kdsl.passes import pipeline, score_grad  # noqa: E402
from kdsl.runtime import cubin_info  # noqa: E402
from kdsl.runtime.compiler import build  # noqa: E402
from kdsl.runtime.programs import Program  # noqa: E402


class _Done(Exception):
    """The time is up (Hypothesis would otherwise draw all its examples)."""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--last", help="write each program here before building it")
    ap.add_argument("--capture-grads", action="store_true", help="build the capture-gradient program where it differs")
    ap.add_argument("--query-split", action="store_true", help="build the program that splits query tiles")
    ap.add_argument("--forward", action="store_true", help="build the forward kernel instead of the backward")
    ap.add_argument("--key-maps", action="store_true",
                    help="build the forward's KDSL_KEY_STRIDES program (Program.key_maps) beside the default one and "
                         "count the kernels where it has more local memory")
    ap.add_argument("--head-dims", help="draw a program's head dim from these (default: every multiple of 16 to 256)")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    counts = {"built": 0, "spilled": 0, "serialized": 0, "diagnostic": 0, "failed": 0}
    spilled_dims, serialized_dims = {}, {}  # head dim -> spilled / serialized builds
    choices = [int(x) for x in args.head_dims.split(",")] if args.head_dims else list(range(16, 257, 16))
    with_grads = [0]  # builds that add captured tensors' gradients (--capture-grads)
    failures = []
    serialized_programs = []  # (head dim, kernel, program) of the first few
    key_maps_worse = []  # (head dim, kernel, program): more local memory under --key-maps
    start = time.time()

    @seed(args.seed)
    @settings(max_examples=10**6, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(fuzzgen.programs())
    def one(text):
        if time.time() - start > args.seconds:
            raise _Done
        try:
            kernels = [k for k in pipeline.check(parse(text, "fuzz.kd")) if k.kind == "attention"]
        except SourceError:
            counts["diagnostic"] += 1
            return
        for k in kernels:
            dims = pipeline.head_dims(k)
            d = dims[0] if len(dims) == 1 else rng.choice(choices)
            if args.last:
                Path(args.last).write_text(f"// head dim {d}, kernel {k.name}\n{text}")
            grads = args.capture_grads and bool(score_grad.capture_grads(k))
            with_grads[0] += grads
            try:
                if args.key_maps:
                    b = build(k, "sm_90a", d, program=Program(key_maps=True))
                    plain = build(k, "sm_90a", d)
                    if cubin_info.frame_bytes(b.compiled.cubin, b.generated.entry) > \
                            cubin_info.frame_bytes(plain.compiled.cubin, plain.generated.entry):
                        key_maps_worse.append((d, k.name, text))
                elif args.forward:
                    b = build(k, "sm_90a", d)
                else:
                    b = build(k, "sm_90a", d,
                              program=Program(backward=True, capture_grads=grads, query_split=args.query_split))
                spilled = bool(cubin_info.frame_bytes(b.compiled.cubin, b.generated.entry))
                rep = sass.inspect(b.compiled.cubin, b.generated.entry)
                products = rep.tensor_ops.get("HGMMA", 0) if rep else 0
                serialized = products > 0 and rep.other_ops["WARPGROUP.DEPBAR"] * 4 >= products
                counts["spilled" if spilled else "serialized" if serialized else "built"] += 1
                if spilled:
                    spilled_dims[d] = spilled_dims.get(d, 0) + 1
                if serialized:
                    serialized_dims[d] = serialized_dims.get(d, 0) + 1
                    if len(serialized_programs) < 3:
                        serialized_programs.append((d, k.name, text))
            except SourceError:
                counts["diagnostic"] += 1
            except Exception as e:  # noqa: BLE001 - every other exception is a finding
                counts["failed"] += 1
                if len(failures) < 5:
                    failures.append((d, text, "".join(traceback.format_exception_only(type(e), e))[:1500]))

    try:
        one()
    except _Done:
        pass
    print(f"{sum(counts.values())} kernels in {time.time() - start:.0f} s (seed {args.seed}): {counts}"
          + (f"; {with_grads[0]} with captured tensors' gradients" if args.capture_grads else "")
          + (f"; spills by head dim {dict(sorted(spilled_dims.items()))}" if spilled_dims else "")
          + (f"; serialized by head dim {dict(sorted(serialized_dims.items()))}" if serialized_dims else ""))
    if args.key_maps:
        print(f"key maps: {len(key_maps_worse)} kernels with more local memory than the default program")
        for d, name, text in key_maps_worse[:3]:
            print(f"\n--- more local memory under key maps: {name} at head dim {d}\n{text[:2000]}")
    for d, text, msg in failures:
        print(f"\n--- head dim {d}\n{msg}\n{text[:2000]}")
    for d, name, text in serialized_programs:
        print(f"\n--- serialized: {name} at head dim {d}\n{text[:2000]}")
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
