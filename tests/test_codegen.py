"""Offline NVRTC: every sample compiles to an sm_90a cubin on a machine with no GPU, and
its SASS uses Hopper's instructions (HGMMA and UTMALDG for attention; QGMMA, UTMALDG and
TMA stores for FP8, at the tile configurations the FP8 shapes pick) with no local memory
and no wgmma serialisation; the mma.sync attention kernel (HMMA) still builds for sm_80."""
import importlib.util
import re

import pytest

from kdsl import ir
from kdsl.errors import KdslError
from kdsl.codegen import emit
from kdsl.grammar import parse
from kdsl.passes import gemm_tiles, pipeline
from kdsl.passes.target import get_target
from kdsl.runtime import cache
from kdsl.runtime.compiler import build
from kdsl.runtime.programs import Program
from kdsl.sass import find_cuobjdump, inspect

from conftest import ROOT, SAMPLES


def kernels(path):
    return pipeline.check(parse(path.read_text(), str(path)))


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_sample_compiles_to_sm90a_cubin_with_tensor_cores(path):
    assert find_cuobjdump(), "cuobjdump is needed for the SASS check: pip install 'kdsl[sass]'"
    for k in kernels(path):
        for d in pipeline.head_dims(k):  # 64 and 128, or the literal head dim
            built = build(k, "sm_90a", d)
            assert built.compiled.cubin[:4] == b"\x7fELF"
            rep = inspect(built.compiled.cubin, built.generated.entry)
            assert rep is not None
            if k.kind == "gemm":
                assert rep.tensor_ops.get("QGMMA", 0) > 0 and rep.other_ops.get("UTMALDG", 0) > 0, rep
            else:
                assert rep.tensor_ops.get("HGMMA", 0) > 0 and rep.other_ops.get("UTMALDG", 0) > 0, rep
                assert "HMMA" not in rep.tensor_ops, rep
            assert rep.local_bytes == 0 and rep.spill_ops == 0, rep
            assert rep.registers <= 255
            # ptxas serialises every wgmma of a kernel (C7514/C7515) when code touches an
            # accumulator of one in flight: a silent 2x slowdown, so it fails here.
            assert "serialized" not in built.compiled.log, built.compiled.log


def test_a_scale_at_most_zero_has_a_program_that_computes_the_score_as_written():
    """A score affine in the key position needs a positive factor (affine_score.needs_positive_scale):
    calls with scale <= 0 build the same source with KDSL_AFFINE_SCORE=0, which also drops the
    slope step's k-step (relpos D=64: 26 HGMMA -> 24); other kernels have no such program."""
    from kdsl.passes import affine_score
    from kdsl.runtime.programs import NO_AFFINE_OPTION
    relpos = next(k for p in SAMPLES for k in kernels(p) if k.name == "relpos")
    plain = next(k for p in SAMPLES for k in kernels(p) if k.name == "plain")
    default, written = build(relpos, "sm_90a", 64), build(relpos, "sm_90a", 64, program=Program(affine=False))
    assert affine_score.needs_positive_scale(default.kernel) and default.kernel.attr("slope_step") == 1
    assert NO_AFFINE_OPTION in written.options and NO_AFFINE_OPTION not in default.options
    assert written.generated.source == default.generated.source and written.cache_key != default.cache_key
    reps = [inspect(b.compiled.cubin, b.generated.entry) for b in (default, written)]
    assert reps[0].tensor_ops["HGMMA"] == reps[1].tensor_ops["HGMMA"] + 2, reps
    assert reps[1].local_bytes == 0 and "serialized" not in written.compiled.log
    assert not affine_score.needs_positive_scale(build(plain, "sm_90a", 64).kernel)
    assert build(plain, "sm_90a", 64, program=Program(affine=False)).cache_key == build(plain, "sm_90a", 64).cache_key


@pytest.mark.parametrize("name", ["document_mask"])
def test_split_kv_has_a_program_of_its_own(name):
    """Every call's program has neither the split-KV epilogue nor the combine kernel (NVVM
    and ptxas work through less); split-KV calls build a second one that has both. Helper
    kernels of the mask (the tile summary) are in both."""
    k = next(k for p in SAMPLES for k in kernels(p) if k.name == name)
    common, split = build(k, "sm_90a", 64), build(k, "sm_90a", 64, program=Program(split_kv=True))
    entry = common.generated.entry
    assert split.generated.source == common.generated.source and split.cache_key != common.cache_key
    has_summary = name == "document_mask"
    for built, is_split in ((common, False), (split, True)):
        entries = set(re.findall(r"\.entry (\w+)\(", built.compiled.ptx))
        assert entries == {entry} | ({entry + "_combine"} if is_split else set()) | \
            ({entry + "_summary"} if has_summary else set()), entries
        # the split epilogue's fp32 partial O is written as float2s, nothing else is
        assert ("st.global.v2.f32" in built.compiled.ptx) == is_split
        rep = inspect(built.compiled.cubin, entry)
        assert rep.local_bytes == 0 and rep.spill_ops == 0, rep
        assert "serialized" not in built.compiled.log, built.compiled.log
    with pytest.raises(KdslError, match="split-KV"):
        build(k, "sm_80", 64, program=Program(split_kv=True))


