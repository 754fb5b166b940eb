"""k and v in a KV cache's layout, timed (GPU): a cache kept [B, N, Hkv, D] (FlashAttention's,
vLLM's) passed as its transposed view, against the same values row-major [B, Hkv, N, D], in one
process and in turns (kdsl.bench.Timer, L2 flushed), with cuDNN's SDPA on the row-major arrays as
the peer. Columns: row-major by the default 3-D maps; row-major by the 4-D key maps
(KDSL_KEY_STRIDES's program, Program.key_maps: the A/B of the maps' rank); the view read in place
by them; the view copied row-major first (the default).

    python3 tools/dev/strided_keys.py [--reps 20] [--seed 0] [--shapes "plain,2,16,16,8192,8192,256;..."]
"""
import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import kdsl  # noqa: E402
from kdsl.bench import Timer, cudnn_attend  # noqa: E402
from kdsl.runtime import attention_launch  # noqa: E402

# (sample, B, H, Hkv, M, N, D): prefill at 4k, decode steps over long caches, GQA
SHAPES = [("plain", 2, 16, 16, 4096, 4096, 128), ("causal", 2, 16, 16, 4096, 4096, 128),
          ("plain", 2, 16, 16, 4096, 4096, 64), ("plain", 8, 32, 8, 1, 8192, 128),
          ("plain", 64, 16, 16, 1, 4096, 128), ("plain", 4, 32, 8, 16, 16384, 128)]


def keyed(flag: bool, fn):
    """fn run with KDSL_KEY_STRIDES's switch set to flag."""
    def run():
        attention_launch.KEY_STRIDES = flag
        try:
            return fn()
        finally:
            attention_launch.KEY_STRIDES = False
    return run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shapes", help="sample,B,H,Hkv,M,N,D;... in place of SHAPES")
    args = ap.parse_args()
    shapes = SHAPES if not args.shapes else [(s, *map(int, rest)) for s, *rest in
                                             (x.split(",") for x in args.shapes.split(";"))]
    torch.manual_seed(args.seed)
    timer = Timer(args.reps)
    print(f"{torch.cuda.get_device_name()}, kdsl from {Path(kdsl.__file__).parent}")
    print("| sample | B H Hkv M N D | cuDNN us | row-major 3-D us | row-major 4-D | view in place | view copied | "
          "3-D / 4-D | copied / in place | cuDNN / in place |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for sample, B, H, Hkv, M, N, D in shapes:
        kernel = getattr(kdsl.load(ROOT / "samples" / f"{sample}.kd"), sample)
        q = torch.randn(B, H, M, D, device="cuda", dtype=torch.bfloat16)
        k_cache = torch.randn(B, N, Hkv, D, device="cuda", dtype=torch.bfloat16)
        v_cache = torch.randn(B, N, Hkv, D, device="cuda", dtype=torch.bfloat16)
        k_view, v_view = k_cache.transpose(1, 2), v_cache.transpose(1, 2)
        k_rows, v_rows = k_view.contiguous(), v_view.contiguous()
        cudnn = cudnn_attend(sample == "causal", H != Hkv)
        fns = {"cudnn": lambda: cudnn(q, k_rows, v_rows),
               "rows3": keyed(False, lambda: kernel(q, k_rows, v_rows)),
               "rows4": keyed(True, lambda: kernel(q, k_rows, v_rows)),
               "view": keyed(True, lambda: kernel(q, k_view, v_view)),
               "copied": keyed(False, lambda: kernel(q, k_view, v_view))}
        want = fns["rows3"]()
        for name in ("rows4", "view", "copied"):
            assert torch.equal(fns[name](), want), name
        us = {n: 1000 * x for n, x in timer.in_turns(fns).items()}
        print(f"| {sample} | {B} {H} {Hkv} {M} {N} {D} | {us['cudnn']:.1f} | {us['rows3']:.1f} | {us['rows4']:.1f} | "
              f"{us['view']:.1f} | {us['copied']:.1f} | x{us['rows3'] / us['rows4']:.3f} | "
              f"x{us['copied'] / us['view']:.3f} | x{us['cudnn'] / us['view']:.3f} |", flush=True)


if __name__ == "__main__":
    main()
