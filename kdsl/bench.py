"""`kdsl bench`: kernels against their peers, timed in one process on the same inputs.

Timing: CUDA events around each launch, warm-up first, median of >= 100 repetitions, the
L2 flushed (a 256 MB write) before each repetition so inputs come from HBM. Compile time is
excluded from the timings and reported separately: a cold build of each kernel, per step,
in a fresh process with every cache empty or off (kdsl.runtime.coldbuild).
Attention TFLOPS count only the (q, kv) pairs the mask keeps: 2 * (D + Dv) * pairs (4 * D when v has q's head dim); FP8 GEMM
TFLOPS count 2 * rows * N * K over the valid rows. Where a dense FP8 case runs, the suite also
measures host time per eager launch against torch's _scaled_mm (kdsl.hosttime). The results'
markdown, JSON and figure: kdsl.bench_report.
"""
from __future__ import annotations

import functools
import json
import statistics
import warnings
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples"
ATTN = ["plain", "relpos", "alibi", "softcap", "causal", "sliding_window", "document_mask", "natten2d", "prefix_lm",
        "padded_causal"]
VARIANTS = ["t5_bias", "gemma2_local", "learned_relpos", "gated_rows", "periodic_bias", "packed_window", "chunked_causal",
            "dilated_window", "temperature_padding", "alibi_softcap_gqa", "bias_qk", "bias_bhqk", "gqa_causal",
            "bool_attn_mask"]
GEMM_NK = [(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048)]
PEER_NAMES = {"flex": "FlexAttention (compiled)", "cudnn": "cuDNN SDPA", "scaled_mm": "torch._scaled_mm blockwise",
              "cublas_bf16": "cuBLAS bf16 matmul", "read_b": "reading b once (a floor)"}


@dataclass
class Case:
    file: str
    kernel: str
    shape: dict
    kind: str = "attention"
    ints: dict = field(default_factory=dict)  # i32 capture -> (lo, hi): uniform ints instead of the default ids
    # bool [B, M, N] capture -> mean document length: a block-diagonal mask over documents of
    # random lengths (torch's attn_mask for packed sequences) instead of random bits
    documents: dict = field(default_factory=dict)
    seed: int | None = None  # the inputs' draw (kdsl.cases: bool captures sorted on odd seeds); None: fresh


@dataclass
class Row:
    kernel: str
    shape: str
    family: str = ""   # prefill | decode | fp8 (the plot's panels)
    ms: float = float("nan")
    tflops: float = float("nan")
    gbps: float = float("nan")
    error: float = float("nan")
    peers: dict = field(default_factory=dict)   # name -> {"ms", "tflops"} or {"error"}
    compile: dict = field(default_factory=dict)  # cold build, seconds per step (coldbuild.STEPS)
    failure: str = ""