@pytest.mark.parametrize("define, consumers", [("KDSL_RACECHECK_ARRIVALS=1", None), ("KDSL_WARP_RELEASE=0", 1)])
def test_ring_release_switches_build_as_programs_of_their_own(define, consumers, monkeypatch):
    """The forward's switches of how consumers hand ring stages back (attention_wgmma.cuh):
    KDSL_RACECHECK_ARRIVALS=1 (sanitizer runs: every consumer thread arrives,
    tools/dev/racecheck_mbarrier_probe.cu, off by default) and KDSL_WARP_RELEASE=0 (one warpgroup's
    thread 0 alone hands K stages back, the release before each warp did after a __syncwarp; an
    A/B switch). Each changes the program it applies to and builds it without local memory."""
    k = next(k for p in SAMPLES for k in kernels(p) if k.name == "causal")
    k = k if consumers is None else k.with_attrs(consumers=consumers)
    monkeypatch.delenv("KDSL_DEFINES", raising=False)
    default = build(k, "sm_90a", 128, program=Program(split_kv=True))
    monkeypatch.setenv("KDSL_DEFINES", define)
    switched = build(k, "sm_90a", 128, program=Program(split_kv=True))
    assert "-D" + define not in default.options and switched.cache_key != default.cache_key
    assert switched.compiled.cubin != default.compiled.cubin
    rep = inspect(switched.compiled.cubin, switched.generated.entry)
    assert rep.local_bytes == 0 and rep.spill_ops == 0, rep


SCORE_LOADS_SRC = """
attention at_kv {
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    bias: f32[H, M + N]
    score(s, b, h, i, j) = s + bias[h, i - j + N - 1]
}
attention at_q {
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    ids: i32[B, M]; tbl: f32[8]
    score(s, b, h, i, j) = s + tbl[ids[b, i]] * float(i - j)
    mask(b, h, i, j) = j <= i
}
"""


def test_one_score_copy_unless_the_score_loads_at_kv():
    """A score that loads captured data at kv keeps a second copy for ragged and masked
    tiles (kv clamped below N there); every other score is evaluated once for all tiles.
    Both build without local memory or wgmma serialisation."""
    for k, loads_at_kv in zip(pipeline.check(parse(SCORE_LOADS_SRC, "s.kd")), (True, False)):
        assert ir.loads_at(k.func("score"), "kv") == loads_at_kv
        built = build(k, "sm_90a", 128)
        flag = 'true' if loads_at_kv else 'false'  # neither reads a tensor at [.., q, kv] alone: no stream
        assert f"kScoreLoadsAtKV = kStreamLoads ? {flag} : {flag};" in built.generated.source
        rep = inspect(built.compiled.cubin, built.generated.entry)
        assert rep.local_bytes == 0 and rep.spill_ops == 0, rep
        assert "serialized" not in built.compiled.log, built.compiled.log
    for name in ("alibi", "relpos", "softcap", "document_mask"):  # slopes[h], doc_q[b, q]: not at kv
        k = next(k for p in SAMPLES for k in kernels(p) if k.name == name)
        assert not ir.loads_at(pipeline.lower(k, get_target("sm_90a"), 64).func("score_log2"), "kv")


ROW_LOADS_SRC = """
attention rows {
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    doc_q: i32[B, M]; doc_k: i32[B, N]
    mask(b, h, i, j) = doc_q[b, i] == doc_k[b, j]
}
attention pairs {
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    lim: i32[B, M]; anc: i32[B, M, N]
    mask(b, h, i, j) = j < lim[b, i] or anc[b, i, j] != 0
}
attention keys {
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    flag: bool[B, N]
    mask(b, h, i, j) = flag[b, j] or j <= i
}
"""


def test_a_mask_loads_rows_where_it_reads_at_the_query_alone():
    """kMaskLoadsRows (the backward's KDSL_BWD_MASK_BITS takes only these): a mask that
    loads a row's value at the query and nothing at a (query, key) pair; not one that also reads
    a pair (its 32 loads a thread would be live at once), nor one that reads at the key alone."""
    want = {"rows": "true", "pairs": "false", "keys": "false"}
    for k in pipeline.check(parse(ROW_LOADS_SRC, "rows.kd")):
        source = emit.generate(pipeline.lower(k, get_target("sm_90a"), 128)).source
        assert f"kMaskLoadsRows = {want[k.name]};" in source, k.name


