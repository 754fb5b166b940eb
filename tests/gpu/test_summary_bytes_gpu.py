"""Whole-block summaries of 1-byte masks on the GPU: the summary kernel reads a bool / u8 / i8
element at [..., q, kv] 16 bytes a lane, one warp a block (attention_summary.cuh
summarize_warp_bytes), and stops a block once its min and max decide every tile predicate
(mask_analysis.summary_saturation: for `sel > 100`, a value <= 100 and one > 100); a u8 tested
against zero only is read as a bool. Masks laid out in regions that straddle the tiles: regions
all kept, all dropped and mixed, with stray elements; rows whose stride or start is not 16-byte
aligned take the element-by-element path. Against the float64 reference, and a precomputed
summary against the one each call makes."""
import pytest

import kdsl
from kdsl import reference
from kdsl.testing import ATTENTION_TOL, rel_frobenius

from conftest import assert_summarised_call_matches
from gradcheck import check_grads

pytestmark = pytest.mark.gpu

SOURCE = """
attention head_u8_threshold {
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    sel: u8[B, H, M, N]
    mask(b, h, i, j) = sel[b, h, i, j] > 100
}
attention shared_i8_causal {
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    sel: i8[B, M, N]
    mask(b, h, i, j) = j <= i + (N - M) and sel[b, i, j] >= -3
}
attention head_bool {
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    sel: bool[B, H, M, N]
    mask(b, h, i, j) = sel[b, h, i, j]
}
attention head_u8_nonzero {
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    sel: u8[B, H, M, N]
    mask(b, h, i, j) = j <= i + (N - M) and sel[b, h, i, j] > 0
}
attention head_u8_equal {
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    sel: u8[B, H, M, N]
    mask(b, h, i, j) = sel[b, h, i, j] == 7
}
"""
# values each kernel keeps and drops: (low, high) inclusive ranges drawn from, or one value
KEEP_DROP = {"head_u8_threshold": ((101, 255), (0, 100)), "shared_i8_causal": ((-3, 127), (-128, -4)),
             "head_bool": ((1, 1), (0, 0)), "head_u8_equal": ((7, 7), (0, 6)), "head_u8_nonzero": ((1, 255), (0, 0))}
AS_BOOL = {"head_u8_nonzero"}  # a u8 tested against zero alone: summarised as a bool (mask_analysis)
PER_HEAD = {"head_u8_threshold", "head_bool", "head_u8_equal", "head_u8_nonzero"}


@pytest.fixture(scope="module")
def mod():
    mp = pytest.MonkeyPatch()
    mp.setenv("KDSL_TILE_SUMMARY_HEADS", "1")  # per-head data too (read when a kernel is lowered)
    yield kdsl.compile(SOURCE)
    mp.undo()


def regional(torch, name, lead, M, N, gen):
    """A [*lead, M, N] mask of kernel `name`'s dtype: rectangles cut at random rows and columns
    (not on tile edges), each all kept, all dropped or mixed, then a few stray elements."""
    (klo, khi), (dlo, dhi) = KEEP_DROP[name]
    rows = int(torch.tensor(lead).prod()) if lead else 1
    draw = lambda lo, hi, shape: torch.randint(lo, hi + 1, shape, generator=gen, device="cuda")  # noqa: E731
    keep, drop = draw(klo, khi, (rows, M, N)), draw(dlo, dhi, (rows, M, N))
    cut = lambda L: torch.cumsum(draw(40, 300, (rows, L)), 1)  # noqa: E731
    region_q = torch.searchsorted(cut(M), torch.arange(M, device="cuda").expand(rows, M).contiguous(), right=True)
    region_k = torch.searchsorted(cut(N), torch.arange(N, device="cuda").expand(rows, N).contiguous(), right=True)
    kind = draw(0, 2, (rows, 64, 64))  # 0 dropped, 1 kept, 2 mixed, per region
    r = torch.arange(rows, device="cuda")[:, None, None]
    kind = kind[r, region_q.clamp(max=63)[:, :, None], region_k.clamp(max=63)[:, None, :]]
    mixed = draw(0, 1, (rows, M, N)).bool()
    take = (kind == 1) | ((kind == 2) & mixed)
    values = torch.where(take, keep, drop)
    stray = torch.randint(0, M * N, (rows, 6), generator=gen, device="cuda")
    flat = values.view(rows, M * N)
    at = lambda t: t.view(rows, M * N).gather(1, stray)  # noqa: E731
    flat.scatter_(1, stray, torch.where(at(take), at(drop), at(keep)))
    dtype = {"shared_i8_causal": torch.int8, "head_bool": torch.bool}.get(name, torch.uint8)
    return values.to(dtype).view(*lead, M, N)


