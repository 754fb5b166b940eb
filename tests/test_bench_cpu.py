"""The benchmark's bookkeeping, without a GPU: the suite covers what the issue asks for,
and the table states its convention and shows failed peers instead of dropping them."""
import random
import re

import pytest

from kdsl import bench, bench_report


def test_standard_suite_shapes():
    cases = bench.standard_suite()
    attn = [c for c in cases if c.kind == "attention"]
    assert {c.kernel for c in attn} == set(bench.ATTN) | set(bench.VARIANTS) | {"mla"}
    assert {c.shape["D"] for c in attn if c.kernel == "plain"} >= {32, 64, 96, 128, 192, 256}
    assert {c.kernel for c in attn if c.shape["D"] == 64} >= {"plain", "causal", "relpos"}
    import kdsl
    variants = kdsl.load(bench.ROOT / "bench" / "variants.kd", interpret=True)
    assert set(bench.VARIANTS) == set(variants.kernels)  # a bench line for every variant
    for c in attn:  # integer captures the suite draws itself belong to the kernel
        kir = kdsl.load(c.file, interpret=True).ir[c.kernel]
        assert all(kir.tensor(n) is not None for n in c.ints)
    for c in attn:
        if c.shape["M"] > 1 and c.kernel != "natten2d" and c.shape["D"] == 128:
            assert c.shape["B"] * c.shape["M"] == 16384 and c.shape["H"] == 16
    decode = [c for c in attn if c.shape["M"] == 1]
    assert sorted((c.kernel, c.shape["B"], c.shape["H"], c.shape.get("Hkv", c.shape["H"]), c.shape["N"])
                  for c in decode) == [("plain", 1, 16, 16, 4096), ("plain", 1, 16, 16, 32768), ("plain", 1, 32, 8, 8192),
                                       ("plain", 64, 16, 16, 4096), ("relpos", 1, 16, 16, 4096),
                                       ("relpos", 1, 16, 16, 32768)]
    documents = [c for c in attn if c.documents]  # torch's attn_mask over packed documents, once
    assert [(c.kernel, list(c.documents)) for c in documents] == [("bool_attn_mask", ["keep"])]
    gemm = [(c.shape["M"], c.shape["N"], c.shape["K"]) for c in cases if c.kernel == "fp8_gemm"]
    assert len(gemm) == 12 and (128, 2112, 7168) in gemm and (4096, 7168, 16384) in gemm


def test_backward_suite_covers_each_backward_kernel_and_every_sample():
    """--suite backward: plain and causal at 64 (128-query steps), 128 and the wide kernel's 192
    and 256; every attention sample; variants with a learned bias and with grouped-query heads,
    causal MQA among them (the query-head split, against cuDNN); dense captured tensors (a float
    bias, a bool mask random and as packed documents).
    Every case is an attention case whose captured integers belong to its kernel."""
    import kdsl
    cases = bench.backward_suite()
    assert all(c.kind == "attention" for c in cases)
    for name in ("plain", "causal"):
        assert sorted(c.shape["D"] for c in cases if c.kernel == name) == [64, 128, 192, 256]
    assert {c.kernel for c in cases} >= set(bench.ATTN) | {"mla", "learned_relpos", "alibi_softcap_gqa", "gqa_causal",
                                                           "bias_bhqk", "bool_attn_mask"}
    assert any(c.kernel == "bool_attn_mask" and c.documents for c in cases)  # its mask as packed documents too
    assert any(c.shape.get("Hkv", c.shape["H"]) != c.shape["H"] for c in cases)
    assert any(c.shape.get("Hkv") == 1 and c.kernel in bench.SDPA_FORMS for c in cases)  # MQA, with cuDNN's peer
    for c in cases:
        kir = kdsl.load(c.file, interpret=True).ir[c.kernel]
        assert kir.kind == "attention" and all(kir.tensor(n) is not None for n in c.ints)


def test_markdown_shows_failed_peers_and_convention():
    rows = [bench.Row("relpos", "B=1", ms=1.0, tflops=100.0, gbps=10.0, error=1e-3,
                      peers={"flex": {"ms": 2.0, "tflops": 50.0}, "cudnn": {"error": "not supported"}}),
            bench.Row("causal", "B=2", failure="RuntimeError: boom")]
    md = bench_report.markdown(rows, "GPU")
    assert "2·(D + Dv) per kept (q, kv) pair" in md
    assert "| 1000.0 | 100.0 |" in md and "| 2000.0 | 50.0 | 2.00 |" in md and "could not run: not supported" in md and "FAILED: RuntimeError: boom" in md