HEAD_DIM_SRC = """
attention hd {
    q: bf16[B, H, M, D]; k: bf16[B, Hkv, N, D]; v: bf16[B, Hkv, N, Dv]
    score(s, b, h, i, j) = s + float(i - j) * 0.01
}
attention hd_causal {
    q: bf16[B, H, M, D]; k: bf16[B, Hkv, N, D]; v: bf16[B, Hkv, N, Dv]
    score(s, b, h, i, j) = s + float(i - j) * 0.01
    mask(b, h, i, j) = j <= i
}
"""


@pytest.mark.parametrize("d,dv", [(32, 32), (96, 96), (192, 192), (256, 256), (192, 128), (16, 16), (240, 240)])
def test_other_head_dims_build_hopper_kernels_without_local_memory(d, dv):
    # Head dims that are no multiple of 64 leave a column block partly empty; the wider ones
    # take narrower kv tiles so that S, P and O stay in registers (tiling.wgmma_tile_choices).
    # A mask's survivor bits take a few more registers: at 192 and 256 ptxas then spills one
    # or two values of the prologue (seen in the SASS: none inside the kv loop).
    for k, spills in zip(pipeline.check(parse(HEAD_DIM_SRC, "hd.kd")), (0, 8)):
        built = build(k, "sm_90a", d, value_dim=dv)
        assert built.generated.entry == (f"kdsl_{k.name}_d{d}") + (f"v{dv}" if dv != d else "")
        assert '#include "kdsl/wgmma_ops_more.cuh"' in built.generated.source
        rep = inspect(built.compiled.cubin, built.generated.entry)
        assert rep.tensor_ops.get("HGMMA", 0) > 0 and rep.other_ops.get("UTMALDG", 0) > 0, rep
        assert rep.spill_ops <= spills and rep.local_bytes <= 2 * spills, (k.name, built.kernel.attr("tile_n"), rep)
        assert "serialized" not in built.compiled.log, built.compiled.log


# (sample, [M, N, K, G], fixed attrs): every FP8 kind at the configurations its shapes pick,
# covering tile_m 64 / 128 / 256, tile widths that straddle B's scale blocks, both multicast
# operands, row-by-row stores (N not a multiple of 8), f32 out and accumulation.
FP8_BUILDS = [
    ("fp8_gemm", [128, 2112, 7168, 1], {}),
    ("fp8_gemm", [4096, 7168, 16384, 1], {}),
    ("fp8_gemm", [4096, 2112, 7168, 1], {}),
    ("fp8_gemm", [129, 127, 384, 1], {}),
    ("fp8_gemm", [4096, 4096, 4096, 1], {"tile_m": 128, "tile_n": 160, "cluster": 1}),
    ("fp8_gemm", [129, 136, 256, 1], {"tile_m": 128, "tile_n": 128, "cluster": 1, "store": "rows"}),
    ("fp8_gemm", [129, 300, 384, 1], {"tile_m": 64, "tile_n": 48, "cluster": 1}),
    ("fp8_gemm_accumulate", [4096, 4096, 7168, 1], {}),
    ("fp8_gemm_accumulate", [300, 130, 256, 1], {}),
    ("fp8_grouped_contiguous", [32768, 4096, 7168, 4], {}),
    ("fp8_grouped_contiguous", [300, 129, 256, 3], {"tile_m": 64}),
    ("fp8_grouped_masked", [256, 4096, 7168, 4], {}),
    ("fp8_grouped_masked", [200, 384, 384, 3], {"tile_m": 64, "cluster": 1}),
    ("fp8_gemm", [4096, 4096, 7168, 1], {"tile_m": 256, "cluster": 2, "multicast": "a"}),
    ("fp8_grouped_contiguous", [300, 256, 768, 3], {"tile_m": 128, "tile_n": 64, "cluster": 2, "multicast": "a"}),
    # stream-K (the model's pick at 4096x2112x7168 above), with f32 accumulation, one math warpgroup
    ("fp8_gemm_accumulate", [2000, 1500, 1280, 1], {"stream_k": True, "tile_m": 128, "tile_n": 128, "cluster": 1}),
    ("fp8_gemm", [1000, 1000, 384, 1], {"stream_k": True, "tile_m": 64, "tile_n": 48, "cluster": 1}),
    # three math warpgroups in turns (asked for only)
    ("fp8_gemm", [4096, 7168, 16384, 1], {"tile_m": 192, "tile_n": 128, "cluster": 1}),
    ("fp8_gemm", [300, 200, 384, 1], {"tile_m": 192, "tile_n": 64, "cluster": 1, "store": "rows"}),
    ("fp8_grouped_contiguous", [32768, 4096, 7168, 4], {"tile_m": 192, "tile_n": 112}),
    ("fp8_grouped_masked", [256, 4096, 7168, 4], {"tile_m": 192, "tile_n": 128, "cluster": 1}),
    # B's scales by TMA (the model's choice for unclustered 256-row tiles where K % 512 == 0), and read
    # by the math warpgroups on a tile straddling two scale blocks (asked for)
    ("fp8_gemm", [4096, 32768, 512, 1], {"tile_m": 256, "tile_n": 128, "cluster": 1}),
    ("fp8_gemm", [300, 200, 640, 1], {"tile_m": 128, "tile_n": 96, "cluster": 1, "b_scale_load": "math"}),
]


