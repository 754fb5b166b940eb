"""Host time per eager launch (Python call -> kernel queued), at decode-sized shapes where
the launch path, not the GPU, is the cost, measured as kdsl.hosttime does (`kdsl bench`
reports the FP8 GEMM's rows of this in its suite); here also attention decode, the Python
launch path beside the compiled one, and torch's SDPA."""
import itertools
from pathlib import Path

import torch

import kdsl
from kdsl import fp8
from kdsl.hosttime import host_us_in_turns
from kdsl.runtime import fast_launch, prebuild

ROOT = Path(__file__).resolve().parents[1]


def main():
    rel = kdsl.load(ROOT / "samples" / "relpos.kd").relpos
    q = torch.randn(1, 16, 1, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, 16, 4096, 128, device="cuda", dtype=torch.bfloat16)
    out = torch.empty_like(q)
    gemm = kdsl.load(ROOT / "samples" / "fp8_gemm.kd").fp8_gemm
    a, sa = fp8.quantize_1x128(torch.randn(128, 7168, device="cuda"))
    b, sb = fp8.quantize_128x128(torch.randn(2112, 7168, device="cuda"))
    gout = torch.empty(128, 2112, device="cuda", dtype=torch.bfloat16)
    # A model's layers: the same shapes with other operands each call (the tensor maps' pointers
    # change), eight sets in rotation.
    layers = []
    for _ in range(8):
        la, lsa = fp8.quantize_1x128(torch.randn(128, 7168, device="cuda"))
        lb, lsb = fp8.quantize_128x128(torch.randn(2112, 7168, device="cuda"))
        layers.append((la, lsa, lb, lsb, torch.empty(128, 2112, device="cuda", dtype=torch.bfloat16)))
    turn = itertools.cycle(layers)
    # The compiled launch path builds in the background from kdsl.load: wait for it, and keep a
    # second kernel object on the Python path to compare.
    prebuild.finish()
    fast_launch.start()
    fast_launch.wait()
    python_path = gemm.with_attrs()
    python_path.launch_path = "python"

    def gemm_layers():
        la, lsa, lb, lsb, lout = next(turn)
        return gemm(la, lsa, lb, lsb, out=lout)

    def scaled_mm_layers():
        la, lsa, lb, lsb, lout = next(turn)
        return torch._scaled_mm(la, lb.t(), scale_a=lsa, scale_b=lsb.t(), out_dtype=torch.bfloat16, out=lout)

    fns = {
        "kdsl relpos decode, out= given": lambda: rel(q, k, k, out=out),
        "kdsl relpos decode, allocating": lambda: rel(q, k, k),
        # what a torch.compile'd graph calls; eager calls skip the dispatcher (runtime/torch_ops.py)
        "kdsl relpos decode, through its torch op": lambda: rel.torch_ops[0](q, k, k, [], None, None, None, None),
        "kdsl fp8_gemm 128x2112x7168, out= given": lambda: gemm(a, sa, b, sb, out=gout),
        "kdsl fp8_gemm 128x2112x7168, allocating": lambda: gemm(a, sa, b, sb),
        "kdsl fp8_gemm 128x2112x7168, 8 operand sets in turn, out= given": gemm_layers,
        "kdsl fp8_gemm 128x2112x7168, out= given, Python launch path": lambda: python_path(a, sa, b, sb, out=gout),
        "kdsl fp8_gemm 128x2112x7168, allocating, Python launch path": lambda: python_path(a, sa, b, sb),
        "torch sdpa decode": lambda: torch.nn.functional.scaled_dot_product_attention(q, k, k),
    }
    scaled_mm = lambda: torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb.t(), out_dtype=torch.bfloat16)
    scaled_mm_out = lambda: torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb.t(), out_dtype=torch.bfloat16, out=gout)
    for name, fn in (("torch._scaled_mm blockwise", scaled_mm), ("torch._scaled_mm blockwise, out= given", scaled_mm_out),
                     ("torch._scaled_mm blockwise, 8 operand sets in turn, out= given", scaled_mm_layers)):
        try:
            fn()
            fns[name] = fn
        except Exception as e:
            fns[f"{name} failed: {e!r}"[:80]] = None
    times = host_us_in_turns({name: fn for name, fn in fns.items() if fn is not None})
    print(f"\nfp8_gemm plans adopted by the compiled launch path: {[p.fast for p in gemm._plans.values()]}; "
          f"by its Python-path copy: {[p.fast for p in python_path._plans.values()]}")
    rows = [(name, times.get(name, float("nan"))) for name in fns]
    print(f"\n## host time per eager launch ({torch.cuda.get_device_name()})")
    print("| call | host us |\n|---|---|")
    for name, us in rows:
        print(f"| {name} | {us:.1f} |")
    # Like with like: each call allocating its out, and each writing into a given one.
    for kd, mm in (("kdsl fp8_gemm 128x2112x7168, allocating", "torch._scaled_mm blockwise"),
                   ("kdsl fp8_gemm 128x2112x7168, out= given", "torch._scaled_mm blockwise, out= given"),
                   ("kdsl fp8_gemm 128x2112x7168, allocating, Python launch path", "torch._scaled_mm blockwise"),
                   ("kdsl fp8_gemm 128x2112x7168, out= given, Python launch path",
                    "torch._scaled_mm blockwise, out= given"),
                   ("kdsl fp8_gemm 128x2112x7168, 8 operand sets in turn, out= given",
                    "torch._scaled_mm blockwise, 8 operand sets in turn, out= given")):
        if times.get(mm):
            print(f"\n{kd} / {mm} host time: {times[kd] / times[mm]:.2f}")


if __name__ == "__main__":
    main()
