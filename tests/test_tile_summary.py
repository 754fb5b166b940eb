"""Tile summaries of masks that read data: mask analysis bounds q-only / kv-only data by its
min and max over a tile, (qmin e) ... (kvmax e), and the tile predicates built on them must be
sound for any data; the interpreter evaluates them as the GPU's summary kernel does."""
import os

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from kdsl import interp, ir
from kdsl.grammar import parse
from kdsl.passes import mask_analysis, pipeline, typecheck
from kdsl.passes.target import get_target
from kdsl.runtime.summary import Layout
from kdsl.semantics import eval_numpy

from conftest import ROOT

@pytest.fixture(autouse=True)
def whole_block_summaries(monkeypatch):
    """Whole-block summaries (mask_analysis.whole_tiles) on, whatever the default."""
    monkeypatch.setenv("KDSL_TILE_SUMMARY_2D", "1")


DECLS = """attention t {
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    doc_q: i32[B, M]
    doc_kv: i32[B, N]
    lens: i32[B]
    tbl: i32[4]
    head_doc: i32[H, N]
    keep: bool[B, M, N]
    ikeep: i32[B, M, N]
    hkeep: bool[B, H, M, N]
    rules: i32[4, 4]
    valid: bool[B, N]
    hbytes: u8[B, H, M, N]
    mask(b, h, i, j) = %s
}
"""
DATA = ["doc_q[b, i]", "doc_kv[b, j]", "lens[b]", "tbl[doc_q[b, i]]", "head_doc[h, j]", "(doc_q[b, i] // 2)",
        "(doc_kv[b, j] + i)", "(doc_q[b, i] - doc_kv[b, j])", "ikeep[b, i, j]", "rules[doc_q[b, i], doc_kv[b, j]]",
        "(ikeep[b, i, j] + j)", "(i + lens[b])", "max(i - 64, lens[b])", "(lens[b] - j // 2)", "min(j, tbl[b])", "((i - j) * tbl[b])", "(j // max(tbl[b], 1))"]
PLAIN = ["i", "j", "(i - j)", "(i // 64)", "3", "(j % 96)"]
CMP = ["==", "!=", "<", "<=", ">", ">="]
FLAGS = ["keep[b, i, j]", "hkeep[b, h, i, j]", "valid[b, j]"]  # bool elements, bounded as 0 / 1


@st.composite
def data_mask(draw, depth=2):
    if draw(st.integers(0, 4)) == 0:
        return draw(st.sampled_from(FLAGS))
    if depth == 0 or draw(st.booleans()):
        a = draw(st.sampled_from(DATA + PLAIN))
        b = draw(st.sampled_from(DATA + PLAIN))
        return f"{a} {draw(st.sampled_from(CMP))} {b}"
    form = draw(st.sampled_from(["({a} and {b})", "({a} or {b})", "not ({a})"]))
    return form.format(a=draw(data_mask(depth - 1)), b=draw(data_mask(depth - 1)) if "{b}" in form else "")


def _kernel(mask: str, heads: bool = False) -> ir.Kernel:
    """heads: per-head data bounded over whole blocks too (KDSL_TILE_SUMMARY_HEADS=1)."""
    saved = os.environ.get("KDSL_TILE_SUMMARY_HEADS")
    os.environ["KDSL_TILE_SUMMARY_HEADS"] = "1" if heads else "0"
    try:
        return mask_analysis.run(typecheck.check_program(parse(DECLS % mask, "t.kd"))[0])
    finally:
        if saved is None:
            del os.environ["KDSL_TILE_SUMMARY_HEADS"]
        else:
            os.environ["KDSL_TILE_SUMMARY_HEADS"] = saved