def test_an_error_of_many_lines_stays_in_its_row():
    """Regression (H200, eighty-second session): Flex's peer failed with an Inductor error of
    several lines, and its newline ended the table row mid-cell, the rest of the row printed as a
    line of its own; a pipe in an error would split its cell."""
    error = "InductorError: CompilationError: at 171:24:\n    # We know these | blocks\n"
    rows = [bench.Row("causal_mean", "B=2", ms=1.0, tflops=100.0, gbps=10.0, error=1e-3,
                      peers={"flex": {"error": error}}, compile={"cold_build_s": 0.76}),
            bench.Row("broken", "B=2", failure="RuntimeError: first\nsecond | third")]
    table = [line for line in bench_report.markdown(rows, "GPU").splitlines() if line.startswith("|")][2:]
    assert len(table) == 2 and all(line.count("|") - line.count("\\|") == 12 for line in table)
    assert "could not run: InductorError: CompilationError: at 171:24: # We know these \\| blocks" in table[0]
    assert table[0].endswith("| 0.76 |") and "FAILED: RuntimeError: first second \\| third" in table[1]


def test_a_mask_that_kept_nothing_still_gets_its_ratio():
    """Regression: a held-out mask (an i8 level against a random per-head threshold) kept no
    pair on the bench's inputs, so kdsl's and Flex's TFLOPS were both 0 and the report divided
    0 by 0. The ratio is the peers' time over kdsl's, which the work cancels out of."""
    import random
    r = random.Random()
    mine, theirs = r.uniform(0.03, 0.09), r.uniform(0.03, 0.09)
    row = bench.Row("level_threshold", "B=2", ms=mine, tflops=0.0, gbps=1.0, error=0.0,
                    peers={"flex": {"ms": theirs, "tflops": 0.0}})
    md = bench_report.markdown([row], "GPU")
    assert f"| 0.0 | {theirs / mine:.2f} |" in md


def test_a_peer_ratio_carries_its_range_over_the_blocks():
    """bench._record: medians over every launch, and each peer's ratio per block (the blocks
    alternate, so each compares launches made moments apart), lowest and highest shown: a tie
    (a range that straddles 1) reads as one."""
    import random
    import statistics
    r = random.Random()
    kdsl_blocks = [[r.uniform(1.0, 1.1) for _ in range(20)] for _ in range(5)]
    factors = [r.uniform(0.97, 1.03) for _ in range(5)]
    peer_blocks = [[t * f for t in b] for b, f in zip(kdsl_blocks, factors)]
    row = bench.Row("plain", "B=2")
    bench._record(row, {"kdsl": kdsl_blocks, "cudnn": peer_blocks}, 1e12)
    assert row.ms == statistics.median(t for b in kdsl_blocks for t in b)
    peer = row.peers["cudnn"]
    assert peer["ms"] == statistics.median(t for b in peer_blocks for t in b)
    lo, hi = peer["ratio_range"]
    assert abs(lo - min(factors)) < 1e-9 and abs(hi - max(factors)) < 1e-9
    assert f"[{lo:.2f}, {hi:.2f}]" in bench_report.markdown([row], "GPU")


def _rows():
    """Synthetic results, fresh values per run: prefill with two peers, decode, FP8 with the
    bf16 yardstick beating kdsl (it is not a peer), a peer that could not run, a failed case."""
    r = random.Random()
    t = lambda: r.uniform(1, 900)
    rows = [bench.Row("relpos", f"B=2 H=16 M={m} N={m} D=128", "prefill", ms=r.uniform(0.1, 5), tflops=t(),
                      peers={"flex": {"ms": 1.0, "tflops": t()}, "cudnn": {"ms": 1.0, "tflops": t()}})
            for m in (2048, 4096, 8192)]
    rows += [bench.Row("plain", f"B=1 H=16 M=1 N={n} D=128", "decode", ms=r.uniform(0.01, 1), tflops=r.uniform(0.1, 1),
                       peers={"flex": {"ms": r.uniform(0.01, 1), "tflops": r.uniform(0.1, 1)}}) for n in (4096, 32768)]
    kd = t()
    rows += [bench.Row("fp8_gemm", "M=128 N=2112 K=7168", "fp8", ms=0.1, tflops=kd,
                       peers={"scaled_mm": {"ms": 0.1, "tflops": kd * r.uniform(0.5, 2)},
                              "cublas_bf16": {"ms": 0.1, "tflops": kd * 3}}),
             bench.Row("fp8_grouped_masked", "G=4 M=256 N=4096 K=7168", "fp8", ms=0.1, tflops=t(),
                       peers={"scaled_mm": {"error": "no grouped blockwise scaled_mm in torch"}}),
             bench.Row("causal", "B=2", "prefill", failure="RuntimeError: boom")]
    return rows


