"""The backward kernels (on sm_90a attention_bwd_wgmma.cuh up to head dim 128,
attention_bwd_wgmma_wide.cuh beyond; attention_bwd.cuh elsewhere) under torch autograd against float64 autograd of the reference: every
attention program of samples/ and bench/variants.kd over awkward shapes (length 1, tile +- 1,
M != N, GQA, head dims padded to 64, 128, 192 or 256, v's head dim other than q's), and the lse's gradient."""
import pytest

import kdsl
from kdsl.testing import attention_inputs

from conftest import ROOT, SAMPLES
from exprgen import program
from gradcheck import LEARNED, check_grads, fit

pytestmark = pytest.mark.gpu

MODULES = {p: kdsl.load(p) for p in [*SAMPLES, ROOT / "bench" / "variants.kd"]}
CASES = [(p, name) for p, mod in MODULES.items() for name in mod.kernels if mod.ir[name].kind == "attention"]
# (B, H, Hkv, M, N, D, Dv)
SHAPES = [(1, 2, 2, 1, 1, 64, 64), (2, 4, 2, 127, 129, 128, 128), (1, 4, 4, 200, 333, 64, 64),
          (1, 2, 1, 700, 1000, 256, 256), (1, 4, 2, 257, 300, 192, 128), (2, 2, 2, 65, 64, 32, 32),
          (1, 4, 2, 190, 250, 96, 64), (2, 2, 1, 64, 300, 64, 128)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0].stem}.{c[1]}")
def test_backward_matches_reference(case, shape):
    torch = pytest.importorskip("torch")
    path, name = case
    mod, kir = MODULES[path], MODULES[path].ir[name]
    B, H, Hkv, M, N, D, Dv = fit(kir, shape)
    gen = torch.Generator(device="cuda").manual_seed(hash((name, shape)) % 2**31)
    q, k, v, caps = attention_inputs(kir, B, H, Hkv, M, N, D, generator=gen, Dv=Dv)
    dout = torch.randn((B, H, M, Dv), device="cuda", generator=gen).to(q.dtype)
    check_grads(f"{name} {shape}", getattr(mod, name), kir, q, k, v, caps, dout)


def test_gradient_of_a_declared_lse():
    torch = pytest.importorskip("torch")
    mod = kdsl.compile("attention lsecausal {\n q: bf16[B, H, M, D]; k: bf16[B, Hkv, N, D]; v: bf16[B, Hkv, N, D]\n"
                       " lse: f32[B, H, M]\n mask(b, h, i, j) = j <= i\n}\n")
    kir = mod.ir["lsecausal"]
    q, k, v, caps = attention_inputs(kir, 2, 4, 2, 300, 300, 64)
    dout = torch.randn((2, 4, 300, 64), device="cuda").to(q.dtype)
    dlse = torch.randn((2, 4, 300), device="cuda")
    check_grads("lse", mod.lsecausal, kir, q, k, v, caps, dout, dlse)


@pytest.mark.parametrize("d, dv", [(64, 128), (128, 64), (96, 32), (16, 80), (256, 128), (64, 256), (160, 96)])
def test_value_head_dim_other_than_the_query_head_dim(d, dv):
    """A program whose v has a head dim of its own: dK and dV of different widths, and head
    dims padded to 64, 128, 192 or 256 (sm_90a: the wgmma backward up to 128, the wide one
    past it, whose warpgroups split the padded columns: 160 -> 192 splits at 96, inside a
    64-column block; 64 at 32)."""
    torch = pytest.importorskip("torch")
    mod = kdsl.compile("attention vwide {\n q: bf16[B, H, M, D]; k: bf16[B, Hkv, N, D]; v: bf16[B, Hkv, N, Dv]\n"
                       " mask(b, h, i, j) = j <= i + 40\n}\n")
    kir = mod.ir["vwide"]
    gen = torch.Generator(device="cuda").manual_seed(d * 1000 + dv)
    q, k, v, caps = attention_inputs(kir, 2, 4, 2, 150, 260, d, generator=gen, Dv=dv)
    dout = torch.randn((2, 4, 150, dv), device="cuda", generator=gen).to(q.dtype)
    check_grads(f"vwide {d}/{dv}", mod.vwide, kir, q, k, v, caps, dout)