def _captures(rng, B, H, M, N, sorted_ids):
    doc_q = rng.integers(0, 4, (B, M)).astype(np.int32)
    doc_kv = rng.integers(0, 4, (B, N)).astype(np.int32)
    if sorted_ids:
        doc_q.sort(axis=1)
        doc_kv.sort(axis=1)
    # dense masks: block-diagonal over the documents (whole tiles empty and full) when the ids
    # are sorted, with a few elements flipped (noise), else random
    same = doc_q[:, :, None] == doc_kv[:, None, :]
    noise = rng.random((B, M, N)) < (0.001 if sorted_ids else 0.5)
    keep = same ^ noise if sorted_ids else noise
    return {"doc_q": doc_q, "doc_kv": doc_kv, "lens": rng.integers(0, N + 1, (B,)).astype(np.int32),
            "tbl": rng.integers(-5, 300, (4,)).astype(np.int32),
            "head_doc": np.sort(rng.integers(0, 3, (H, N)), axis=1).astype(np.int32),
            "keep": keep, "ikeep": np.where(keep, rng.integers(1, 5, keep.shape), 0).astype(np.int32),
            "hkeep": np.broadcast_to(keep[:, None], (B, H, M, N)).copy(), "rules": rng.integers(0, 2, (4, 4)).astype(np.int32),
            "valid": np.arange(N)[None] < rng.integers(0, N + 1, (B, 1))}


@settings(max_examples=120, deadline=None)
@given(data_mask(), st.integers(0, 2**32 - 1), st.booleans(), st.booleans())
def test_tile_predicates_are_sound_for_any_data(mask, seed, sorted_ids, heads):
    """'empty' blocks keep no element and 'full' blocks mask none, whatever the captured data."""
    k = _kernel(mask, heads)
    rng = np.random.default_rng(seed)
    B, H, M, N = 2, 3, int(rng.integers(1, 300)), int(rng.integers(1, 300))
    caps = _captures(rng, B, H, M, N, sorted_ids)
    dims = {"B": B, "H": H, "Hkv": H, "M": M, "N": N, "D": 64}
    grid = {**dims, "b": np.arange(B).reshape(B, 1, 1, 1), "h": np.arange(H).reshape(1, H, 1, 1),
            "q": np.arange(M).reshape(1, 1, M, 1), "kv": np.arange(N).reshape(1, 1, 1, N)}
    keep = np.broadcast_to(eval_numpy(k.func("mask"), grid, caps), (B, H, M, N))
    for q0 in range(0, M, 64):
        for k0 in range(0, N, 96):
            q1, k1 = min(q0 + 64, M) - 1, min(k0 + 96, N) - 1
            cls = interp._classify(k.func("tile_empty"), k.func("tile_full"), dims, caps, B, H, q0, q1, k0, k1,
                                   interp.summary_stops(k))  # as the GPU's summary stops
            block = keep[:, :, q0:q1 + 1, k0:k1 + 1]
            assert not ((cls == "empty") & block.any(axis=(2, 3))).any(), (mask, q0, k0)
            assert not ((cls == "full") & ~block.all(axis=(2, 3))).any(), (mask, q0, k0)


def test_document_mask_skips_other_documents_and_drops_the_check_inside_one():
    k = mask_analysis.run(typecheck.check_program(parse((ROOT / "samples" / "document_mask.kd").read_text(),
                                                        "document_mask.kd"))[0])
    assert k.attr("mask_tiles") == "tile-summary"
    # two documents of 256 tokens: tiles across them are empty, below-diagonal tiles inside full
    ids = np.repeat(np.arange(2, dtype=np.int32), 256)[None]
    dims = {"B": 1, "H": 1, "Hkv": 1, "M": 512, "N": 512, "D": 64}
    caps = {"doc_q": ids, "doc_kv": ids}
    cls = lambda q0, k0: interp._classify(k.func("tile_empty"), k.func("tile_full"), dims, caps, 1, 1,
                                          q0, q0 + 127, k0, k0 + 127)[0, 0]
    assert cls(256, 0) == "empty"      # below the diagonal, other document: skipped
    assert cls(384, 256) == "full"     # inside the second document, below the diagonal
    assert cls(128, 128) == "partial"  # on the diagonal
    assert cls(0, 256) == "empty"      # above the diagonal