def standard_suite() -> list[Case]:
    cases = []
    for s in (2048, 8192):
        for name in ATTN:
            shape = dict(B=16384 // s, H=16, M=s, N=s, D=128)
            if name == "natten2d":
                shape = dict(B=2, H=16, M=64 * 128, N=64 * 128, D=128) if s == 8192 else None
            # per-sequence lengths drawn over the whole sequence (the default draws small ids)
            ints = {"prefix_lm": {"prefix": (0, s)}, "padded_causal": {"seq_len": (s // 4, s)}}.get(name, {})
            if shape:
                cases.append(Case(str(SAMPLES / f"{name}.kd"), name, shape, ints=ints))
    # head dim 64: issue 7's bars name plain and causal against cuDNN there, relpos against Flex
    for name in ("plain", "relpos", "causal"):
        cases.append(Case(str(SAMPLES / f"{name}.kd"), name, dict(B=2, H=16, M=8192, N=8192, D=64)))
    # Other head dims (same FLOPs per row as D=128 at 8k: B * S constant), and MLA's 192 / 128.
    for d in (32, 96, 192, 256):
        cases.append(Case(str(SAMPLES / "plain.kd"), "plain", dict(B=2, H=16, M=8192, N=8192, D=d)))
    cases.append(Case(str(SAMPLES / "mla.kd"), "mla", dict(B=2, H=16, M=8192, N=8192, D=192, Dv=128)))
    # Variants beyond samples/ (bench/variants.kd), one line each.
    ints = {"temperature_padding": {"kv_len": (2048, 4096)}}
    for name in VARIANTS:
        cases.append(Case(str(ROOT / "bench" / "variants.kd"), name, dict(B=4, H=16, M=4096, N=4096, D=128),
                          ints=ints.get(name, {})))
    # the same attn_mask holding packed documents: its empty and full blocks are skipped or run
    # unchecked (mask_analysis' whole-block summaries), as Flex's BlockMask has them
    cases.append(Case(str(ROOT / "bench" / "variants.kd"), "bool_attn_mask", dict(B=4, H=16, M=4096, N=4096, D=128),
                      documents={"keep": 512}))
    for name in ("plain", "relpos"):
        for n in (4096, 32768):
            cases.append(Case(str(SAMPLES / f"{name}.kd"), name, dict(B=1, H=16, M=1, N=n, D=128)))
    # decode with grouped-query heads, and a batch of decodes
    cases.append(Case(str(SAMPLES / "plain.kd"), "plain", dict(B=1, H=32, Hkv=8, M=1, N=8192, D=128)))
    cases.append(Case(str(SAMPLES / "plain.kd"), "plain", dict(B=64, H=16, M=1, N=4096, D=128)))
    for m in (128, 4096):
        for n, k in GEMM_NK:
            cases.append(Case(str(SAMPLES / "fp8_gemm.kd"), "fp8_gemm", dict(M=m, N=n, K=k), "gemm"))
    cases.append(Case(str(SAMPLES / "fp8_grouped_contiguous.kd"), "fp8_grouped_contiguous",
                      dict(G=4, M=4 * 8192, N=4096, K=7168), "gemm"))
    cases.append(Case(str(SAMPLES / "fp8_grouped_masked.kd"), "fp8_grouped_masked",
                      dict(G=4, M=256, N=4096, K=7168), "gemm"))
    return cases


def backward_suite() -> list[Case]:
    """`kdsl bench --suite backward` (forward + backward, kdsl.bench_backward): plain and causal
    at the head dims the wgmma backwards take differently (64: 128-query steps; 128; the wide
    kernel's 192 and 256), every other sample at 128, MLA's 192 / 128, and variants.kd's
    learned bias, T5 buckets, grouped-query ALiBi with soft-capping, causal attention with one
    k/v head (MQA: the backward splits its query heads over CTAs), a dense float bias and torch's
    boolean attn_mask (random bits, and packed documents; the backward copies its tiles). 4096
    tokens a sequence."""
    cases = []
    for d, b in ((64, 4), (128, 2), (192, 2), (256, 2)):
        for name in ("plain", "causal"):
            cases.append(Case(str(SAMPLES / f"{name}.kd"), name, dict(B=b, H=16, M=4096, N=4096, D=d)))
    shape = dict(B=2, H=16, M=4096, N=4096, D=128)
    ints = {"prefix_lm": {"prefix": (0, 4096)}, "padded_causal": {"seq_len": (1024, 4096)}}
    cases += [Case(str(SAMPLES / f"{name}.kd"), name, shape, ints=ints.get(name, {}))
              for name in ATTN if name not in ("plain", "causal")]
    cases.append(Case(str(SAMPLES / "mla.kd"), "mla", dict(B=2, H=16, M=4096, N=4096, D=192, Dv=128)))
    for name, extra in (("learned_relpos", {}), ("t5_bias", {}), ("alibi_softcap_gqa", {"Hkv": 4}),
                        ("gqa_causal", {"B": 1, "Hkv": 1}), ("bias_bhqk", {}), ("bool_attn_mask", {})):
        cases.append(Case(str(ROOT / "bench" / "variants.kd"), name, {**shape, **extra}))
    # the same attn_mask holding packed documents (whole blocks skipped or run unchecked)
    cases.append(Case(str(ROOT / "bench" / "variants.kd"), "bool_attn_mask", shape, documents={"keep": 512}))
    return cases


DEFAULT_SHAPES = {"attention": dict(B=2, H=16, M=8192, N=8192, D=128), "dense": dict(M=4096, N=7168, K=16384),
                  "contiguous": dict(G=4, M=4 * 8192, N=4096, K=7168), "masked": dict(G=4, M=256, N=4096, K=7168)}


def shape_kind(text: str) -> str:
    """'attention' or 'gemm': a GEMM shape names K."""
    return "gemm" if "K" in {part.partition("=")[0].strip() for part in text.split(",")} else "attention"


def parse_shape(text: str, kind: str) -> dict:
    """'B=2,H=16,M=8192,N=8192,D=128' (attention; Hkv and Dv optional) or 'M=4096,N=7168,K=16384'
    (GEMM; G for grouped) -> dict; ValueError naming what is wrong."""
    need = ("B", "H", "M", "N", "D") if kind == "attention" else ("M", "N", "K")
    allowed = set(need) | ({"Hkv", "Dv"} if kind == "attention" else {"G"})
    shape = {}
    for part in filter(None, text.split(",")):
        name, eq, value = part.partition("=")
        name = name.strip()
        if not eq or name not in allowed or not value.strip().isdigit() or int(value) < 1:
            raise ValueError(f"shape '{text}': expected NAME=POSITIVE_INT with NAME in {', '.join(sorted(allowed))}")
        shape[name] = int(value)
    missing = [n for n in need if n not in shape]
    if missing:
        raise ValueError(f"shape '{text}' lacks {', '.join(missing)}")
    return shape


def file_cases(path: str, mod, shapes: tuple = ()) -> list[Case]:
    """Each kernel of a file at each of `shapes` (parse_shape's dicts) of its kind, or at
    DEFAULT_SHAPES; an attention shape takes the sizes the program's declarations fix (a
    literal head dim, k with q's head count) as declared."""
    from .cases import case_at, fits
    cases = []
    for name, k in mod.ir.items():
        mine = [s for s in shapes if fits(k, s)]
        if k.kind == "attention":
            for s in mine or [DEFAULT_SHAPES["attention"]]:
                c = case_at(k, s)
                shape = dict(B=c.B, H=c.H, M=c.M, N=c.N, D=c.D)
                if c.Hkv != c.H:
                    shape["Hkv"] = c.Hkv
                if c.Dv not in (0, c.D):
                    shape["Dv"] = c.Dv
                cases.append(Case(path, name, shape))
        else:
            cases += [Case(path, name, s, "gemm") for s in mine or [DEFAULT_SHAPES[k.attr("grouping")]]]
    return cases


class Timer:
    def __init__(self, reps: int):
        import torch
        self.torch, self.reps = torch, reps
        self.flush_buf = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device="cuda")

    def __call__(self, fn) -> float:
        return self.in_turns({"fn": fn})["fn"]

    def in_turns(self, fns: dict, rounds: int = 5) -> dict:
        """Median ms of each function (in_turns_by_block's medians over all its launches)."""
        return {name: statistics.median(t for block in blocks for t in block)
                for name, blocks in self.in_turns_by_block(fns, rounds).items()}

    def in_turns_by_block(self, fns: dict, rounds: int = 5) -> dict:
        """ms of each launch of each function, by block, timed in turns: `rounds` blocks per function, each block
        a few launches back to back, L2 flushed before each. The GPU's clock drifts over a
        measurement (an H100 read the same kernel 5-10 % apart within a minute), and taking
        turns gives every function the same share of it, so that ratios between them stay
        honest. Blocks, not single launches, an untimed call opening each, and GPU work queued
        ahead of each timed launch: a call whose host path is slow (cuDNN's, Flex's) drains the
        stream's queue, and a short kernel timed then would count the host's launch latency."""
        torch = self.torch
        for fn in fns.values():
            for _ in range(3):
                fn()
        torch.cuda.synchronize()
        rounds = max(1, min(rounds, self.reps))
        per = max(1, self.reps // rounds)
        events = {name: [] for name in fns}
        order = list(fns.items())
        for r in range(rounds):
            # Each round starts one function later, so that no function always runs first or
            # always after the same one: on a power-capped shape the state the previous block
            # left the GPU in seemed to move a kernel 3-5 % by its place in the round (H100,
            # 4096x7168x16384, 2026-11-27, h100-2026-11-27-s24-l2-promotion-v1/-v2/-v3.log).
            for name, fn in order[r % len(order):] + order[:r % len(order)]:
                fn()  # untimed: the queue holds work again before the first timed launch
                events[name].append([])
                for _ in range(per):
                    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    # ~0.1 ms of GPU work ahead of the start event: the host has enqueued the
                    # call by the time the GPU reaches it, however slow its host path (a
                    # decode call's cuDNN peer read 53 us instead of 26 us without it)
                    torch.cuda._sleep(200_000)
                    self.flush_buf.fill_(1)  # evict inputs from L2
                    s.record()
                    fn()
                    e.record()
                    events[name][-1].append((s, e))
        torch.cuda.synchronize()
        return {name: [[s.elapsed_time(e) for s, e in block] for block in blocks] for name, blocks in events.items()}


# Reads a buffer and nothing else: 16-byte loads, grid-stride, 16 CTAs of 256 threads an SM. On
# the H100 it read the masked suite row's 117 MB b in 52.0 us where torch's sum of it took 56.7
# (tools/dev/fp8_masked_probe.py, 2026-11-27), so it is the floor the bench reports.
_READ_SOURCE = r"""
extern "C" __global__ void kdsl_read_once(const uint4* __restrict__ p, long long n, unsigned* sink) {
  unsigned acc = 0;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    const uint4 x = __ldg(p + i);
    acc ^= x.x ^ x.y ^ x.z ^ x.w;  // keeps the loads live
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;  // (almost) never: no store traffic
}
"""


@functools.cache
def _read_kernel():
    import cupy
    return cupy.RawKernel(_READ_SOURCE, "kdsl_read_once"), cupy.zeros(1, dtype=cupy.uint32)


def read_once(t) -> None:
    """Launch a read of every byte of the contiguous torch tensor t on torch's current stream."""
    import cupy
    import torch
    kern, sink = _read_kernel()
    nbytes = t.numel() * t.element_size()
    assert t.is_contiguous() and nbytes % 16 == 0 and t.data_ptr() % 16 == 0
    sms = torch.cuda.get_device_properties(t.device).multi_processor_count
    with warnings.catch_warnings():  # cupy 14 deprecates ExternalStream for Stream.from_external
        warnings.simplefilter("ignore", DeprecationWarning)
        stream = cupy.cuda.ExternalStream(torch.cuda.current_stream(t.device).cuda_stream)
    with stream:
        kern((16 * sms,), (256,), (cupy.uint64(t.data_ptr()), cupy.int64(nbytes // 16), sink))


@functools.cache
def cold_build(file: str, kernel: str, head_dim: int, arch: str) -> dict:
    """Seconds per step of a cold build, once per kernel and head dim (shapes do not matter).

    Not measured in this process: here the kernel was already compiled by its first call,
    and NVRTC (>= 12.9) serves a recompile of an identical source from the CUDA driver's
    compute cache (only the C++ front end runs, ~0.03 s), whatever kdsl's cache says."""
    import subprocess
    from .errors import KdslError
    from .runtime import coldbuild
    try:
        return coldbuild.measure(file, kernel, head_dim, arch)
    except (KdslError, subprocess.TimeoutExpired) as e:  # reported, never fails the timing row
        return {"error": str(e)[:200]}


def run_attention(case: Case, mod, timer: Timer, peers: set) -> Row:
    import torch
    from . import reference
    from .testing import attention_inputs, rel_frobenius
    kir = mod.ir[case.kernel]
    s = case.shape
    B, H, M, N, D = s["B"], s["H"], s["M"], s["N"], s["D"]
    Hkv, Dv = s.get("Hkv", H), s.get("Dv", D)  # GQA rows give fewer k/v heads; MLA a v head dim of its own
    gqa = f" Hkv={Hkv}" if Hkv != H else ""
    dv = f" Dv={Dv}" if Dv != D else ""
    row = Row(case.kernel, f"B={B} H={H}{gqa} M={M} N={N} D={D}{dv}", "decode" if M == 1 else "prefill")
    q, k, v, caps = attention_inputs(kir, B, H, Hkv, M, N, D, Dv=Dv, seed=case.seed)
    for name, (lo, hi) in case.ints.items():
        caps[name] = torch.randint(lo, hi + 1, tuple(caps[name].shape), device=q.device, dtype=torch.int32)
    for name, mean in case.documents.items():
        caps[name] = document_mask(torch, B, M, N, mean, q.device)
        row.shape += f" documents~{mean}"
    fn = getattr(mod, case.kernel)
    out = fn(q, k, v, **caps)
    lse = isinstance(out, tuple)  # a program that declares lse returns (out, lse): so does Flex's peer
    out = out[0] if lse else out
    row.compile = cold_build(case.file, case.kernel, D, fn._arch())
    # error on two query heads and the k/v heads they read (one, when a group holds both)
    sl, sl_kv = slice(0, min(H, 2)), slice(0, max(1, min(H, 2) // (H // Hkv)))
    sub = {n: (c[:1] if c.dim() > 1 and c.shape[0] == B else c) for n, c in caps.items()}
    ref, _ = reference.attention(kir, q[:1, sl], k[:1, sl_kv], v[:1, sl_kv], sub,
                                 dims=reference.dims_of(kir, q, k, v, caps))  # the whole problem's H
    row.error = rel_frobenius(out[:1, sl], ref)
    del ref
    dims = reference.dims_of(kir, q, k, v, caps)  # by the program's own names (a k/v head count called G)
    flops = 2 * (D + Dv) * kept_pairs(kir, dims, caps, B, H, M, N)  # Q K^T and P V
    timed = {"kdsl": lambda: fn(q, k, v, **caps)}  # then each peer that runs; timed in turns below
    if "flex" in peers:
        try:
            attend = flex_attend(kir, q, k, v, caps, lse)
            if rel_frobenius(attend(q, k, v)[0] if lse else attend(q, k, v), out) > 5e-2:
                raise RuntimeError("FlexAttention disagrees with kdsl on the same inputs")
            timed["flex"] = lambda: attend(q, k, v)
        except Exception as e:
            row.peers["flex"] = {"error": f"{type(e).__name__}: {e}"[:160]}
    if "cudnn" in peers and case.kernel in SDPA_FORMS:
        try:
            cudnn = cudnn_attend(SDPA_FORMS[case.kernel], Hkv != H)
            cudnn(q, k, v)
            timed["cudnn"] = lambda: cudnn(q, k, v)
        except Exception as e:
            row.peers["cudnn"] = {"error": f"{type(e).__name__}: {e}"[:160]}
    _record(row, timer.in_turns_by_block(timed), flops)
    row.gbps = (q.numel() + k.numel() + v.numel() + out.numel()) * 2 / row.ms / 1e6
    return row


def document_mask(torch, B: int, M: int, N: int, mean: int, device):
    """[B, M, N] bool: query i (aligned with the last M keys) sees key j when both lie in the same
    document; documents of random lengths, `mean` tokens on average."""
    ends = torch.cumsum(torch.randint(1, 2 * mean, (B, N), device=device), 1)
    doc = torch.searchsorted(ends, torch.arange(N, device=device).expand(B, N).contiguous(), right=True)
    return (doc[:, N - M:, None] == doc[:, None, :]).contiguous()


def flex_attend(kir, q, k, v, caps: dict, lse: bool = False):
    """attend(q, k, v): compiled FlexAttention running the program's score and mask, its block
    mask built for these tensors' shapes and its dims named as the program names them; lse: it
    returns (out, lse) as the program does."""
    from torch.nn.attention.flex_attention import create_block_mask
    from . import flex, reference
    from .semantics import eval_scalar
    dims = reference.dims_of(kir, q, k, v, caps)
    scale = float(eval_scalar(kir.func("scale"), dims))
    (B, H, M), N = q.shape[:3], k.shape[2]
    flex.fresh_flex_compile()  # each row compiles its peer afresh, never past Dynamo's recompile limit
    fa = flex.compiled_flex_attention()
    sm, mm = flex.score_mod(kir, dims, caps, scale), flex.mask_mod(kir, dims, caps)
    bm = create_block_mask(mm, B, H, M, N, device=q.device.type) if mm else None
    gqa_kw = {"enable_gqa": True} if k.shape[1] != H else {}
    lse_kw = {"return_lse": True} if lse else {}
    return lambda q, k, v: fa(q, k, v, score_mod=sm, block_mask=bm, scale=scale, **gqa_kw, **lse_kw)


# The suite's programs whose math is torch SDPA's, by name: whether causal (cuDNN's peer runs these;
# samples/plain.kd, samples/causal.kd and bench/variants.kd's gqa_causal).
SDPA_FORMS = {"plain": False, "causal": True, "gqa_causal": True}


def cudnn_attend(causal: bool, gqa: bool):
    """attend(q, k, v): torch SDPA on its cuDNN backend (plain or causal)."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def attend(q, k, v):
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
    return attend


def kept_pairs(kir, dims, caps, B, H, M, N, device="cuda") -> int:
    """Unmasked (q, kv) pairs summed over batch and heads (the FLOP convention); dims by the
    program's names (reference.dims_of)."""
    import torch
    from . import ir
    from .semantics import eval_torch
    m = kir.func("mask")
    if m is None:
        return B * H * M * N
    uses_bh = any(isinstance(n, ir.Var) and n.name in ("b", "h") for n in ir.walk(m)) or \
        any(isinstance(n, ir.Load) for n in ir.walk(m))
    total = 0
    for b in range(B if uses_bh else 1):
        for h in range(H if uses_bh else 1):
            keep = eval_torch(m, {**dims, "b": b, "h": h, "q": torch.arange(M, device=device).view(M, 1),
                                  "kv": torch.arange(N, device=device).view(1, N)}, caps)
            total += int(torch.as_tensor(keep).expand(M, N).sum())
    return total if uses_bh else total * B * H


def run_gemm(case: Case, mod, timer: Timer, peers: set) -> Row:
    import torch
    from . import fp8, reference
    from .testing import fp8_difference
    kir = mod.ir[case.kernel]
    g = kir.attr("grouping")
    s = case.shape
    G, M, N, K = s.get("G", 1), s["M"], s["N"], s["K"]
    row = Row(case.kernel, (f"G={G} " if G > 1 else "") + f"M={M} N={N} K={K}", "fp8")
    a_shape = (G, M, K) if g == "masked" else (M, K)
    a, sa = fp8.quantize_1x128(torch.randn(a_shape, device="cuda"))
    b, sb = fp8.quantize_128x128(torch.randn((N, K) if g == "dense" else (G, N, K), device="cuda"))
    extra, rows = (), M * G if g == "masked" else M
    if g == "contiguous":  # equal 128-aligned segments
        extra = (torch.arange(M, device="cuda", dtype=torch.int32) // (M // G),)
    elif g == "masked":
        count = torch.randint(M // 2, M + 1, (G,), device="cuda", dtype=torch.int32)
        extra, rows = (count,), int(count.sum())
    fn = getattr(mod, case.kernel)
    # An accumulating out starts at zero, so that the first call's result is the product.
    zeros = torch.zeros((G, M, N) if g == "masked" else (M, N), device="cuda") if kir.attr("accumulate") else None
    out = fn(a, sa, b, sb, *extra, out=zeros)
    row.compile = cold_build(case.file, case.kernel, 0, fn._arch())
    ref = reference.fp8_gemm(a, sa, b, sb, *((extra[0], None) if g == "contiguous" else
                                             (None, extra[0]) if g == "masked" else ()))
    if g == "masked":
        valid = torch.arange(M, device="cuda").view(1, M, 1) < extra[0].view(G, 1, 1)
        valid = valid.expand(out.shape)
        row.error = fp8_difference(out[valid], ref[valid])
    else:
        row.error = fp8_difference(out, ref)
    del ref
    flops = 2 * rows * N * K
    timed = {"kdsl": lambda: fn(a, sa, b, sb, *extra, out=out)}  # then each peer that runs; timed in turns
    if "scaled_mm" in peers:
        if g == "dense":
            try:
                f = lambda: torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb.t(), out_dtype=torch.bfloat16)
                f()
                timed["scaled_mm"] = f
            except Exception as e:
                row.peers["scaled_mm"] = {"error": f"{type(e).__name__}: {e}"[:160]}
        else:
            row.peers["scaled_mm"] = {"error": "no grouped blockwise scaled_mm in torch"}
    if "cublas_bf16" in peers:
        x = torch.randn(rows, K, device="cuda", dtype=torch.bfloat16)
        y = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
        timed["cublas_bf16"] = lambda: x @ y.t()
    if "read_b" in peers and g != "contiguous":
        # A floor, not a peer: the time to read b once, in which a GEMM's TFLOPS could at most
        # reach the row's "peer TFLOPS". Masked groupings and small M are bound by it.
        timed["read_b"] = functools.partial(read_once, b)
    _record(row, timer.in_turns_by_block(timed), flops)
    return row


def _record(row: Row, blocks: dict, flops: int) -> None:
    """kdsl's and the peers' times (ms of each launch by block, from Timer.in_turns_by_block)
    into the row: medians, and for each peer the ratio's range over the blocks (the blocks
    alternate, so a block's ratio compares launches made moments apart: a ratio whose range
    straddles 1 is a tie). Peers in PEER_NAMES order, with those that could not run among them."""
    def median(bs):
        return statistics.median(t for b in bs for t in b)
    mine = blocks.pop("kdsl")
    row.ms = median(mine)
    row.tflops = flops / row.ms / 1e9
    for name, theirs in blocks.items():
        t = median(theirs)
        per_block = [statistics.median(p) / statistics.median(k) for k, p in zip(mine, theirs)]
        row.peers[name] = {"ms": t, "tflops": flops / t / 1e9, "ratio_range": [min(per_block), max(per_block)]}
    row.peers = dict(sorted(row.peers.items(), key=lambda kv: list(PEER_NAMES).index(kv[0])))


def run(cases: list[Case], modules: dict, reps: int, peers: set, progress=True, backward=False) -> list[Row]:
    """backward: time attention cases' forward + backward (kdsl.bench_backward)."""
    import torch
    torch._dynamo.config.cache_size_limit = 1024
    if hasattr(torch._dynamo.config, "recompile_limit"):
        torch._dynamo.config.recompile_limit = 1024
    from .runtime import fast_launch, prebuild
    if any(c.kind == "gemm" for c in cases):
        fast_launch.start()  # the FP8 GEMM's compiled launch path, for the host-time rows
    prebuild.finish()  # kernels built at load(), in parallel; no compile competes with the timings
    from .bench_backward import run_attention_backward
    timer = Timer(reps)
    rows = []
    bar = _progress(cases, progress)
    for case in bar:
        mod = modules[case.file]
        runner = run_gemm if case.kind == "gemm" else run_attention_backward if backward else run_attention
        if case.seed is not None:
            torch.manual_seed(case.seed)  # the draws beside attention_inputs': GEMM operands, ints, documents, dout
        try:
            row = runner(case, mod, timer, peers)
        except Exception as e:
            row = Row(case.kernel, json.dumps(case.shape), failure=f"{type(e).__name__}: {e}"[:200])
        rows.append(row)
        torch.cuda.empty_cache()
    return rows


def host_time(cases: list[Case], modules: dict) -> list:
    """The dense FP8 GEMM's host time per eager launch against torch._scaled_mm, called alike
    (kdsl.hosttime), when the run has a dense FP8 case: the kernel of the first one."""
    for case in cases:
        kir = modules[case.file].ir[case.kernel]
        if case.kind == "gemm" and kir.attr("grouping") == "dense" and not kir.attr("accumulate"):
            from .hosttime import fp8_gemm_host
            return fp8_gemm_host(getattr(modules[case.file], case.kernel))
    return []


def _progress(items, enabled):
    if not enabled:
        return items
    try:
        from tqdm import tqdm
        return tqdm(items, desc="kdsl bench", unit="case")
    except ImportError:
        return items