@pytest.mark.parametrize("name,shape,attrs", FP8_BUILDS, ids=lambda x: str(x).replace(" ", ""))
def test_fp8_configurations_use_tma_and_qgmma_without_spills(name, shape, attrs):
    k = kernels(SAMPLES[0].parent / f"{name}.kd")[0].with_attrs(shape=shape, **attrs)
    built = build(k, "sm_90a", 0)
    low, rep = built.kernel, inspect(built.compiled.cubin)
    assert all(low.attr(a) == v for a, v in attrs.items())
    assert rep.tensor_ops.get("QGMMA", 0) > 0 and rep.other_ops.get("UTMALDG", 0) >= 2, rep
    # A 1-D TMA load of a_scale at kb * M + m0 raised "illegal instruction" on the H100 for
    # every M % 4 != 0 (the coordinate was not 16-byte aligned): the scales come by cp.async.
    assert "cp.async.bulk.tensor.1d" not in built.compiled.ptx
    # The scale cp.asyncs complete on the stage's full barrier as counted arrivals (.noinc),
    # not as net-zero tracking ones: racecheck reported the refills of stages completed that
    # way as hazards (bench/results/h100-2026-11-22-racecheck.log, fp8_gemm_dev_notes.md).
    assert "cp.async.mbarrier.arrive.noinc" in built.compiled.ptx
    assert "cp.async.mbarrier.arrive.shared" not in built.compiled.ptx
    # b_scale_load reaches the kernel: B's two 4-byte copies a stage only where "copy" (A's
    # zero-filling copies carry a source size), the math warpgroups' own loads only where "math"
    load = low.attr("b_scale_load")
    b_copies = re.search(r"cp\.async\.ca\.shared\.global \[[^\]]+\], \[[^\]]+\], 4;", built.compiled.ptx)
    assert bool(b_copies) == (load == "copy") and ("ld.global.nc.f32" in built.compiled.ptx) == (load == "math"), load
    if low.attr("store") == "tma":
        store = "UTMAREDG" if low.attr("accumulate") else "UTMASTG"
        assert rep.other_ops.get(store, 0) > 0, rep
        # bf16 totals are staged by stmatrix (x1.007-1.028 over 32-bit shared stores, H100)
        assert (rep.other_ops.get("STSM", 0) > 0) == (not low.attr("accumulate")), rep
    else:
        assert not rep.other_ops.get("UTMASTG") and not rep.other_ops.get("UTMAREDG"), rep
    assert rep.local_bytes == 0 and rep.spill_ops == 0, rep
    # setmaxnreg.inc spins until the registers are free: the split must fit what the CTA got
    # at launch (a producer at 48 with math at 232 hung on the H100).
    wg = low.attr("warpgroups")
    assert low.attr("producer_regs") * 128 + low.attr("consumer_regs") * 128 * wg <= rep.registers * low.attr("threads")
    # The math warpgroups meet on a named barrier once per unit on either store path: the
    # row-by-row kernels had none (their cubins declared a single hardware barrier) and each
    # raised "illegal instruction" on the H100, where the TMA-store kernels, which had them, ran.
    assert rep.other_ops.get("BAR.SYNC", 0) >= 2, rep
    # stream-K code (gpu-scope flags) only where it was chosen
    assert ("ld.acquire.gpu" in built.compiled.ptx) == bool(low.attr("stream_k"))
    if low.attr("cluster") == 1:  # no cluster-scope instruction where none is launched
        for op in ("barrier.cluster", "mapa.", "multicast::cluster", "st.async", "%cluster_ctarank"):
            assert op not in built.compiled.ptx, op
    # A stage's release to the peer CTA has .release.cta semantics: .release.cluster put a
    # MEMBAR.ALL.GPU before each arrival, and clustered launches ran 2x slower on the H100.
    assert "mbarrier.arrive.release.cluster" not in built.compiled.ptx
    # Unclustered 256- and 192-row tiles: the math warpgroups issue their waves in turns.
    assert ("bar.arrive" in built.compiled.ptx) == (low.attr("tile_m") in (192, 256) and low.attr("cluster") == 1)
    # Only clustered 256-row tiles unroll their K loop (by 4: 2-5 % faster on the H100; other
    # tiles ran 1-5 % slower unrolled, bench/NOTES.md): four m64 x 32-deep wgmmas a wave, the
    # wave's code once per unrolled K block.
    waves = 2 if low.attr("tile_m") == 256 else 1
    # Masked unclustered 256-row tiles (B's scales through the ring) also have a one-wave loop for
    # warpgroups whose second wave holds no row (KDSL_FP8_MASKED_HALF_TILES).
    half = (low.attr("grouping") == "masked" and low.attr("tile_m") == 256 and low.attr("cluster") == 1
            and low.attr("b_scale_load") != "math")
    if low.attr("tile_m") == 256 and low.attr("cluster") == 2:
        assert rep.tensor_ops["QGMMA"] >= 4 * 4 * waves, rep
    else:
        assert rep.tensor_ops["QGMMA"] == 4 * waves + (4 if half else 0), rep
    # ptxas only reports these as info: C7514/C7515 (every wgmma serialised), C7508 (setmaxnreg
    # ignored), each a "Potential Performance Loss".
    assert "Performance Loss" not in built.compiled.log and "warning" not in built.compiled.log, built.compiled.log


