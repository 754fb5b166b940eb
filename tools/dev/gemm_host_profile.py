#!/usr/bin/env python3
"""Where the host time of an eager FP8 GEMM call goes (bench/launch_overhead.py's call:
fp8_gemm 128x2112x7168, out= given): the whole call, then its parts timed alone, with a long
sleep kernel queued ahead so that no launch waits for the GPU.

    python3 tools/dev/gemm_host_profile.py
"""
import ctypes
import functools
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
import kdsl  # noqa: E402
from kdsl import fp8  # noqa: E402
from kdsl.runtime import driver, gemm_launch, torch_ops  # noqa: E402
from devtools import host_us  # noqa: E402


gemm = kdsl.load(ROOT / "samples" / "fp8_gemm.kd").fp8_gemm
a, sa = fp8.quantize_1x128(torch.randn(128, 7168, device="cuda"))
b, sb = fp8.quantize_128x128(torch.randn(2112, 7168, device="cuda"))
out = torch.empty(128, 2112, device="cuda", dtype=torch.bfloat16)
gemm(a, sa, b, sb, out=out)
plan = next(iter(gemm._plans.values()))
ptrs = [a.data_ptr(), b.data_ptr(), sa.data_ptr(), sb.data_ptr(), out.data_ptr(), 0, 0]  # gemm_launch.CALL_POINTERS
tail = ptrs[plan.map_only:]
stream = plan.current_stream()
launch_args = (plan._launch._address, plan._launch.fn, plan.pack.params_address, None)
driver._cu_launch_ex(*launch_args)  # bind the ctypes function before timing it
launch_objects = tuple(ctypes.c_void_p(x) for x in launch_args[:3]) + (None,)
m0 = plan.maps[0]
scratch = ctypes.create_string_buffer(128)
other = [p + 4096 if i in plan.map_sources else p for i, p in enumerate(ptrs)]  # other pointers for every map


def locked():
    with plan.pack.lock:
        pass


def encode_one():
    m0.encode(ctypes.addressof(scratch), m0.dtype, m0.rank, ptrs[0], m0.dims, m0.strides, m0.box, m0.elem_strides,
              0, m0.swizzle, 3, 0)


def bind_alternating():  # every map's pointer changes, each to one it has an encoding for
    plan._bind_maps(other)
    plan._bind_maps(ptrs)


rows = {
    "whole call": lambda: gemm(a, sa, b, sb, out=out),
    "whole call, allocating out": lambda: gemm(a, sa, b, sb),
    "plan.new_out() (allocating out)": plan.new_out,
    "torch_ops.compiling()": torch_ops.compiling,
    "plan key (gemm_launch._call_key)": lambda: gemm_launch._call_key(a, sa, b, sb, None, out),
    "plans dict lookup": lambda: gemm._plans.get(next(iter(gemm._plans))),
    "5 data_ptr()": lambda: (a.data_ptr(), sa.data_ptr(), b.data_ptr(), sb.data_ptr(), out.data_ptr()),
    "current_stream()": plan.current_stream,
    "plan.launch (maps bound, pointers written, launched)": lambda: plan.launch(ptrs),
    "Launcher alone (pointers written, launched)": lambda: plan._launch(stream, plan.pack, tail),
    "pack.pointers[:] = tail": lambda: plan.pack.pointers.__setitem__(slice(None), tail),
    "with pack.lock: pass": locked,
    "_bind_maps (pointers unchanged)": lambda: plan._bind_maps(ptrs),
    "cuLaunchKernelEx by ctypes alone": lambda: driver._cu_launch_ex(*launch_args),
    "cuTensorMapEncodeTiled, one map": encode_one,
    "_bind_maps twice, every map's pointer changed (kept encodings)": bind_alternating,
    "torch._scaled_mm": lambda: torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb.t(), out_dtype=torch.bfloat16),
    "torch._scaled_mm, out= given": lambda: torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb.t(),
                                                             out_dtype=torch.bfloat16, out=out),
    "torch empty kernel-free op (a.view(-1))": lambda: a.view(-1),
    # alternatives for the call's parts, timed beside them
    "alt: torch.empty(shape, dtype=, device=torch.device)": functools.partial(
        torch.empty, (128, 2112), dtype=torch.bfloat16, device=torch.device("cuda", 0)),
    "alt: a.new_empty(shape, dtype=)": functools.partial(a.new_empty, (128, 2112), dtype=torch.bfloat16),
    "alt: cuLaunchKernelEx, arguments as ctypes objects": lambda: driver._cu_launch_ex(*launch_objects),
    "alt: plan key of shapes and strides only": lambda: (a.shape, a.stride(), sa.shape, sa.stride(), b.shape,
                                                         b.stride(), sb.shape, sb.stride(), out.shape, out.stride()),
}
for name, fn in rows.items():
    print(f"{name:45s} {host_us(fn, 1400):6.2f} us", flush=True)