def test_data_independent_of_q_and_kv_is_exact_per_block():
    """prefix[b] is one value per block: the predicate loads it, no summary needed."""
    k = _kernel("j <= i or j < lens[b]")
    assert k.attr("mask_tiles") == "data-dependent"
    assert mask_analysis.summary_slots(k) == []
    dims = {"B": 1, "H": 1, "Hkv": 1, "M": 512, "N": 512, "D": 64}
    caps = {"lens": np.array([300], np.int32)}
    cls = lambda q0, k0: interp._classify(k.func("tile_empty"), k.func("tile_full"), dims, caps, 1, 1,
                                          q0, q0 + 127, k0, k0 + 127)[0, 0]
    assert cls(0, 128) == "full"    # every key < 300
    assert cls(0, 384) == "empty"   # above the diagonal and past the prefix
    assert cls(0, 256) == "partial"


@pytest.mark.parametrize("mask", ["j <= i + lens[b]", "j <= i and j >= max(i - 255, lens[b])",
                                  "j // 2 + lens[b] <= i", "j <= i and (i - j) * lens[b] < 300",
                                  "(j + lens[b]) % 96 < 40 and j <= i"])
def test_data_moving_one_way_along_a_position_is_bounded_at_the_blocks_edges(mask, monkeypatch):
    """`i + off[b]` (a KV cache's offset), `max(i - 255, start[b])` (a window clipped at a start):
    a value of data read at neither position that moves one way along one (monotone.step) takes
    its extremes at the block's first and last row or key, exactly, with no tile summary; the
    classes are those of every element. KDSL_MONOTONE_BOUNDS=0: the summary's qmin / qmax. A
    product with a value the same over the block of either sign (`(i - j) * stride[h]`) is bounded
    by the products with the other factor's bounds, in the order its sign gives (no summary over
    whole blocks). A remainder of such a value by a divisor >= 1 the same over the block (`(j +
    off[b]) % 96`) is bounded by its true min and max too (test below)."""
    k = _kernel(mask)
    assert k.attr("mask_tiles") == "data-dependent" and mask_analysis.summary_slots(k) == []
    B, H, M, N = 2, 1, 512, 640
    dims = {"B": B, "H": H, "Hkv": H, "M": M, "N": N, "D": 64}
    rng = np.random.default_rng()
    caps = {"lens": rng.integers(-100, N + 100, (B,)).astype(np.int32)}
    grid = {**dims, "b": np.arange(B).reshape(B, 1, 1, 1), "h": np.zeros((1, 1, 1, 1), int),
            "q": np.arange(M).reshape(1, 1, M, 1), "kv": np.arange(N).reshape(1, 1, 1, N)}
    keep = np.broadcast_to(eval_numpy(k.func("mask"), grid, caps), (B, H, M, N))
    for q0 in range(0, M, 64):
        for k0 in range(0, N, 64):
            cls = interp._classify(k.func("tile_empty"), k.func("tile_full"), dims, caps, B, H, q0, q0 + 63, k0, k0 + 63)
            block = keep[:, :, q0:q0 + 64, k0:k0 + 64]
            exact = np.where(~block.any(axis=(2, 3)), "empty", np.where(block.all(axis=(2, 3)), "full", "partial"))
            assert (cls == exact).all(), (mask, q0, k0, cls, exact)
    if "*" not in mask:
        monkeypatch.setenv("KDSL_MONOTONE_BOUNDS", "0")
        assert _kernel(mask).attr("mask_tiles") == "tile-summary"


@pytest.mark.parametrize("mask", ["abs(i % max(lens[b], 1) - j % max(lens[b], 1)) <= 2",
                                  "i % max(lens[b], 1) >= j % max(lens[b], 1) and j <= i"])