def _case(torch, name, shape, salt=""):
    B, H, M, N, D = shape
    gen = torch.Generator(device="cuda").manual_seed(hash((name, shape, salt)) % 2**31)
    q = torch.randn(B, H, M, D, device="cuda", generator=gen).bfloat16()
    k, v = (torch.randn(B, H, N, D, device="cuda", generator=gen).bfloat16() for _ in range(2))
    lead = (B, H) if name in PER_HEAD else (B,)
    return q, k, v, {"sel": regional(torch, name, lead, M, N, gen)}, gen


def _misaligned(torch, t):
    """t's values in a contiguous tensor whose first byte is not 16-byte aligned."""
    buf = torch.empty(t.numel() + 16, dtype=t.dtype, device=t.device)
    out = buf[1:1 + t.numel()].view(t.shape)
    out.copy_(t)
    return out


SHAPES = [(1, 2, 1024, 1024, 128),  # whole tiles, rows 16-byte aligned: the 16-byte path
          (2, 3, 600, 1200, 64),    # ragged rows, the last key tile 48 wide
          (1, 2, 333, 1000, 128),   # rows of 1000 bytes: not aligned, element by element
          (1, 2, 300, 272, 256),    # the widest head dim's tiles
          (1, 1, 1, 4096, 128)]     # one row


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", sorted(KEEP_DROP))
def test_one_byte_masks_in_regions_match_the_reference_and_a_precomputed_summary(mod, name, shape):
    torch = pytest.importorskip("torch")
    q, k, v, caps, _ = _case(torch, name, shape)
    assert_summarised_call_matches(mod, name, q, k, v, caps, (name, shape))


@pytest.mark.parametrize("shape", [SHAPES[0], SHAPES[1], (1, 2, 500, 1008, 128)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", sorted(KEEP_DROP))
def test_the_byte_scan_and_the_element_path_make_one_summary(mod, name, shape, monkeypatch):
    """attention_summary.cuh's 1-byte scan (summarize_warp_bytes: a lane's column of 16 bytes
    stepped down the rows, unsigned and signed bytes as u16x2 ranges) and the element-by-element
    block path (KDSL_SUMMARY_BYTES=0: summarize_block) give every block the same (min, max), bit
    for bit, both saturating to the slot's floor and ceiling once a block holds both: ragged rows,
    a last key tile of 3 chunks (1200 keys) or 7 (1008), blocks the early stop decides and blocks
    read whole. A u8 tested against zero alone is scanned as a bool (0 / 1) and read by the
    element path as its value, so there the two agree once values are clamped to 1."""
    torch = pytest.importorskip("torch")
    from kdsl.runtime.attention_launch import AttentionKernel
    q, k, v, caps, _ = _case(torch, name, shape, "scans")
    monkeypatch.setenv("KDSL_TILE_SUMMARY_HEADS", "1")  # as the module was lowered
    made = {}
    for scan in ("1", "0"):
        monkeypatch.setenv("KDSL_DEFINES", f"KDSL_SUMMARY_BYTES={scan}")
        made[scan] = AttentionKernel(mod.ir[name]).tile_summary(q, k, v, **caps).buffer
    if name in AS_BOOL:
        made = {scan: buf.clamp(max=1) for scan, buf in made.items()}
    assert torch.equal(made["1"], made["0"]), (name, shape)


@pytest.mark.parametrize("name", sorted(KEEP_DROP))
def test_a_mask_whose_rows_start_off_16_bytes_takes_the_element_path_and_agrees(mod, name):
    torch = pytest.importorskip("torch")
    q, k, v, caps, _ = _case(torch, name, (1, 2, 512, 1024, 128), "misaligned")
    shifted = {"sel": _misaligned(torch, caps["sel"])}
    assert shifted["sel"].data_ptr() % 16 != 0
    ref, _ = reference.attention(mod.ir[name], q, k, v, caps)
    assert rel_frobenius(getattr(mod, name)(q, k, v, **shifted), ref) <= ATTENTION_TOL


@pytest.mark.parametrize("name", ["head_u8_threshold", "shared_i8_causal"])
def test_one_byte_mask_gradients_match_the_reference(mod, name):
    torch = pytest.importorskip("torch")
    q, k, v, caps, gen = _case(torch, name, (1, 2, 600, 800, 128), "grad")
    dout = torch.randn(q.shape, device="cuda", generator=gen).bfloat16()
    check_grads(f"{name} bytes", getattr(mod, name), mod.ir[name], q, k, v, caps, dout)