@pytest.mark.parametrize("name,attrs,counted", [
    ("fp8_grouped_contiguous", {"tile_m": 192, "tile_n": 128}, True),
    ("fp8_grouped_contiguous", {"tile_m": 128, "tile_n": 128, "cluster": 1}, False),
    ("fp8_grouped_contiguous", {"tile_m": 256, "tile_n": 128, "cluster": 1}, False),
    ("fp8_gemm", {"tile_m": 192, "tile_n": 128, "cluster": 1}, False),
    ("fp8_grouped_masked", {"tile_m": 192, "tile_n": 128, "cluster": 1}, False)])
def test_only_contiguous_192_row_tiles_take_tiles_from_a_counter(name, attrs, counted):
    """The host's rule (gemm_tiles.tile_counter) reaches the kernel's Config, whose last argument
    compiles the counter in; the launch passes a counter exactly where it does (Plan.dynamic)."""
    k = kernels(SAMPLES[0].parent / f"{name}.kd")[0].with_attrs(shape=[4096, 4096, 1024, 4], **attrs)
    low = pipeline.lower(k, get_target("sm_90a"))
    src = emit.generate(low).source
    assert re.search(r", (true|false)> Config;", src).group(1) == ("true" if counted else "false")
    assert gemm_tiles.tile_counter(low.attr("grouping"), low.attr("tile_m"), low.attr("cluster")) is counted
    assert "__device__ int kdsl_work_counters[" in src


def test_ptxas_performance_warnings_reach_the_log():
    """The checks above read ptxas' "Potential Performance Loss" infos from the NVRTC log:
    one that ptxas does print (setmaxnreg with no register cap at entry) is there."""
    from kdsl.runtime import nvrtc
    src = ('#include "kdsl/hopper.cuh"\nextern "C" __global__ void f(float* x) { if (threadIdx.x < 128) { '
           'kdsl::regs_release<40>(); x[0] = 1; } else { kdsl::regs_claim<232>(); x[1] = 2; } }')
    log = nvrtc.compile_cuda(src, "f", nvrtc.default_options("sm_90a", emit.INCLUDE_DIR)).log
    assert "C7508" in log and "Performance Loss" in log, log


def test_attention_kernel_builds_for_sm80_with_mma_sync():
    k = next(k for p in SAMPLES for k in kernels(p) if k.name == "causal")
    built = build(k, "sm_80", 128)
    assert built.compiled.cubin[:4] == b"\x7fELF"
    assert built.kernel.attr("kernel") == "mma"


def test_generated_source_holds_the_expressions_and_no_template_logic():
    k = next(k for p in SAMPLES for k in kernels(p) if k.name == "relpos")
    src = emit.generate(pipeline.lower(k, get_target("sm_90a"), 128)).source
    assert "qk * a.scale_log2" in src and "kdsl::attention_fwd_wgmma<kdsl::bf16_t, 128" in src
    # the default tile's wgmma sequences are wgmma_ops.cuh's: no other wgmma header to parse
    assert "wgmma_ops_steps.cuh" not in src and "wgmma_ops_more.cuh" not in src
    assert "{%" not in src and "{{" not in src


def test_cache_hit_and_corrupt_entry_rebuilt(tmp_path, monkeypatch):
    monkeypatch.setenv("KDSL_CACHE_DIR", str(tmp_path))
    cache.clear_memory()
    k = next(k for p in SAMPLES for k in kernels(p) if k.name == "causal")
    first = build(k, "sm_90a", 64)
    assert not first.cache_hit
    cache.clear_memory()
    second = build(k, "sm_90a", 64)
    assert second.cache_hit and second.compiled.cubin == first.compiled.cubin
    # Corrupt the cubin on disk: the next build must notice and rebuild, not crash.
    cache.clear_memory()
    cache.cubin_path(first.cache_key).write_bytes(b"garbage")
    third = build(k, "sm_90a", 64)
    assert not third.cache_hit and third.compiled.cubin == first.compiled.cubin
    assert not list(tmp_path.glob("*.tmp"))