def test_a_remainder_by_data_is_bounded_without_a_summary_as_the_summary_bounds_it(mask, monkeypatch):
    """`i % max(width[0], 1)` (an image of captured width): the remainder of a value moving by
    steps of at most 1 along one position, by a divisor >= 1 read once per item, is bounded by
    its min and max over the block with no tile summary: its edges' remainders within one
    period, 0 and divisor - 1 across one. Those are what the summary computed, so the classes
    are the summary's (KDSL_MONOTONE_BOUNDS=0), sound, for any data. Not exact: across a period
    the remainders of a 64-row tile at width 100 are 64..99 and 0..27, and their hull decides
    less than the two pieces would."""
    k = _kernel(mask)
    assert k.attr("mask_tiles") == "data-dependent" and mask_analysis.summary_slots(k) == []
    monkeypatch.setenv("KDSL_MONOTONE_BOUNDS", "0")
    summarised = _kernel(mask)
    assert summarised.attr("mask_tiles") == "tile-summary"
    B, M, N = 3, 700, 600
    rng = np.random.default_rng()
    # batch 0's width 500: tiles inside one period on both sides, which the bounds decide
    caps = {"lens": np.concatenate([[500], rng.integers(-5, 700, (B - 1,))]).astype(np.int32)}
    grid = {"B": B, "H": 1, "Hkv": 1, "M": M, "N": N, "D": 64, "b": np.arange(B).reshape(B, 1, 1, 1),
            "h": np.zeros((1, 1, 1, 1), int), "q": np.arange(M).reshape(1, 1, M, 1),
            "kv": np.arange(N).reshape(1, 1, 1, N)}
    keep = np.broadcast_to(eval_numpy(k.func("mask"), grid, caps), (B, 1, M, N))
    dims = {n: grid[n] for n in ("B", "H", "Hkv", "M", "N", "D")}
    decided = 0
    for bm, bn in ((64, 64), (128, 176)):
        for q0 in range(0, M, bm):
            for k0 in range(0, N, bn):
                tile = (dims, caps, B, 1, q0, min(q0 + bm, M) - 1, k0, min(k0 + bn, N) - 1)
                got = interp._classify(k.func("tile_empty"), k.func("tile_full"), *tile)
                assert (got == interp._classify(summarised.func("tile_empty"), summarised.func("tile_full"), *tile)).all()
                block = keep[:, :, q0:q0 + bm, k0:k0 + bn]
                assert not ((got == "empty") & block.any(axis=(2, 3))).any(), (mask, q0, k0)
                assert not ((got == "full") & ~block.all(axis=(2, 3))).any(), (mask, q0, k0)
                decided += int((got[0] != "partial").sum())
    assert decided > 0


def test_summary_ops_round_trip_and_lay_out_per_slot():
    k = pipeline.lower(_kernel("doc_q[b, i] == head_doc[h, j]"), get_target("sm_90a"), 128)
    assert ir.parse_ir(ir.print_ir(k)) == [k]
    slots = mask_analysis.summary_slots(k)
    assert sorted(ir.TILE_REDUCTIONS[s.op][0] for s in slots) == ["kv", "q"]
    layout = Layout.of(k, B=3, H=5, M=300, N=700)
    per_slot = {ir.TILE_REDUCTIONS[s.op][0]: n for s, n in zip(slots, layout.entries)}
    assert per_slot == {"q": 3 * 3, "kv": 5 * 6}  # doc_q per b, head_doc per h; tiles of 128
    assert layout.ints == 2 * (9 + 30)


def test_generated_cuda_has_a_summary_entry_only_when_needed():
    from kdsl.codegen.emit import generate
    with_summary = generate(pipeline.lower(_kernel("doc_q[b, i] == doc_kv[b, j]"), get_target("sm_90a"), 64))
    assert "_summary(" in with_summary.source and "tile_summary<Variant, 1>" in with_summary.source
    plain = generate(pipeline.lower(_kernel("j <= i"), get_target("sm_90a"), 64))
    assert "_summary(" not in plain.source