def test_plot_has_a_panel_per_family_and_ratios_to_the_best_peer(tmp_path):
    from kdsl import benchplot
    rows = _rows()
    fig = benchplot.figure(rows, "GPU", bench.PEER_NAMES)
    axes = {ax.get_title(): ax for ax in fig.axes}
    assert set(axes) == {title for _, title, *_ in benchplot.PANELS} | {benchplot.RATIO_TITLE}
    prefill, decode, fp8 = (axes[title] for _, title, *_ in benchplot.PANELS)
    assert len(prefill.patches) == 3 * 3  # 3 cases x (kdsl, flex, cudnn); the failed case is left out
    assert len(decode.patches) == 2 * 2
    assert len(fp8.patches) == 2 * 3      # 2 cases x (kdsl, bf16 yardstick, scaled_mm)
    assert "µs" in decode.get_xlabel()
    widths = {round(p.get_width(), 6) for p in decode.patches}
    assert {round(r.ms * 1e3, 6) for r in rows if r.family == "decode"} <= widths
    ratio = axes[benchplot.RATIO_TITLE]
    assert ratio.get_xscale() == "log"
    assert any(list(line.get_xdata()) == [1.0, 1.0] for line in ratio.lines)  # the line at 1.0
    with_peer = [r for r in rows if not r.failure and benchplot.best_peer(r)]
    assert len(with_peer) == 6  # the FP8 case whose only peer failed has no ratio
    got = [1.0 + p.get_width() for p in ratio.patches]
    want = [r.tflops / max(p["tflops"] for n, p in r.peers.items() if "tflops" in p and n != "cublas_bf16")
            for r in with_peer]
    assert got == pytest.approx(want)
    assert benchplot.best_peer(rows[5])[0] == "scaled_mm"  # cuBLAS bf16 is a yardstick, never the peer
    path = tmp_path / "bench.png"
    bench_report.plot(rows, path, "GPU")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 50_000


def test_family_of_rows_written_before_the_field():
    from kdsl import benchplot
    assert benchplot.family(bench.Row("plain", "B=1 H=16 M=1 N=4096 D=128")) == "decode"
    assert benchplot.family(bench.Row("plain", "B=8 H=16 M=2048 N=2048 D=128")) == "prefill"
    assert benchplot.family(bench.Row("fp8_gemm", "M=1 N=2112 K=7168")) == "fp8"


def test_markdown_sums_up_the_dense_fp8_rows_against_scaled_mm():
    """Issue 8's bar reads the lowest and the median ratio over the dense shapes: the markdown
    ends with both, from the rows that ran (a failed row, grouped rows and the yardsticks do
    not count)."""
    import statistics
    r = random.Random()
    ratios = [r.uniform(0.8, 1.4) for _ in range(5)]
    rows = [bench.Row("fp8_gemm", f"M={m} N=7168 K=2048", "fp8", ms=0.1, tflops=500 * x,
                      peers={"scaled_mm": {"ms": 0.1, "tflops": 500.0}, "read_b": {"ms": 0.1, "tflops": 9999.0}})
            for m, x in zip((128, 256, 512, 1024, 4096), ratios)]
    rows += [bench.Row("fp8_grouped_masked", "G=4 M=256 N=4096 K=7168", "fp8", ms=0.1, tflops=1.0,
                       peers={"scaled_mm": {"error": "no grouped blockwise scaled_mm in torch"}}),
             bench.Row("fp8_gemm", "M=1 N=1 K=128", "fp8", failure="RuntimeError: boom")]
    md = bench_report.markdown(rows, "GPU")
    assert md.rstrip().endswith(f"lowest {min(ratios):.2f}, median {statistics.median(ratios):.2f} over 5 shapes.")
    assert "reading b once (a floor)" in md
    assert not bench_report.fp8_summary([row for row in rows if row.kernel != "fp8_gemm"])