@pytest.mark.parametrize("d", [64, 128, 256])
def test_half_precision_inputs(d):
    """f16 q, k, v: the backward's products and its P / dS rounding in f16 (the wgmma kernels'
    f16 forms: attention_bwd_wgmma.cuh at 64 and 128, the wide one at 256)."""
    torch = pytest.importorskip("torch")
    mod = kdsl.compile("attention halfcausal {\n q: f16[B, H, M, D]; k: f16[B, Hkv, N, D]; v: f16[B, Hkv, N, D]\n"
                       " score(s, b, h, i, j) = s - 0.01 * float(abs(i - j))\n mask(b, h, i, j) = j <= i\n}\n")
    kir = mod.ir["halfcausal"]
    gen = torch.Generator(device="cuda").manual_seed(d)
    q, k, v, caps = attention_inputs(kir, 2, 4, 2, 200, 200, d, generator=gen)
    assert q.dtype == torch.float16
    dout = torch.randn((2, 4, 200, d), device="cuda", generator=gen).to(q.dtype)
    check_grads(f"f16 d={d}", mod.halfcausal, kir, q, k, v, caps, dout)


@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("name", LEARNED)
def test_captured_tensor_gradients(name, d):
    """Learned captured tensors (tests/gradcheck.py LEARNED): the backward built with
    KDSL_CAPTURE_GRADS adds their gradients (the wgmma kernel at 64 and 128, mma.sync at 256)."""
    torch = pytest.importorskip("torch")
    decl, score, mask = LEARNED[name]
    mod = kdsl.compile(program(score, mask, decls=(decl,)))
    kir = mod.ir["gen"]
    gen = torch.Generator(device="cuda").manual_seed(d)
    q, k, v, caps = attention_inputs(kir, 2, 4, 2, 190, 300, d, generator=gen)
    caps = {n: c.detach().requires_grad_() for n, c in caps.items()}
    dout = torch.randn((2, 4, 190, d), device="cuda", generator=gen).to(q.dtype)
    check_grads(f"{name} d={d}", mod.gen, kir, q, k, v, caps, dout, of_captures=True)


@pytest.mark.parametrize("d", [64, 256])
@pytest.mark.parametrize("group, splits", [(1, 1), (4, 1), (5, 1), (14, 1), (20, 1), (5, 2), (20, 2)])
def test_key_block_order_in_head_groups(group, splits, d, monkeypatch):
    """The backward's CTAs walk (b, k/v head) pairs in groups, key block by key block
    (attention_common.cuh backward_block): every group size covers each (key block, pair) once,
    the last group taking the remainder (14 pairs in groups of 4: 4, 4, 6; of 5: 5, 9), or all
    pairs (14, 20 > 14). With each pair's two query heads split over CTAs (splits 2) the units
    are (pair, head): 28 of them, in groups of 5 (5, 5, 5, 5, 8) or all."""
    torch = pytest.importorskip("torch")
    from kdsl.runtime import attention_backward
    monkeypatch.setattr(attention_backward, "_head_group", lambda *args, **kwargs: group)
    monkeypatch.setenv("KDSL_BWD_HEAD_SPLITS", str(splits))
    mod = kdsl.compile("attention grouped {\n q: bf16[B, H, M, D]; k: bf16[B, Hkv, N, D]; v: bf16[B, Hkv, N, D]\n"
                       " mask(b, h, i, j) = j <= i\n}\n")
    kir = mod.ir["grouped"]
    gen = torch.Generator(device="cuda").manual_seed(group * 1000 + d + splits)
    q, k, v, caps = attention_inputs(kir, 2, 14, 7, 300, 450, d, generator=gen)
    dout = torch.randn((2, 14, 300, d), device="cuda", generator=gen).to(q.dtype)
    check_grads(f"group {group} splits {splits} d={d}", mod.grouped, kir, q, k, v, caps, dout)