def test_the_summary_kernels_parameters_follow_the_attention_entrys_from_b_on():
    """summary.pack (the forward's and the backward's summary launches) lays out the entry
    NAME_summary's parameters as the forward's own pack has them from B on: B H Hkv M N,
    scale_log2 scale, capture pointers, capture-only dims, the buffer; pointers per call."""
    import ctypes
    from kdsl.runtime import summary
    from kdsl.runtime.driver import ArgPack
    p = summary.pack(2, 3, 1, 300, 700, 0.18, 0.125, 2, [7, 9])
    kinds = ["i32"] * 5 + ["f32"] * 2 + ["ptr"] * 2 + ["i32"] * 2 + ["ptr"]
    want = ArgPack(kinds, [2, 3, 1, 300, 700, 0.18, 0.125, None, None, 7, 9, None], [7, 8, 11])
    assert [type(s) for s in p.slots] == [type(s) for s in want.slots]
    assert [s.value for s in p.slots] == [s.value for s in want.slots]
    assert len(p.pointers) == 3
    p.pointers[:] = [11, 12, 13]  # the per-call pointers land in the capture and buffer slots
    assert [p.slots[i].value for i in (7, 8, 11)] == [11, 12, 13] and isinstance(p.slots[11], ctypes.c_uint64)


def _classes(k, caps, B, M, N, bm, bn):
    dims = {"B": B, "H": 1, "Hkv": 1, "M": M, "N": N, "D": 64}
    return np.array([[interp._classify(k.func("tile_empty"), k.func("tile_full"), dims, caps, B, 1, q0,
                                       min(q0 + bm, M) - 1, k0, min(k0 + bn, N) - 1)[0, 0]
                      for k0 in range(0, N, bn)] for q0 in range(0, M, bm)])