def test_cache_key_changes_with_headers(monkeypatch):
    k = next(k for p in SAMPLES for k in kernels(p) if k.name == "causal")
    a = build(k, "sm_90a", 64, want_cubin=False).cache_key
    monkeypatch.setattr(emit, "headers_hash", lambda: "edited")
    b = build(k, "sm_90a", 64, want_cubin=False).cache_key
    assert a != b


def test_dump_switch_writes_every_stage(tmp_path, monkeypatch):
    monkeypatch.setenv("KDSL_DUMP", str(tmp_path))
    k = next(k for p in SAMPLES for k in kernels(p) if k.name == "softcap")
    build(k, "sm_90a", 64)
    names = sorted(p.suffix for p in tmp_path.iterdir())
    assert names == [".cu", ".ir", ".ptx"]
    assert ir.parse_ir((tmp_path / "kdsl_softcap_d64.ir").read_text())[0].attr("head_dim") == 64


def test_nvrtc_error_carries_log_and_kernel_name():
    from kdsl.errors import CompileError
    from kdsl.runtime import nvrtc
    with pytest.raises(CompileError) as e:
        nvrtc.compile_cuda('extern "C" __global__ void f() { nope(); }', "kdsl_broken", ["--gpu-architecture=sm_90a"])
    assert e.value.kernel == "kdsl_broken" and "nope" in e.value.log


def test_fast_math_by_default_and_exact_math_on_request():
    """tanh and division are the hardware approximations by default (one MUFU.TANH, no IEEE
    division sequence); exact_math=True compiles libm's tanhf and IEEE division instead."""
    import kdsl
    src = (SAMPLES[0].parent / "softcap.kd").read_text()
    for exact in (False, True):
        k = kdsl.compile(src, "softcap.kd", exact_math=exact).ir["softcap"]
        built = build(k, "sm_90a", 64)
        assert ("#define KDSL_EXACT_MATH" in built.generated.source) == exact
        assert ("math" in dict(built.kernel.attrs)) == exact
        rep = inspect(built.compiled.cubin, built.generated.entry)
        assert (rep.other_ops.get("MUFU.TANH", 0) == 0) == exact, rep


def test_wgmma_ops_header_is_what_its_generator_writes():
    # wgmma_ops.cuh is generated from the tiling pass's tile table: a table edit without a
    # rerun of tools/gen_wgmma.py would leave a tile shape with no wgmma sequence to issue.
    spec = importlib.util.spec_from_file_location("gen_wgmma", ROOT / "tools" / "gen_wgmma.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert gen.OUT == emit.INCLUDE_DIR / "kdsl" / "wgmma_ops.cuh"
    assert gen.OUT.read_text() == gen.render(), "wgmma_ops.cuh is stale: run python3 tools/gen_wgmma.py"
    assert gen.OUT_STEPS.read_text() == gen.render_steps(), "wgmma_ops_steps.cuh is stale: run python3 tools/gen_wgmma.py"
    assert gen.OUT_MORE.read_text() == gen.render_more(), "wgmma_ops_more.cuh is stale: run python3 tools/gen_wgmma.py"
    assert gen.OUT_FP8.read_text() == gen.render_fp8(), "wgmma_fp8_ops.cuh is stale: run python3 tools/gen_wgmma.py"
    assert gen.OUT_BWD.read_text() == gen.render_bwd(), "wgmma_ops_bwd.cuh is stale: run python3 tools/gen_wgmma.py"


@pytest.fixture
def kept_templates(tmp_path, monkeypatch):
    """Compiled templates kept in tmp_path/kept only; counts Jinja's compiles."""
    import jinja2
    compiles = []
    real = jinja2.Environment.compile
    monkeypatch.setattr(jinja2.Environment, "compile", lambda self, *a, **k: (compiles.append(1), real(self, *a, **k))[1])
    monkeypatch.setattr(emit, "kept_dirs", lambda here: [tmp_path / "kept"])
    emit._env.cache_clear()
    yield tmp_path / "kept", compiles
    emit._env.cache_clear()


def _fresh_process_sources(kernels_):
    emit._env.cache_clear()  # as a new process finds it
    return [emit.generate(pipeline.lower(k, get_target(arch), 64)).source for k, arch in kernels_]


def _some_kernels():
    ks = [k for p in SAMPLES for k in kernels(p) if k.name in ("causal", "document_mask")]
    return [(k, "sm_90a") for k in ks] + [(ks[0], "sm_80")]


def test_compiled_templates_are_kept_and_render_the_same(kept_templates):
    d, compiles = kept_templates
    first = _fresh_process_sources(_some_kernels())
    assert compiles and list(d.glob("kdsl-template-*.bin"))
    n = len(compiles)
    assert _fresh_process_sources(_some_kernels()) == first and len(compiles) == n, "kept templates not used"


@pytest.mark.parametrize("damage", [b"", b"garbage", "truncate"])
def test_damaged_compiled_templates_are_compiled_again(kept_templates, damage):
    d, compiles = kept_templates
    want = _fresh_process_sources(_some_kernels())
    n = len(compiles)
    for path in d.glob("kdsl-template-*.bin"):
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2] if damage == "truncate" else damage)
    assert _fresh_process_sources(_some_kernels()) == want and len(compiles) == 2 * n
    assert _fresh_process_sources(_some_kernels()) == want and len(compiles) == 2 * n  # rewritten whole