@pytest.mark.parametrize("shape", [(2, 3, 100, 64), (1, 2, 64, 128), (1, 1, 1, 96), (2, 2, 130, 48),
                                   (1, 2, 100, 192), (1, 1, 70, 160), (1, 2, 64, 256)],
                         ids=lambda s: "rows" + "x".join(map(str, s)))
def test_dq_helper_puts_tiles_in_row_order(shape):
    """The module's dQ helper (attention_bwd_rows.cuh dq_tiles_to_rows) against the layout's
    torch reference (attention_backward.dq_from_tiles) times the softmax scale on a random
    dq_acc, padding included, for both wgmma backwards (the wide one past 128);
    and the delta helper against rowsum(dout * out) in float64."""
    torch = pytest.importorskip("torch")
    from kdsl.runtime import attention_backward as ab
    from kdsl.runtime.launch import _ptr
    B, H, M, D = shape
    mod = kdsl.compile("attention rows {\n q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]\n}\n")
    gen = torch.Generator(device="cuda").manual_seed(M * D)
    q, k, v, caps = attention_inputs(mod.ir["rows"], B, H, H, M, 70, D, generator=gen)
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    out = mod.rows(q, k, v)
    out.backward(torch.randn_like(out))  # builds and caches the backward's launch for this signature
    (launch,) = [p for key, p in mod.rows._plans.items() if key[0] == "backward"]
    dp = -(-D // 64) * 64
    acc = torch.randn((B, H, -(-M // 64), 64 * dp), device="cuda", generator=gen)
    dq = torch.empty((B, H, M, D), dtype=torch.bfloat16, device="cuda")
    stream = torch.cuda.current_stream().cuda_stream
    launch.dq_rows.run(stream, [_ptr(acc), _ptr(dq)])
    assert torch.equal(dq, (ab.dq_from_tiles(acc, M, D) * launch.scale).to(torch.bfloat16))  # dq_acc: dQ / scale
    dout, o = (torch.randn((B, H, M, D), device="cuda", generator=gen).to(torch.bfloat16) for _ in range(2))
    dlse = torch.randn((B, H, M), device="cuda", generator=gen)
    delta = torch.empty((B, H, M), device="cuda")
    launch.delta.run(stream, [_ptr(dout), _ptr(o), _ptr(dlse), _ptr(delta)])
    want = (dout.double() * o.double()).sum(-1) - dlse.double()
    assert torch.allclose(delta.double(), want, rtol=1e-5, atol=1e-5 * D)


@pytest.mark.parametrize("d", [64, 128, 256])
def test_cp_async_loads_give_the_reference_gradients(d, monkeypatch):
    """KDSL_BWD_LOADS=cp_async, the A/B switch against the default TMA loads of Q and dO: every
    thread's copies (zeros past M) still give the reference's gradients at ragged lengths and GQA."""
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("KDSL_BWD_LOADS", "cp_async")  # before the module: its backward is built under it
    mod = kdsl.compile("attention copied {\n q: bf16[B, H, M, D]; k: bf16[B, Hkv, N, D]; v: bf16[B, Hkv, N, D]\n"
                       " mask(b, h, i, j) = j <= i + 40\n}\n")
    kir = mod.ir["copied"]
    gen = torch.Generator(device="cuda").manual_seed(d)
    q, k, v, caps = attention_inputs(kir, 2, 4, 2, 190, 250, d, generator=gen)
    dout = torch.randn((2, 4, 190, d), device="cuda", generator=gen).to(q.dtype)
    check_grads(f"cp.async d={d}", mod.copied, kir, q, k, v, caps, dout)


@pytest.mark.parametrize("mask", [None, "j <= i", "abs(i - j) < 200"], ids=str)
@pytest.mark.parametrize("d", [64, 128])
def test_offset_indexed_table_gradient(mask, d):
    """A learned relative-position table read at q - kv alone: the wgmma backward sums its
    gradient per offset (attention_bwd_wgmma.cuh flush_diagonal / add_offset_sums), over
    ragged lengths (M != N, neither a multiple of a tile), GQA and masks that empty tiles."""
    torch = pytest.importorskip("torch")
    mod = kdsl.compile(program("s + bias[h, max(0, min(255, i - j + 128))]", mask, decls=("bias: f32[H, 256]",)))
    kir = mod.ir["gen"]
    gen = torch.Generator(device="cuda").manual_seed(d + len(mask or ""))
    q, k, v, caps = attention_inputs(kir, 2, 4, 2, 333, 517, d, generator=gen)
    caps = {n: c.detach().requires_grad_() for n, c in caps.items()}
    dout = torch.randn((2, 4, 333, d), device="cuda", generator=gen).to(q.dtype)
    check_grads(f"offset table d={d} {mask}", mod.gen, kir, q, k, v, caps, dout, of_captures=True)


DOCS = ("attention docs {\n q: bf16[B, H, M, D]; k: bf16[B, Hkv, N, D]; v: bf16[B, Hkv, N, D]\n doc_q: i32[B, M]\n"
        " doc_kv: i32[B, N]\n mask(b, h, i, j) = doc_q[b, i] == doc_kv[b, j] and j <= i + 30\n}\n")


@pytest.mark.parametrize("d, defines, kind", [(64, "", ""), (64, "KDSL_BWD_BM=128", ""), (128, "", ""), (256, "", ""),
                                               (64, "", "mma")], ids=str)
def test_data_dependent_mask_skips_tiles_by_its_summary(d, defines, kind, monkeypatch):
    """A mask that reads data (document ids) classifies the backward's tiles from a tile summary
    made for them (64 queries by the CTA's keys): documents of 1 to 150 rows leave tiles empty,
    full and partial, at ragged lengths and GQA; KDSL_BWD_BM=128 takes the 128-query step (the
    union of two 64-row summary tiles) where the build would fall back to 64, and the mma.sync
    kernel classifies its 64 x 64 tiles the same way."""
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("KDSL_DEFINES", defines)  # before the module: its backward is built under them
    monkeypatch.setenv("KDSL_BWD_KERNEL", kind)
    mod = kdsl.compile(DOCS)
    kir = mod.ir["docs"]
    gen = torch.Generator(device="cuda").manual_seed(d + len(defines) + len(kind))
    B, H, Hkv, M, N = 2, 4, 2, 517, 450
    q, k, v, _ = attention_inputs(kir, B, H, Hkv, M, N, d, generator=gen)

    # sorted document ids, runs of 1 to 150 rows, the same runs for queries and keys
    lengths = torch.randint(1, 151, (B, M), device="cuda", generator=gen)
    doc = torch.stack([torch.repeat_interleave(torch.arange(M, device="cuda"), lengths[b])[:M] for b in range(B)])
    caps = {"doc_q": doc.to(torch.int32), "doc_kv": doc[:, :N].to(torch.int32).contiguous()}
    dout = torch.randn((B, H, M, d), device="cuda", generator=gen).to(q.dtype)
    check_grads(f"docs d={d} {defines} {kind}", mod.docs, kir, q, k, v, caps, dout)


@pytest.mark.parametrize("d", [64, 128, 256])
def test_a_learned_bias_under_a_document_mask(d):
    """The capture-gradient backward of a mask that reads data: the tile summary's pointer comes
    after the gradient buffers (runtime/attention_backward.py), and the learned table's gradient
    is summed over the kept elements only."""
    torch = pytest.importorskip("torch")
    mod = kdsl.compile("attention docbias {\n q: bf16[B, H, M, D]; k: bf16[B, Hkv, N, D]; v: bf16[B, Hkv, N, D]\n"
                       " doc_q: i32[B, M]\n doc_kv: i32[B, N]\n bias: f32[H, 64]\n"
                       " score(s, b, h, i, j) = s + bias[h, (i - j) % 64]\n"
                       " mask(b, h, i, j) = doc_q[b, i] == doc_kv[b, j] and j <= i\n}\n")
    kir = mod.ir["docbias"]
    gen = torch.Generator(device="cuda").manual_seed(d)
    B, H, Hkv, M, N = 2, 4, 2, 333, 333
    q, k, v, caps = attention_inputs(kir, B, H, Hkv, M, N, d, generator=gen)
    lengths = torch.randint(1, 120, (B, M), device="cuda", generator=gen)
    doc = torch.stack([torch.repeat_interleave(torch.arange(M, device="cuda"), lengths[b])[:M] for b in range(B)])
    caps = {"doc_q": doc.to(torch.int32), "doc_kv": doc.to(torch.int32), "bias": caps["bias"].detach().requires_grad_()}
    dout = torch.randn((B, H, M, d), device="cuda", generator=gen).to(q.dtype)
    check_grads(f"docbias d={d}", mod.docbias, kir, q, k, v, caps, dout, of_captures=True)


@pytest.mark.parametrize("d, dv", [(256, 64), (192, 64), (240, 64), (128, 64)])
def test_key_bounds_on_the_backwards_own_key_tiles(d, dv):
    """A mask that reads data beside a 2-D neighbourhood (`i % 128` against `j % 128`): the
    forward takes 128-key tiles, on which kv % 128 is kv - k0; the wide backward's CTAs take 64
    keys and solve the bounds again for theirs (emit_backward.backward_kernel). Found by tools/gpu_fuzz.py:
    solved for 128 keys, every second 64-key block's gradients were off by ~100 %."""
    torch = pytest.importorskip("torch")
    mod = kdsl.compile("attention docnat {\n q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, Dv]\n"
                       " doc_q: i32[B, M]\n doc_kv: i32[B, N]\n"
                       " mask(b, h, i, j) = doc_q[b, i] == doc_kv[b, j] and abs(i // 128 - j // 128) <= 1"
                       " and abs(i % 128 - j % 128) <= 2\n}\n")
    kir = mod.ir["docnat"]
    gen = torch.Generator(device="cuda").manual_seed(d + dv)
    B, H, M, N = 1, 2, 257, 700
    q, k, v, _ = attention_inputs(kir, B, H, H, M, N, d, generator=gen, Dv=dv)
    # two documents: the ids hold on most partial tiles (the key bounds' path), not on all
    caps = {"doc_q": (torch.arange(M, device="cuda") >= 200).to(torch.int32).expand(B, M).contiguous(),
            "doc_kv": (torch.arange(N, device="cuda") >= 450).to(torch.int32).expand(B, N).contiguous()}
    dout = torch.randn((B, H, M, dv), device="cuda", generator=gen).to(q.dtype)
    check_grads(f"docnat {d}/{dv}", mod.docnat, kir, q, k, v, caps, dout)


def _check_split(monkeypatch, d, kind, env: dict, name, score, mask, shape, seed):
    """A program's gradients with the backward's CTAs split as env forces (on the kernel `kind`
    picks; "": the default for d) against the reference's, on B, H, Hkv, M, N = shape."""
    torch = pytest.importorskip("torch")
    if kind:
        monkeypatch.setenv("KDSL_BWD_KERNEL", kind)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    mod = kdsl.compile(f"attention {name} {{\n q: bf16[B, H, M, D]; k: bf16[B, Hkv, N, D]; v: bf16[B, Hkv, N, D]\n"
                       f" score(s, b, h, i, j) = {score}\n mask(b, h, i, j) = {mask}\n}}\n")
    kir = mod.ir[name]
    B, H, Hkv, M, N = shape
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v, caps = attention_inputs(kir, B, H, Hkv, M, N, d, generator=gen)
    dout = torch.randn((B, H, M, d), device="cuda", generator=gen).to(q.dtype)
    check_grads(f"{name} d={d} {kind or 'default'} {env}", getattr(mod, name), kir, q, k, v, caps, dout)


@pytest.mark.parametrize("splits", [1, 2, 8])
@pytest.mark.parametrize("d, kind", [(64, ""), (128, ""), (256, ""), (128, "mma")])
def test_query_heads_split_over_ctas(d, kind, splits, monkeypatch):
    """Few k/v heads: a (b, k/v head) pair's query heads split into ranges, a CTA each per key
    block, dK and dV summed from fp32 partials by the module's helper (AttnArgs::head_splits).
    Forced by KDSL_BWD_HEAD_SPLITS (1: none, 8: one query head a CTA) for MQA with a per-head
    score, so that a CTA reading another range's head would show; every backward kernel."""
    _check_split(monkeypatch, d, kind, {"KDSL_BWD_HEAD_SPLITS": str(splits)}, "mqa",
                 "s - 0.05 * float(h + 1) * float(abs(i - j))", "j <= i + 20", (2, 8, 1, 190, 230), d * 10 + splits)


@pytest.mark.parametrize("splits", [1, 2, 3, 16])
@pytest.mark.parametrize("d, kind", [(64, ""), (128, ""), (256, ""), (128, "mma")])
def test_query_tiles_split_over_ctas(d, kind, splits, monkeypatch):
    """Few CTAs with many queries (cross-attention): a CTA's query tiles split into ranges, a
    CTA each, dK and dV summed from fp32 partials (AttnArgs::query_splits). Forced by
    KDSL_BWD_QUERY_SPLITS (1: none, 3: ranges that do not divide the tiles, 16: more ranges than
    tiles at 128-query steps, some empty) on GQA whose query heads split too, with a score and
    mask on the query row, so that a range reading another's rows, or a lost partial, would
    show; every backward kernel."""
    _check_split(monkeypatch, d, kind, {"KDSL_BWD_HEAD_SPLITS": "2", "KDSL_BWD_QUERY_SPLITS": str(splits)}, "cross",
                 "s - 0.01 * float(h + 1) * float(abs(i - 8 * j))", "4 * j <= i + 28", (2, 4, 2, 1000, 77),
                 d * 10 + splits)


@pytest.mark.parametrize("d", [64, 128])
def test_the_splits_the_schedule_picks_give_the_reference_gradients(d, monkeypatch):
    """Unforced: runtime/backward_schedule.py splits the pair's query heads (and their tiles) where
    the launch's last wave would idle, a grid of 192 CTAs on 132 SMs with half its k/v heads
    bidirectional (kv_group_parity, tools/dev/heldout37.kd, x1.47 on an H200). The pick is asserted
    to differ from the counting rules', then its gradients checked against the reference."""
    from kdsl.runtime import attention_backward
    torch = pytest.importorskip("torch")
    for var in ("KDSL_BWD_SCHEDULE", "KDSL_BWD_HEAD_SPLITS", "KDSL_BWD_QUERY_SPLITS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(attention_backward, "_sm_count", lambda device: 132)  # the same pick on any Hopper
    mod = kdsl.load(ROOT / "tools" / "dev" / "heldout37.kd")
    kir = mod.ir["kv_group_parity"]
    B, H, Hkv, M = 2, 12, 4, 3000
    picked = attention_backward.splits(mod.kv_group_parity, B, H, Hkv, M, M, d, d, 0)
    monkeypatch.setenv("KDSL_BWD_SCHEDULE", "0")
    rules = attention_backward.splits(mod.kv_group_parity, B, H, Hkv, M, M, d, d, 0)
    monkeypatch.delenv("KDSL_BWD_SCHEDULE")
    assert picked != rules, (picked, rules)
    gen = torch.Generator(device="cuda").manual_seed(81 + d)
    q, k, v, caps = attention_inputs(kir, B, H, Hkv, M, M, d, generator=gen)
    dout = torch.randn((B, H, M, d), device="cuda", generator=gen).to(q.dtype)
    check_grads(f"kv_group_parity d={d} splits {picked}", mod.kv_group_parity, kir, q, k, v, caps, dout)