@pytest.mark.parametrize("mask", ["keep[b, i, j]", "ikeep[b, i, j] != 0", "rules[doc_q[b, i], doc_kv[b, j]] > 0"])
def test_a_dense_block_diagonal_mask_skips_its_empty_blocks_and_runs_its_full_ones_unchecked(mask):
    """torch's attn_mask (bool or int) and a gather through a table of rules, shared by the
    heads: bounded over whole blocks by the (tmin e) / (tmax e) summary."""
    k = _kernel(mask)
    assert k.attr("mask_tiles") == "tile-summary"
    assert {ir.TILE_REDUCTIONS[s.op][0] for s in mask_analysis.summary_slots(k)} == {"tile"}
    ids = np.repeat(np.arange(2, dtype=np.int32), 256)[None]
    keep = ids[:, :, None] == ids[:, None, :]
    caps = {"keep": keep, "ikeep": keep.astype(np.int32), "doc_q": ids, "doc_kv": ids,
            "rules": np.eye(4, dtype=np.int32)}
    cls = _classes(k, caps, 1, 512, 512, 128, 128)
    want = np.where(np.equal.outer(np.arange(4) // 2, np.arange(4) // 2), "full", "empty")
    assert (cls == want).all(), cls
    caps["keep"] = keep.copy()
    caps["keep"][0, 5, 300] = True  # one stray element: its block is partial, the rest as before
    caps["ikeep"] = caps["keep"].astype(np.int32)
    caps["rules"] = np.ones((4, 4), np.int32) - np.eye(4, dtype=np.int32)  # the rules swapped: the blocks swap
    cls = _classes(k, caps, 1, 512, 512, 128, 128)
    if "rules" in mask:  # other documents' blocks are the full ones now
        assert (cls == np.where(want == "full", "empty", "full")).all(), cls
    else:
        assert cls[0, 2] == "partial" and (np.delete(cls.ravel(), 2) == np.delete(want.ravel(), 2)).all(), cls


def test_whole_block_summaries_stay_off_for_per_head_data_a_per_element_score_and_the_switch(monkeypatch):
    assert mask_analysis.summary_slots(_kernel("hkeep[b, h, i, j]")) == []  # as much to read as the kernel
    scored = DECLS.replace("mask(b, h, i, j)", "bias: f32[B, M, N]\n    score(s, b, h, i, j) = s + bias[b, i, j]\n"
                           "    mask(b, h, i, j)") % "keep[b, i, j]"
    checked = typecheck.check_program(parse(scored, "t.kd"))[0]
    # by default beside the score's load in the forward alone: the backward spilled beside it
    assert [ir.TILE_REDUCTIONS[s.op][0] for s in mask_analysis.summary_slots(mask_analysis.run(checked))] == ["tile"]
    k = mask_analysis.run(checked.with_attrs(lowered_for="backward"))
    assert not mask_analysis.whole_tiles(k) and mask_analysis.summary_slots(k) == []
    monkeypatch.setenv("KDSL_SUMMARY_BESIDE_LOADS", "1")  # in both passes
    assert len(mask_analysis.summary_slots(mask_analysis.run(checked.with_attrs(lowered_for="backward")))) == 1
    monkeypatch.setenv("KDSL_SUMMARY_BESIDE_LOADS", "0")  # in neither
    assert mask_analysis.summary_slots(mask_analysis.run(checked)) == []
    monkeypatch.delenv("KDSL_SUMMARY_BESIDE_LOADS")
    assert [ir.TILE_REDUCTIONS[s.op][0] for s in mask_analysis.summary_slots(_kernel("valid[b, j]"))] == ["kv"]
    monkeypatch.setenv("KDSL_TILE_SUMMARY_2D", "0")
    k = _kernel("keep[b, i, j] and j <= i")
    assert mask_analysis.summary_slots(k) == [] and k.attr("mask_tiles") == "data-dependent"


def test_a_whole_block_slot_lays_out_one_entry_per_block_and_b():
    k = pipeline.lower(_kernel("keep[b, i, j] and doc_q[b, i] >= 0"), get_target("sm_90a"), 128)
    slots = mask_analysis.summary_slots(k)
    layout = Layout.of(k, B=3, H=5, M=300, N=700)
    bm, bn = k.attr("tile_m"), k.attr("tile_n")
    per_slot = {ir.TILE_REDUCTIONS[s.op][0]: n for s, n in zip(slots, layout.entries)}
    assert per_slot == {"tile": 3 * -(-300 // bm) * -(-700 // bn), "q": 3 * -(-300 // bm)}
    # the summary kernel's warps: one a row entry and a 1-byte whole-block entry (a bool), each
    # slot padded to whole blocks of 8 warps (attention_summary.cuh summary_warps)
    pad = lambda n: -(-n // 8) * 8  # noqa: E731
    assert layout.warps == pad(3 * -(-300 // bm)) + pad(per_slot["tile"])
    # 8 (a block) a whole-block entry read element by element (an i32)
    wide = pipeline.lower(_kernel("ikeep[b, i, j] != 0 and doc_q[b, i] >= 0"), get_target("sm_90a"), 128)
    wide_layout = Layout.of(wide, B=3, H=5, M=300, N=700)
    tile_entries, q_entries = wide_layout.entries  # the slots in the order the predicates read them
    assert wide_layout.warps == pad(q_entries) + 8 * tile_entries
    from kdsl.codegen.emit import generate
    src = generate(k).source
    tile_bit = next(i for i, s in enumerate(slots) if ir.TILE_REDUCTIONS[s.op][0] == "tile")
    assert f"kSummaryOnTile = {1 << tile_bit}" in src


def test_the_interpreter_meets_empty_and_full_blocks_of_a_dense_mask_and_matches_the_reference(monkeypatch):
    """A block-diagonal bool attn_mask over padded documents, through the tiled program (the
    classes as the GPU's whole-block summary gives them) against the float64 reference."""
    torch = pytest.importorskip("torch")
    from kdsl import reference
    from kdsl.testing import ATTENTION_TOL, rel_frobenius
    src = """attention dense {
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    keep: bool[B, M, N]
    mask(b, h, i, j) = keep[b, i, j]
}"""
    kir = typecheck.check_program(parse(src, "dense.kd"))[0]
    B, H, M, N, D = 2, 2, 520, 520, 64
    # documents of 384 and 136 tokens: whole 128- or 192-row tiles inside the first are full
    ids = np.broadcast_to(np.repeat(np.arange(2), [384, 136]), (B, M))
    keep = (ids[:, :, None] == ids[:, None, :]) & (np.arange(N) < 450)[None, None]  # keys past 450: padding
    seen = []
    real = interp._classify
    monkeypatch.setattr(interp, "_classify", lambda *a: seen.append(real(*a)) or seen[-1])
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(B, H, n, D, generator=gen).to(torch.bfloat16) for n in (M, N, N))
    out, lse = interp.attention(kir, *(x.float().numpy() for x in (q, k, v)), {"keep": keep})
    ref, _ = reference.attention(kir, q, k, v, {"keep": torch.from_numpy(keep)})
    assert rel_frobenius(torch.from_numpy(out), ref) < ATTENTION_TOL
    classes = np.concatenate([c.ravel() for c in seen])
    assert {"empty", "full", "partial"} <= set(classes), set(classes)


def test_the_summary_kernel_skips_blocks_empty_by_position_and_stops_at_a_bool_elements_ends():
    """A causal dense mask: blocks above the diagonal are never read by the kernels, so the
    summary kernel does not read their data; a bool element's slot ranges over [0, 1] only."""
    from kdsl.codegen.emit import generate
    src = generate(pipeline.lower(_kernel("j <= i and ikeep[b, i, j] != 0"), get_target("sm_90a"), 64)).source
    skip = src[src.index("summary_skip("):]
    assert "(k0 > q1)" in skip[:skip.index("}")], skip[:300]
    src = generate(pipeline.lower(_kernel("keep[b, i, j]"), get_target("sm_90a"), 64)).source
    assert "slot == 0 ? 0 : kdsl::kIntMin" in src and "slot == 0 ? 1 : kdsl::kIntMax" in src
    skip = src[src.index("summary_skip("):]
    assert "return false;" in skip[:skip.index("}")]


def test_per_head_dense_masks_take_whole_block_summaries_behind_their_switch():
    """KDSL_TILE_SUMMARY_HEADS=1: keep[b, h, i, j] gets one entry per (b, h, block); each head's
    blocks are classed from its own data."""
    assert mask_analysis.summary_slots(_kernel("hkeep[b, h, i, j]")) == []
    k = _kernel("hkeep[b, h, i, j]", heads=True)
    assert [ir.TILE_REDUCTIONS[s.op][0] for s in mask_analysis.summary_slots(k)] == ["tile"]
    low = pipeline.lower(k, get_target("sm_90a"), 128)
    layout = Layout.of(low, B=2, H=3, M=300, N=700)
    assert layout.entries == (2 * 3 * -(-300 // low.attr("tile_m")) * -(-700 // low.attr("tile_n")),)
    B, H, M, N = 1, 2, 256, 256
    hkeep = np.zeros((B, H, M, N), bool)
    hkeep[0, 0, :128, :128] = True   # head 0: one full block, the rest empty
    hkeep[0, 1] = True               # head 1: all full but one stray element
    hkeep[0, 1, 200, 10] = False
    dims = {"B": B, "H": H, "Hkv": H, "M": M, "N": N, "D": 64}
    cls = lambda q0, k0: interp._classify(k.func("tile_empty"), k.func("tile_full"), dims, {"hkeep": hkeep}, B, H,
                                          q0, q0 + 127, k0, k0 + 127)[0]
    assert list(cls(0, 0)) == ["full", "full"] and list(cls(0, 128)) == ["empty", "full"]
    assert list(cls(128, 0)) == ["empty", "partial"]


@pytest.mark.parametrize("mask, stops", [
    ("keep[b, i, j]", (0, 1)),                      # a bool element: its own ends
    ("hkeep[b, h, i, j] and j <= i", (0, 1)),
    ("ikeep[b, i, j] > 0", (0, 1)),                 # any byte or int above 0: met 0 and 1, decided
    ("ikeep[b, i, j] != 0", (-1, 0)),               # != flips on both sides of 0
    ("ikeep[b, i, j] == 7", (6, 7)),                # min and max apart: not all 7
    ("hbytes[b, h, i, j] != 0", (0, 1)),            # a u8's floor is 0; min == max undecided at (0, 0)
    ("hbytes[b, h, i, j] > 200", (200, 201)),
    ("ikeep[b, i, j] >= 3 and ikeep[b, i, j] < 9", (2, 9)),
    ("ikeep[b, i, j] <= -4", (-4, -3)),
    ("ikeep[b, i, j] > j", (None, None)),           # compared with a position: read to the end
    ("(ikeep[b, i, j] + j) > 3", (None, None)),
])
def test_a_whole_block_slot_stops_where_its_comparisons_with_constants_are_decided(mask, stops):
    """mask_analysis.summary_saturation: the summary kernel's floor and ceiling per slot."""
    k = _kernel(mask, heads=True)
    tile = [s for s in mask_analysis.summary_slots(k) if ir.TILE_REDUCTIONS[s.op][0] == "tile"]
    assert tile, mask
    assert mask_analysis.summary_saturation(k, tile[0]) == stops


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(CMP), st.integers(-6, 6), st.sampled_from(CMP), st.integers(-6, 6), st.booleans(),
       st.integers(0, 2**32 - 1))
def test_a_summary_stopped_at_its_floor_and_ceiling_classes_blocks_as_the_whole_read_does(op1, c1, op2, c2, both,
                                                                                         seed):
    """For any block whose min is at or below the floor and max at or above the ceiling, the tile
    predicates give the same answer with (floor, ceiling) as with the true (min, max)."""
    mask = f"ikeep[b, i, j] {op1} {c1}" + (f" and ikeep[b, i, j] {op2} {c2}" if both else "")
    k = _kernel(mask)
    slot = [s for s in mask_analysis.summary_slots(k) if ir.TILE_REDUCTIONS[s.op][0] == "tile"]
    if not slot:  # a mask decided without the data (e.g. x < 3 and x > 5)
        return
    floor, ceiling = mask_analysis.summary_saturation(k, slot[0])
    assert floor is not None and ceiling is not None
    rng = np.random.default_rng(seed)
    B, M, N = 1, 128, 128
    dims = {"B": B, "H": 1, "Hkv": 1, "M": M, "N": N, "D": 64}
    for _ in range(8):
        ikeep = rng.integers(-12, 13, (B, M, N)).astype(np.int32)
        ikeep[0, 0, 0], ikeep[0, 0, 1] = floor - rng.integers(0, 4), ceiling + rng.integers(0, 4)
        caps = {"ikeep": ikeep}
        whole = interp._classify(k.func("tile_empty"), k.func("tile_full"), dims, caps, B, 1, 0, M - 1, 0, N - 1)
        stopped = interp._classify(k.func("tile_empty"), k.func("tile_full"), dims, caps, B, 1, 0, M - 1, 0, N - 1,
                                   interp.summary_stops(k))
        assert (whole == stopped).all(), (mask, floor, ceiling)


def test_a_one_byte_slot_at_q_kv_is_read_16_bytes_a_thread():
    """emit._byte_row: a bool / u8 / i8 element at [..., q, kv] takes summarize_warp_bytes (its
    kind and row pointer in the Variant); an i32 element does not."""
    from kdsl.codegen.emit import generate
    cases = {"keep[b, i, j]": 1, "hkeep[b, h, i, j]": 1, "ikeep[b, i, j] != 0": 0,
             "hbytes[b, h, i, j] > 0": 1,      # a u8 tested against zero only: read as a bool
             "hbytes[b, h, i, j] >= 1 and j <= i": 1,
             "hbytes[b, h, i, j] > 100": 2,    # its exact min and max
             "hbytes[b, h, i, j] != 0": 2,     # min == max asked: 1 and 2 are not one value
             "hbytes[b, h, i, j] > 0 and hbytes[b, h, i, j] < 9": 2}
    for mask, kind in cases.items():
        src = generate(pipeline.lower(_kernel(mask, heads=True), get_target("sm_90a"), 128)).source
        kinds = src[src.index("int summary_byte_kind("):]
        assert f"slot == 0 ? {kind} : 0" in kinds[:kinds.index("}")], (mask, kinds[:200])
