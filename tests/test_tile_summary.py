"""Tile summaries of masks that read data: mask analysis bounds q-only / kv-only data by its
min and max over a tile, (qmin e) ... (kvmax e), and the tile predicates built on them must be
sound for any data; the interpreter evaluates them as the GPU's summary kernel does."""
import numpy as np
from hypothesis import given, settings, strategies as st

from kdsl import interp, ir
from kdsl.grammar import parse
from kdsl.passes import mask_analysis, pipeline, typecheck
from kdsl.passes.target import get_target
from kdsl.runtime.summary import Layout
from kdsl.semantics import eval_numpy

from conftest import ROOT

DECLS = """attention t {
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    doc_q: i32[B, M]
    doc_kv: i32[B, N]
    lens: i32[B]
    tbl: i32[4]
    head_doc: i32[H, N]
    mask(b, h, i, j) = %s
}
"""
DATA = ["doc_q[b, i]", "doc_kv[b, j]", "lens[b]", "tbl[doc_q[b, i]]", "head_doc[h, j]", "(doc_q[b, i] // 2)",
        "(doc_kv[b, j] + i)", "(doc_q[b, i] - doc_kv[b, j])"]
PLAIN = ["i", "j", "(i - j)", "(i // 64)", "3", "(j % 96)"]
CMP = ["==", "!=", "<", "<=", ">", ">="]


@st.composite
def data_mask(draw, depth=2):
    if depth == 0 or draw(st.booleans()):
        a = draw(st.sampled_from(DATA + PLAIN))
        b = draw(st.sampled_from(DATA + PLAIN))
        return f"{a} {draw(st.sampled_from(CMP))} {b}"
    form = draw(st.sampled_from(["({a} and {b})", "({a} or {b})", "not ({a})"]))
    return form.format(a=draw(data_mask(depth - 1)), b=draw(data_mask(depth - 1)) if "{b}" in form else "")


def _kernel(mask: str) -> ir.Kernel:
    return mask_analysis.run(typecheck.check_program(parse(DECLS % mask, "t.kd"))[0])


def _captures(rng, B, H, M, N, sorted_ids):
    doc_q = rng.integers(0, 4, (B, M)).astype(np.int32)
    doc_kv = rng.integers(0, 4, (B, N)).astype(np.int32)
    if sorted_ids:
        doc_q.sort(axis=1)
        doc_kv.sort(axis=1)
    return {"doc_q": doc_q, "doc_kv": doc_kv, "lens": rng.integers(0, N + 1, (B,)).astype(np.int32),
            "tbl": rng.integers(-5, 300, (4,)).astype(np.int32),
            "head_doc": np.sort(rng.integers(0, 3, (H, N)), axis=1).astype(np.int32)}


@settings(max_examples=80, deadline=None)
@given(data_mask(), st.integers(0, 2**32 - 1), st.booleans())
def test_tile_predicates_are_sound_for_any_data(mask, seed, sorted_ids):
    """'empty' blocks keep no element and 'full' blocks mask none, whatever the captured data."""
    k = _kernel(mask)
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
            cls = interp._classify(k.func("tile_empty"), k.func("tile_full"), dims, caps, B, H, q0, q1, k0, k1)
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