def test_nowhere_to_keep_compiled_templates_costs_only_the_compile(kept_templates, monkeypatch, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setattr(emit, "kept_dirs", lambda here: [blocker / "kept", blocker])
    first = _fresh_process_sources(_some_kernels())
    n = len(kept_templates[1])
    assert _fresh_process_sources(_some_kernels()) == first and len(kept_templates[1]) == 2 * n


def test_descriptor_advance_equals_the_descriptor_of_the_advanced_address():
    """hopper.cuh's desc_advance (one add per wgmma k-step) builds the same shared-memory
    descriptor as desc_*_sw128 of the advanced address, for every 1024-byte-aligned tile base
    in 227 KB and the offsets the attention kernel steps by: checked by NVRTC's constant
    evaluation, no GPU needed."""
    from kdsl.runtime import nvrtc
    src = r'''
#include "kdsl/hopper.cuh"
__device__ constexpr bool advance_is_exact() {
  for (kdsl::u32 base = 0; base < 227u * 1024u; base += 1024u)
    for (kdsl::u32 off = 0; base + off < 227u * 1024u; off += off < 4096u ? 32u : 4128u) {
      const kdsl::u32 mn = 8192u << (base / 1024u % 3u);  // a V tile's column-block stride, BN * 128
      if (kdsl::desc_advance(kdsl::desc_kmajor_sw128(base), off) != kdsl::desc_kmajor_sw128(base + off) ||
          kdsl::desc_advance(kdsl::desc_mnmajor_sw128(base, mn), off) != kdsl::desc_mnmajor_sw128(base + off, mn))
        return false;
    }
  return true;
}
static_assert(advance_is_exact(), "desc_advance differs from the descriptor of the advanced address");
extern "C" __global__ void kdsl_desc_check() {}
'''
    nvrtc.compile_cuda(src, "kdsl_desc_check", nvrtc.default_options("sm_90a", emit.INCLUDE_DIR), want_cubin=False)


def test_row_sums_by_p_v_are_a_trial_dropped_where_ptxas_spills():
    """tiling.TENSOR_ROW_SUM: on by default at value head dim 64 with three consumer warpgroups,
    as a trial; a windowed relative bias spills with its four more accumulator registers, and
    compiler.build takes the same tile without them."""
    plain = next(k for k in kernels(ROOT / "samples" / "plain.kd") if k.name == "plain")
    kept = build(plain, "sm_90a", 64)
    assert kept.kernel.attr("tensor_row_sum") == 1 and kept.kernel.attr("row_sum_trial") == 1
    assert "kdsl/wgmma_ops_rowsum.cuh" in kept.generated.source
    assert build(plain, "sm_90a", 128).kernel.attr("tensor_row_sum") == 0
    windowed = pipeline.check(parse("""attention w {
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    score(s, b, h, i, j) = s + 0.01 * float(i - j)
    mask(b, h, i, j) = abs(i - j) < 1024
}
""", "w.kd"))[0]
    dropped = build(windowed, "sm_90a", 64)
    rep = inspect(dropped.compiled.cubin, dropped.generated.entry)
    assert dropped.kernel.attr("tensor_row_sum") == 0 and rep.local_bytes == 0 and rep.spill_ops == 0
    assert dropped.kernel.attr("tile_m") == 192  # the same tile


def test_the_slope_step_is_a_trial_dropped_where_ptxas_spills():
    """tiling.SLOPE_STEP by default is a trial like the row sums: relpos' split-KV program at
    D=128 spilled inside the kv loop with it (STL / LDL each tile), so compiler.build takes
    the same tile without it (here the wide tile, fixed); the every-call program keeps it, and a
    step asked for is kept. Left to itself, the split-KV program still spilled at 176 keys
    without the step, so it drops the wide tile next and builds 128 keys with the step, clean."""
    relpos = next(k for k in kernels(ROOT / "samples" / "relpos.kd") if k.name == "relpos")
    every_call = build(relpos, "sm_90a", 128)
    assert every_call.kernel.attr("slope_step") == 1 and every_call.kernel.attr("slope_trial") == 1
    wide = relpos.with_attrs(tile_n=176)
    split = build(wide, "sm_90a", 128, program=Program(split_kv=True))
    asked = build(wide.with_attrs(slope_step=1), "sm_90a", 128, program=Program(split_kv=True))
    assert split.kernel.attr("slope_step") == 0 and asked.kernel.attr("slope_step") == 1
    assert (split.kernel.attr("tile_n"), split.kernel.attr("stages")) == (asked.kernel.attr("tile_n"),
                                                                           asked.kernel.attr("stages"))
    spills = [inspect(b.compiled.cubin, b.generated.entry).spill_ops for b in (split, asked)]
    assert spills[0] < spills[1], spills
    chosen = build(relpos, "sm_90a", 128, program=Program(split_kv=True))
    assert (chosen.kernel.attr("tile_n"), chosen.kernel.attr("slope_step")) == (128, 1)
    assert inspect(chosen.compiled.cubin, chosen.generated.entry).spill_ops == 0


def test_an_ir_file_with_trial_marks_drops_each_spilled_trial_once():
    """--emit ir writes the trials as given attrs with their marks beside them (row_sum_trial,
    slope_trial): compiling that file drops a spilled trial as the program would, and
    compiler.build's retry loop ends (each mark is cleared when its trial is dropped)."""
    windowed = pipeline.check(parse("""attention w {
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    score(s, b, h, i, j) = s + 0.01 * float(i - j)
    mask(b, h, i, j) = abs(i - j) < 1024
}
""", "w.kd"))[0]
    text = ir.print_ir(pipeline.lower(windowed, get_target("sm_90a"), 64))
    assert "attr row_sum_trial = 1" in text and "attr tensor_row_sum = 1" in text
    back = ir.parse_ir(text)
    back = back[0] if isinstance(back, list) else back
    built = build(back, "sm_90a", 64)
    assert built.kernel.attr("tensor_row_sum") == 0
    rep = inspect(built.compiled.cubin, built.generated.entry)
    assert rep.local_bytes == 0 and rep.spill_ops == 0


def test_row_sum_asked_at_another_value_head_dim_is_refused():
    causal = next(k for k in kernels(ROOT / "samples" / "causal.kd") if k.name == "causal")
    with pytest.raises(KdslError, match="tensor_row_sum needs value head dim 64"):
        pipeline.lower(causal.with_attrs(tensor_row_sum=1), get_target("sm_90a"), 128)


def _nested_min_program(depth: int, form: str) -> str:
    """A capture index (form 'index') or a mask (form 'mask') of `depth` nested
    min((...) - j, i): what tools/dev/backward_build_fuzz.py generated (bench/NOTES.md)."""
    e = "i"
    for _ in range(depth):
        e = f"min(({e}) - j, i)"
    body = f"bias: f32[N]\n    score(s, b, h, i, j) = s + bias[({e}) - j]" if form == "index" \
        else f"mask(b, h, i, j) = {e} > -100000"
    return (f"attention t {{\n    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]\n"
            f"    {body}\n}}\n")


@pytest.mark.parametrize("depth,barriers", [(5, 0), (6, 1), (13, 2)])
def test_deep_integer_min_max_chains_pass_through_an_opaque_value(depth, barriers):
    """Every sixth level of a nested integer min / max, the value goes through kdsl::opaque_value
    (cexpr.OPAQUE_EVERY): NVVM's optimizer took ~2.5x longer a level, over 10 minutes for the
    backward of 16 levels. Shallower chains, every sample's among them, are emitted unchanged."""
    from kdsl.runtime import compiler
    k = pipeline.check(parse(_nested_min_program(depth, "index"), "t.kd"))[0]
    for backward in (False, True):
        _, gen, _, _ = compiler._generate(k, "sm_90a", 64, None, Program(backward=backward))
        score = re.findall(r"kdsl::load_f32\(c\.cap_bias, .*", gen.source)
        assert score and all(line.count("kdsl::opaque_value(") == barriers for line in score), score


def test_a_deep_min_chain_builds_forward_and_backward_in_bounded_time(tmp_path):
    """Regression: 16 nested min((...) - j, i) in a capture index (and 12 in a mask) took NVRTC
    over 10 minutes (backward) and 24 s a program (forward); each builds in a few seconds now.
    Built in a child process so that a regression fails here instead of hanging the run."""
    import os
    import subprocess
    import sys
    script = (
        "import sys\n"
        "from kdsl.grammar import parse\nfrom kdsl.passes import pipeline\n"
        "from kdsl.runtime.compiler import build\nfrom kdsl.runtime.programs import Program\n"
        "for text, backward in ((sys.argv[1], True), (sys.argv[2], False)):\n"
        "    k = [k for k in pipeline.check(parse(text, 't.kd')) if k.kind == 'attention'][0]\n"
        "    build(k, 'sm_90a', 64, program=Program(backward=backward))\n")
    run = subprocess.run([sys.executable, "-c", script, _nested_min_program(16, "index"),
                          _nested_min_program(12, "mask")], cwd=ROOT, capture_output=True, text=True,
                         timeout=240, env={**os.environ, "KDSL_CACHE_DIR": str(tmp_path)})
    assert run.returncode == 0, run.stderr[-3000:]
