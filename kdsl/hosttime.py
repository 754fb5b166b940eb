"""Host time per eager launch (Python call -> kernel queued), for `kdsl bench` and
bench/launch_overhead.py: at a decode-sized shape the launch path, not the GPU, is the cost.
The GPU is kept busy with a sleep kernel queued ahead, so a sample measures host time only,
and the calls compared are sampled in turns, so that the host's drift over a run (torch's
_scaled_mm has read 22-42 us across runs) hits each alike and their ratios compare like with
like."""
from __future__ import annotations

import itertools
import statistics
import time
from dataclasses import dataclass

# The FP8 GEMM's host-time shape (M, N, K): a DeepSeek-V3 projection (N = 2112, its fused q/kv
# down-projection) at a decode batch of 128 rows, where the GPU's part is short.
FP8_HOST_SHAPE = (128, 2112, 7168)


def host_us(fn, n: int = 2000, per: int = 200) -> float:
    """Median host microseconds per call of fn over n calls, in samples of `per` calls."""
    return host_us_in_turns({"fn": fn}, n, per)["fn"]


def host_us_in_turns(fns: dict, n: int = 2000, per: int = 200) -> dict:
    """Median host microseconds per call of each fn over n calls, in samples of `per` calls,
    one sample of each fn a round."""
    import torch
    samples = {name: [] for name in fns}
    for fn in fns.values():
        fn()
    torch.cuda.synchronize()
    # ~0.1 s of GPU work queued ahead, so launches never wait for the GPU; and at most 200
    # calls per sample, so their launches (up to three each) stay within the driver's queue of
    # pending launches: past it a launch blocks until the GPU drains (seen: a 3-launch call
    # read 258 us at 400 calls per sample)
    for _ in range(max(1, n // per)):
        for name, fn in fns.items():
            torch.cuda._sleep(200_000_000)
            t = time.perf_counter()
            for _ in range(per):
                fn()
            samples[name].append((time.perf_counter() - t) / per * 1e6)
            torch.cuda.synchronize()
    return {name: statistics.median(v) for name, v in samples.items()}


@dataclass
class HostRow:
    call: str        # how both sides are called: out= given, allocating, operand sets in turn
    kdsl_us: float
    peer_us: float   # torch._scaled_mm called alike (NaN if it could not run)
    path: str = ""   # kdsl's launch path for these calls: compiled | python (runtime/fast_launch.py)

    @property
    def ratio(self) -> float:
        return self.kdsl_us / self.peer_us


def fp8_gemm_host(gemm, sets: int = 8) -> list[HostRow]:
    """A dense FP8 GEMM's host time at FP8_HOST_SHAPE against torch._scaled_mm (blockwise),
    called alike: both given out=, both allocating it, and both over `sets` operand sets in
    turn, out= given (a model's layers: one plan, other pointers each call)."""
    import torch
    from . import fp8
    m, n, k = FP8_HOST_SHAPE

    def operands():
        a, sa = fp8.quantize_1x128(torch.randn(m, k, device="cuda"))
        b, sb = fp8.quantize_128x128(torch.randn(n, k, device="cuda"))
        return a, sa, b, sb, torch.empty(m, n, device="cuda", dtype=torch.bfloat16)

    a, sa, b, sb, out = operands()
    turn = itertools.cycle([operands() for _ in range(sets)])

    def scaled_mm(a, sa, b, sb, out=None):
        return torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb.t(), out_dtype=torch.bfloat16, out=out)

    def in_turn(f):
        def call():
            a, sa, b, sb, out = next(turn)
            return f(a, sa, b, sb, out=out)
        return call

    calls = {"out= given": lambda f: (lambda: f(a, sa, b, sb, out=out)),
             "allocating": lambda f: (lambda: f(a, sa, b, sb)),
             f"{sets} operand sets in turn, out= given": in_turn}
    fns = {}
    for call, make in calls.items():
        fns[("kdsl", call)] = make(gemm)
        fns[("peer", call)] = make(scaled_mm)
    try:
        scaled_mm(a, sa, b, sb)
    except Exception:  # noqa: BLE001 - no blockwise _scaled_mm in this torch: kdsl's rows alone
        fns = {key: fn for key, fn in fns.items() if key[0] == "kdsl"}
    gemm(a, sa, b, sb, out=out)  # plans for both kinds of call, adopted by the compiled path where it is built
    gemm(a, sa, b, sb)
    from .runtime import fast_launch
    fast_launch.wait()
    times = host_us_in_turns(fns)
    plans = [p for p in gemm._plans.values() if tuple(p.out_shape) == (m, n)]
    path = "compiled" if plans and all(p.fast for p in plans) else "python"
    return [HostRow(call, times[("kdsl", call)], times.get(("peer", call), float("nan")), path) for call in calls]