def test_markdown_reports_the_cold_build():
    row = bench.Row("relpos", "B=1", "prefill", ms=1.0, tflops=1.0, error=1e-3, peers={"flex": {"ms": 1, "tflops": 1}},
                    compile={"cold_build_s": 0.6234, "ptxas_s": 0.3})
    md = bench_report.markdown([row], "GPU")
    assert "| cold build s |" in md and md.rstrip().endswith("| 0.62 |")
    assert "fresh process" in md and "compute cache off" in md
    row.compile = {"error": "cold build of relpos failed: ..."}  # a failed measurement shows as such
    assert bench_report.markdown([row], "GPU").rstrip().endswith("| n/a |")


def test_timing_rounds_rotate_so_no_function_keeps_its_place():
    """Timer.in_turns_by_block starts each round one function later: on a power-capped GPU the
    place in the round moved a kernel 3-5 % (bench/NOTES.md, twenty-fourth session)."""
    from types import SimpleNamespace

    class Event:
        def __init__(self, enable_timing):
            pass

        def record(self):
            pass

        def elapsed_time(self, other):
            return 1.0

    fake_cuda = SimpleNamespace(Event=Event, _sleep=lambda cycles: None, synchronize=lambda: None)
    timer = object.__new__(bench.Timer)
    timer.torch, timer.reps = SimpleNamespace(cuda=fake_cuda), 6
    timer.flush_buf = SimpleNamespace(fill_=lambda v: None)
    calls = []
    fns = {name: (lambda name=name: calls.append(name)) for name in "abc"}
    blocks = timer.in_turns_by_block(fns, rounds=3)
    per = 6 // 3 + 1  # the untimed opening call, then the block's timed launches
    timed = calls[3 * len(fns):]  # after the warm-up calls
    firsts = [timed[r * len(fns) * per] for r in range(3)]
    assert firsts == ["a", "b", "c"]
    assert all(len(b) == 3 and all(len(x) == 2 for x in b) for b in blocks.values())


def test_markdown_and_json_carry_the_host_time_rows(tmp_path):
    """`kdsl bench`'s host-time table (kdsl.hosttime): each call both ways, with the ratio,
    and the rows in the JSON beside the kernel rows."""
    import json
    from kdsl.hosttime import HostRow
    r = random.Random()
    host = [HostRow(call, r.uniform(5, 20), r.uniform(20, 40), path) for call, path in
            (("out= given", "compiled"), ("allocating", "python"))]
    md = bench_report.markdown(_rows(), "GPU", host)
    assert "Host time per eager launch, fp8_gemm M=128 N=2112 K=7168" in md
    for h in host:
        assert f"| {h.call} | {h.path} | {h.kdsl_us:.1f} | {h.peer_us:.1f} | {h.kdsl_us / h.peer_us:.2f} |" in md
    assert "Host time" not in bench_report.markdown(_rows(), "GPU")
    paths = bench_report.write_results(_rows(), tmp_path, "GPU", "t", host)
    saved = json.loads(paths["json"].read_text())["host"]
    assert [(s["call"], s["kdsl_us"], s["peer_us"], s["path"]) for s in saved] == \
        [(h.call, h.kdsl_us, h.peer_us, h.path) for h in host]


def test_host_time_is_measured_for_the_first_dense_fp8_case_only():
    import kdsl
    cases = [c for c in bench.standard_suite() if c.kind == "gemm"]
    files = {c.file for c in cases}
    modules = {f: kdsl.load(f, interpret=True) for f in files}
    grouped = [c for c in cases if c.kernel != "fp8_gemm"]
    assert bench.host_time(grouped, modules) == []  # no dense case: nothing measured (no GPU needed)


