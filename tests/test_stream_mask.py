"""passes/stream_mask.py: which streamed byte masks the kernel's warps may test row by row
(the mask is its byte's nonzero test beside a part over anything else), and that the tile
predicate it derives is sound: on a tile where it holds, the mask equals the byte's test on
every element, whatever the data."""
import numpy as np
import pytest

from kdsl import interp, ir
from kdsl.grammar import parse
from kdsl.passes import pipeline
from kdsl.passes.simplify import TRUE
from kdsl.passes.target import get_target
from kdsl.semantics import eval_numpy


def lowered(mask: str, decl: str, d: int = 128, **attrs) -> ir.Kernel:
    src = f"""attention m {{
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    {decl}
    mask(b, h, i, j) = {mask}
}}"""
    k = pipeline.check(parse(src, "m.kd"))[0]
    return pipeline.lower(k.with_attrs(**attrs) if attrs else k, get_target("sm_90a"), d)


@pytest.fixture(autouse=True)
def checked(monkeypatch):
    """The pass is opt-in (stream_mask.enabled), for per-head masks with no summary
    (KDSL_TILE_SUMMARY_HEADS=0: one classifies their tiles by default)."""
    monkeypatch.setenv("KDSL_STREAM_NONZERO", "1")
    monkeypatch.setenv("KDSL_TILE_SUMMARY_HEADS", "0")


HEAD_U8 = "sel: u8[B, H, M, N]"
HEAD_BOOL = "keep: bool[B, H, M, N]"


@pytest.mark.parametrize("mask,decl", [
    ("keep[b, h, i, j]", HEAD_BOOL),
    ("j <= i and sel[b, h, i, j] > 0", HEAD_U8),
    ("sel[b, h, i, j] != 0 and abs(i - j) <= 300", "sel: i8[B, H, M, N]"),
    ("0 < sel[b, h, i, j] and j < N - 5", HEAD_U8),
    ("sel[b, h, i, j] >= 1", HEAD_U8),
])
def test_a_nonzero_test_of_a_streamed_byte_is_taken(mask, decl):
    k = lowered(mask, decl)
    assert k.func("stream_rest_full") is not None
    if "and" not in mask:
        assert k.func("stream_rest_full") == TRUE


@pytest.mark.parametrize("mask,decl,why", [
    ("sel[b, h, i, j] > 0", "sel: i8[B, H, M, N]", "a negative i8 is nonzero but not > 0"),
    ("sel[b, h, i, j] == 3", HEAD_U8, "not a nonzero test"),
    ("j <= i and (sel[b, h, i, j] > 0 or j == 0)", HEAD_U8, "the byte read inside another conjunct"),
    ("sel[b, h, i, j] != 0", "sel: i32[B, H, M, N]", "four-byte elements"),
    ("keep[b, i, j]", "keep: bool[B, M, N]", "a whole-block summary classifies its tiles already"),
])
def test_other_masks_are_left_alone(mask, decl, why):
    assert lowered(mask, decl).func("stream_rest_full") is None, why


def test_off_by_default(monkeypatch):
    monkeypatch.delenv("KDSL_STREAM_NONZERO")
    assert lowered("keep[b, h, i, j]", HEAD_BOOL).func("stream_rest_full") is None


def test_no_ring_no_check():
    """A 64-key tile (the warps read whole 128-byte rows), or no stream at all."""
    assert lowered("keep[b, h, i, j]", HEAD_BOOL, tile_n=64).func("stream_rest_full") is None
    assert lowered("keep[b, h, i, j]", HEAD_BOOL, stream_capture=None).func("stream_rest_full") is None


def test_an_ir_file_gets_the_predicate_derived_again():
    k = lowered("j <= i and sel[b, h, i, j] > 0", HEAD_U8)
    stale = k.with_func("stream_rest_full", TRUE)  # would test the byte alone on diagonal tiles
    again = pipeline.lower(ir.parse_ir(ir.print_ir(stale))[0], get_target("sm_90a"), 128)
    assert again.func("stream_rest_full") == k.func("stream_rest_full") != TRUE


@pytest.mark.parametrize("mask,decl", [
    ("j <= i and sel[b, h, i, j] > 0", HEAD_U8),
    ("sel[b, h, i, j] != 0 and abs(i - j) <= 100 and j >= lo[b]", "sel: i8[B, H, M, N]\n    lo: i32[B]"),
    ("(j <= i + N - M or i < 16) and keep[b, h, i, j]", HEAD_BOOL),
])
def test_where_the_predicate_holds_the_byte_alone_decides(mask, decl):
    k = lowered(mask, decl)
    rest_full = k.func("stream_rest_full")
    rng = np.random.default_rng()
    for _ in range(4):
        B, H, M, N = 2, 2, int(rng.integers(1, 400)), int(rng.integers(1, 400))
        name = decl.split(":")[0]
        dtype = decl.split(":")[1].split("[")[0].strip()
        data = {"u8": lambda s: rng.integers(0, 3, s).astype(np.uint8), "i8": lambda s: rng.integers(-2, 3, s).astype(np.int8),
                "bool": lambda s: rng.random(s) < 0.5}[dtype]((B, H, M, N))
        caps = {name: data, "lo": rng.integers(0, N + 1, (B,)).astype(np.int32)}
        grid = {"B": B, "H": H, "Hkv": H, "M": M, "N": N, "D": 128, "b": np.arange(B).reshape(B, 1, 1, 1),
                "h": np.arange(H).reshape(1, H, 1, 1), "q": np.arange(M).reshape(1, 1, M, 1),
                "kv": np.arange(N).reshape(1, 1, 1, N)}
        keep = np.broadcast_to(eval_numpy(k.func("mask"), grid, caps), (B, H, M, N))
        nonzero = data != 0
        dims = {n: grid[n] for n in ("B", "H", "Hkv", "M", "N", "D")}
        for q0 in range(0, M, 16):  # a warp's 16 rows, a 128-key tile
            for k0 in range(0, N, 128):
                q1, k1 = min(q0 + 16, M) - 1, min(k0 + 128, N) - 1
                holds = interp._holds(rest_full, dims, caps, B, H, q0, q1, k0, k1)
                same = (keep == nonzero)[:, :, q0:q1 + 1, k0:k1 + 1].all(axis=(2, 3))
                assert not (holds & ~same).any(), (mask, q0, k0)