def test_file_cases_take_the_given_shapes_of_each_kernels_kind():
    """`kdsl bench FILE --shapes ...`: each attention kernel at every attention shape, each GEMM at
    every GEMM shape, the default where none of its kind is given; sizes the declarations fix are
    taken as declared (MLA's literal head dims 192 / 128; k with q's head count: no Hkv)."""
    import kdsl
    shapes = [bench.parse_shape(s, bench.shape_kind(s)) for s in
              ("B=1,H=8,M=1000,N=1000,D=64,Hkv=2", "B=2,H=4,M=17,N=300,D=32,Dv=64", "M=512,N=4096,K=7168,G=8")]
    mla = kdsl.load(bench.ROOT / "samples" / "mla.kd", interpret=True)
    assert [c.shape for c in bench.file_cases("mla.kd", mla, shapes)] == [
        dict(B=1, H=8, M=1000, N=1000, D=192, Dv=128), dict(B=2, H=4, M=17, N=300, D=192, Dv=128)]
    assert [c.shape for c in bench.file_cases("mla.kd", mla)] == [dict(B=2, H=16, M=8192, N=8192, D=192, Dv=128)]
    gqa = kdsl.compile("attention g { q: bf16[B, H, M, D]; k: bf16[B, Hkv, N, D]; v: bf16[B, Hkv, N, Dv] }\n"
                       "attention p { q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D] }\n"
                       "gemm f { a: e4m3[M, K] block(1, 128); b: e4m3[N, K] block(128, 128); out: bf16[M, N] }",
                       "g.kd", interpret=True)
    got = [(c.kernel, c.kind, c.shape) for c in bench.file_cases("g.kd", gqa, shapes)]
    assert got == [("g", "attention", dict(B=1, H=8, M=1000, N=1000, D=64, Hkv=2)),
                   ("g", "attention", dict(B=2, H=4, M=17, N=300, D=32, Dv=64)),
                   ("p", "attention", dict(B=1, H=8, M=1000, N=1000, D=64)),
                   ("p", "attention", dict(B=2, H=4, M=17, N=300, D=32)),
                   ("f", "gemm", dict(M=512, N=4096, K=7168, G=8))]
    assert [c.shape for c in bench.file_cases("g.kd", gqa, shapes[2:]) if c.kernel == "p"] == [bench.DEFAULT_SHAPES["attention"]]


@pytest.mark.parametrize("args, needle", [
    (["samples/plain.kd", "--shapes", "B=1,H=2"], "lacks M, N, D"),
    (["samples/plain.kd", "--shapes", "B=1,H=2,M=3,N=4,D=64,X=3"], "expected NAME=POSITIVE_INT"),
    (["samples/fp8_gemm.kd", "--shapes", "M=128,N=256,K=0"], "expected NAME=POSITIVE_INT"),
    (["--suite", "standard", "--shapes", "M=128,N=256,K=128"], "the standard suite's shapes are fixed"),
    (["--suite", "backward", "--shapes", "B=1,H=2,M=3,N=4,D=64"], "the backward suite's shapes are fixed")])
def test_bench_shapes_are_refused_with_the_reason(args, needle):
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "kdsl.cli", "bench", *args], capture_output=True, text=True,
                       cwd=bench.ROOT)
    assert r.returncode == 1 and needle in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_backward_rows_carry_their_convention_and_land_in_the_prefill_panel():
    from kdsl import benchplot
    row = bench.Row("causal", "B=2 H=16 M=4096 N=4096 D=128 fwd+bwd", "backward", ms=4.0, tflops=120.0, error=3e-3,
                    peers={"flex": {"ms": 2.0, "tflops": 240.0}})
    md = bench_report.markdown([row], "GPU")
    assert "TFLOPS at 3.5 times the forward's work" in md and "| causal | B=2 H=16 M=4096 N=4096 D=128 fwd+bwd |" in md
    assert "3.5 times" not in bench_report.markdown([bench.Row("causal", "B=2", ms=1.0, tflops=1.0, error=0.0)], "GPU")
    assert benchplot.family(row) == "prefill"


def test_bench_backward_of_fp8_cases_only_is_refused():
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "kdsl.cli", "bench", "samples/fp8_gemm.kd", "--backward"],
                       capture_output=True, text=True, cwd=bench.ROOT)
    assert r.returncode == 1 and "--backward times attention kernels, and these cases have none" in r.stderr, r.stderr


def test_a_document_mask_is_block_diagonal_over_documents_of_random_lengths():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    keep = bench.document_mask(torch, 2, 300, 1000, 100, "cpu")
    assert keep.shape == (2, 300, 1000) and keep.dtype == torch.bool
    kept = keep.float().mean().item()
    assert 0.02 < kept < 0.5  # documents of ~100 tokens among 1000 keys
    # a query sees exactly the keys of one contiguous run that holds its own position
    for b in range(2):
        for i in (0, 150, 299):
            cols = keep[b, i].nonzero().flatten()
            assert cols.numel() and (cols.diff() == 1).all() and cols[0] <= 700 + i <= cols[-1]


def test_the_error_on_a_slice_of_heads_reads_the_whole_problems_dims():
    """Regression: the bench measures its error on batch 0 and two query heads; the reference
    of that slice took H = 2 where the program reads H (ALiBi slopes 2^(-8 (h + 1) / H), half
    the heads causal), and reported errors of 0.9-2.8 for correct kernels (H200 call2)."""
    import torch
    import kdsl
    from kdsl import reference
    from kdsl.testing import attention_inputs
    src = ("attention hh {\n q: bf16[B, H, M, D]; k: bf16[B, Hkv, N, D]; v: bf16[B, Hkv, N, D]\n"
           " score(s, b, h, i, j) = s - exp2(-8.0 * float(h + 1) / float(H)) * float(i - j)\n"
           " mask(b, h, i, j) = where(h < H // 2, j <= i, abs(i - j) < 9)\n}\n")
    kir = kdsl.compile(src, "hh.kd", interpret=True).ir["hh"]
    q, k, v, caps = attention_inputs(kir, 2, 8, 4, 40, 40, 16, device="cpu")
    whole, _ = reference.attention(kir, q, k, v, caps)
    part, _ = reference.attention(kir, q[:1, :2], k[:1, :1], v[:1, :1], caps,
                                  dims=reference.dims_of(kir, q, k, v, caps))
    assert torch.allclose(part, whole[:1, :2])
    wrong, _ = reference.attention(kir, q[:1, :2], k[:1, :1], v[:1, :1], caps)
    assert not torch.allclose(wrong, whole[:1, :2])  # what the bench measured before


def test_a_bench_seed_draws_the_same_inputs_and_is_recorded(tmp_path):
    """kdsl bench --seed S: every case's inputs come from S (bool captures sorted on odd seeds,
    unsorted on even), so a timing that depends on the draw can be repeated; the seed lands in
    the markdown and the JSON."""
    import json
    torch = pytest.importorskip("torch")
    import kdsl
    from kdsl.testing import attention_inputs
    src = ("attention flagged {\n    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]\n"
           "    valid: bool[B, N]\n    mask(b, h, i, j) = valid[b, j]\n}\n")
    path = tmp_path / "flagged.kd"
    path.write_text(src)
    kir = kdsl.load(str(path), interpret=True).ir["flagged"]
    seed = random.randrange(2**30) * 2
    draw = [attention_inputs(kir, 2, 2, 2, 64, 200, 32, device="cpu", seed=s) for s in (seed, seed, seed + 1)]
    for a, b in zip(draw[0][:3] + (draw[0][3]["valid"],), draw[1][:3] + (draw[1][3]["valid"],)):
        assert torch.equal(a, b)
    assert not torch.equal(draw[0][0], draw[2][0])
    odd = draw[2][3]["valid"]
    assert torch.equal(odd, odd.sort(dim=-1).values) and odd.any() and not odd.all()
    even = draw[0][3]["valid"]
    assert not torch.equal(even, even.sort(dim=-1).values)
    md = bench_report.markdown(_rows(), "GPU", seed=seed)
    assert f"from seed {seed} (kdsl bench --seed {seed}" in md and "seed" not in bench_report.markdown(_rows(), "GPU")
    paths = bench_report.write_results(_rows(), tmp_path, "GPU", "t", seed=seed)
    assert json.loads(paths["json"].read_text())["seed"] == seed


def test_every_gpu_test_file_is_in_a_part_of_the_device_script():
    """bench/gpu_session.sh runs the GPU tests a part a call (TESTS_PART); a file named in no part
    runs in no session but the one that wrote it (twelve had drifted so by the ninety-third)."""
    script = (bench.ROOT / "bench" / "gpu_session.sh").read_text()
    parts = dict(re.findall(r"^  ([a-z])\) PYTEST_ARGS=\$\{PYTEST_ARGS:-\"([^\"]*)\"\}", script, re.M))
    assert len(parts) >= 8, sorted(parts)
    named = {f for files in parts.values() for f in files.split()}
    files = {f"tests/gpu/{p.name}" for p in (bench.ROOT / "tests" / "gpu").glob("test_*.py")}
    assert files - named == set(), "GPU test files in no TESTS_PART"
    assert named - files == set(), "TESTS_PART names files that do not exist"
