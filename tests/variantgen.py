"""Hypothesis strategies for whole attention variants a user might write, and the shapes to run
them at: what tests/gpu/test_generated_gpu.py and tools/gpu_fuzz.py judge on the GPU against
the float64 reference, forward and backward.

exprgen.py draws score and mask formulas over positions; here they are combined with the parts
real variants add: captured tensors (per-head gains and slopes, relative-position tables, per-query
and per-key biases, document ids, lengths), structured masks (causal, windows, chunks, prefixes),
an lse output, f16 inputs, grouped-query heads and a value head dim of its own. Every program is
well formed; kdsl may still refuse one with a located diagnostic (an index it cannot bound),
which the callers count apart."""
from __future__ import annotations

from hypothesis import strategies as st

from exprgen import bool_expr, float_expr

# (declarations, score wrapping the score so far `{s}`, or None; mask term or None). Indices
# stay provably in bounds so that kdsl accepts the call (docs/language.md, captured tensors).
CAPTURES = {
    "gain": (["gain: f32[H]"], "{s} * (0.5 + sigmoid(gain[h]))", None),
    "slopes": (["slopes: f32[H]"], "{s} - 0.05 * abs(slopes[h]) * float(abs(i - j))", None),
    "table": (["table: f32[H, 64]"], "{s} + table[h, (i - j) % 64]", None),
    "clipped_table": (["rel: f32[H, 33]"], "{s} + rel[h, min(max(j - i, -16), 16) + 16]", None),
    "query_bias": (["qb: f32[B, H, M]"], "{s} + 0.5 * qb[b, h, i]", None),
    "key_bias": (["kb: f32[B, N]"], "{s} + kb[b, j]", None),
    # a per-key value times a per-row gain: a key table's raw form (passes/key_table.py)
    "rank_one": (["qg: f32[B, H, M]", "kg: f32[B, N]"], "{s} + qg[b, h, i] * kg[b, j]", None),
    "half_table": (["ht: bf16[32]"], "{s} + ht[(i * 7 + j) % 32]", None),
    "documents": (["doc_q: i32[B, M]", "doc_kv: i32[B, N]"], None, "doc_q[b, i] == doc_kv[b, j]"),
    "lengths": (["kv_len: i32[B]"], None, "j < kv_len[b]"),
    "prefix": (["prefix: i32[B]"], None, "(j <= i or j < prefix[b])"),
    # 1-byte types: a dense boolean mask (torch's attn_mask), byte document ids, an int8 per head
    "dense_mask": (["keep: bool[B, M, N]"], None, "keep[b, i, j]"),
    "byte_documents": (["seg_q: u8[B, M]", "seg_kv: u8[B, N]"], None, "seg_q[b, i] == seg_kv[b, j]"),
    "byte_gain": (["hg: i8[H]"], "{s} * (1.0 + 0.1 * float(hg[h] % 5))", None),
    # a key-padding vector and a per-head dense mask, as bools (whole-tile summaries read them)
    "key_padding": (["valid: bool[B, N]"], None, "valid[b, j]"),
    "head_mask": (["hkeep: bool[B, H, M, N]"], None, "hkeep[b, h, i, j]"),
    # global tokens by flag beside a window (a key mask whose arm is an interval, passes/key_mask.py),
    # and a bitmap per key-value head (its index one of the item's divisions, passes/item_divisions.py)
    "global_keys": (["is_global: bool[B, N]"], None, "is_global[b, j] or abs(i - j) < 64"),
    "kv_head_keep": (["kvkeep: bool[B, Hkv, N]"], None, "kvkeep[b, h // (H // Hkv), j]"),
    # dense tensors the score reads at [..., i, j] (streamed by TMA, passes/streaming.py): a bias,
    # a byte bucket indexing a per-head table (an integer element), and a bias beside a dense
    # byte mask (a ring each; drawn whole, since two parts beside each other are rare)
    "dense_bias": (["dbias: bf16[B, H, M, N]"], "{s} + dbias[b, h, i, j]", None),
    "byte_buckets": (["bucket: u8[M, N]", "btab: f32[H, 16]"], "{s} + btab[h, min(bucket[i, j], 15)]", None),
    "bias_and_mask": (["pbias: f16[H, M, N]", "pkeep: u8[B, M, N]"], "{s} + pbias[h, i, j]", "pkeep[b, i, j] != 1"),
    # a per-head byte mask tested by its byte alone (drawn in runs along each row: the kernel's
    # warps find rows with no zero, passes/stream_mask.py), and a block-sparse table read at
    # each tile's corners (mask_analysis)
    "head_bytes": (["hsel: u8[B, H, M, N]"], None, "hsel[b, h, i, j] > 0"),
    # a per-head i8 level against a threshold: its summary's exact min / max, stopped at the
    # threshold's flip (mask_analysis.summary_saturation)
    "head_levels": (["hlev: i8[B, H, M, N]"], None, "hlev[b, h, i, j] >= 2"),
    "block_table": (["blk: bool[B, H, 16, 16]"], None, "blk[b, h, min(i // 128, 15), min(j // 128, 15)]"),
}
GQA_ONLY = {"kv_head_keep"}  # reads Hkv, which only grouped k and v declare

# Masks over positions as models write them; W, C, P are drawn.
STRUCTURED_MASKS = ["j <= i", "j <= i and i - j < {W}", "abs(i - j) <= {W}", "i // {C} == j // {C} and j <= i",
                    "j <= i + {P}", "j >= i", "(j <= i and i - j < {W}) or j < {P}",
                    "abs(i // {C} - j // {C}) <= 1 and abs(i % {C} - j % {C}) <= 2"]


@st.composite
def structured_mask(draw):
    form = draw(st.sampled_from(STRUCTURED_MASKS))
    return form.format(W=draw(st.sampled_from([1, 7, 64, 100, 128, 300, 1000])),
                       C=draw(st.sampled_from([3, 16, 64, 96, 128, 256])),
                       P=draw(st.sampled_from([0, 1, 5, 64, 129])))


@st.composite
def variants(draw, name: str = "gen"):
    """The text of one attention program."""
    elem = draw(st.sampled_from(["bf16", "bf16", "bf16", "f16"]))
    kv_heads = draw(st.sampled_from(["Hkv", "H"]))
    value_dim = draw(st.sampled_from(["D", "D", "D", "Dv"]))
    parts = draw(st.lists(st.sampled_from(sorted(set(CAPTURES) - (GQA_ONLY if kv_heads == "H" else set()))),
                          max_size=2, unique=True))
    decls = [f"q: {elem}[B, H, M, D]; k: {elem}[B, {kv_heads}, N, D]; v: {elem}[B, {kv_heads}, N, {value_dim}]"]
    if draw(st.integers(0, 3)) == 0:
        decls.append("lse: f32[B, H, M]")
    score = draw(st.one_of(st.none(), float_expr(depth=draw(st.integers(1, 3)))))
    masks = []
    for part in parts:
        more, wrap, mask = CAPTURES[part]
        decls += more
        score = wrap.format(s=f"({score})" if score else "s") if wrap else score
        masks += [mask] if mask else []
    position_mask = draw(st.one_of(st.none(), structured_mask(), bool_expr(depth=2)))
    masks += [position_mask] if position_mask else []
    lines = [f"attention {name} {{", *(f"    {d}" for d in decls)]
    if score:
        lines.append(f"    score(s, b, h, i, j) = {score}")
    if masks:
        lines.append(f"    mask(b, h, i, j) = {' and '.join(f'({m})' for m in masks)}")
    return "\n".join(lines + ["}"]) + "\n"


def _length(short: bool):
    """Lengths at and around tiles, ragged ones, and (short=False) long ones that make the
    forward split keys and the backward split queries over CTAs; multiples of 16 as often as
    ragged ones: rows of whole 16-byte units, which a streamed 1-byte mask needs (else its call
    takes the per-element program; passes/streaming.py)."""
    edges = [1, 2, 15, 63, 64, 65, 127, 128, 129, 191, 192, 255, 256, 257]
    if short:
        return st.one_of(st.sampled_from(edges), st.integers(1, 400), st.integers(1, 25).map(lambda n: 16 * n))
    return st.one_of(st.sampled_from(edges + [1000, 2048, 4095]), st.integers(1, 6000),
                     st.integers(1, 375).map(lambda n: 16 * n))


@st.composite
def shapes(draw, max_elements: int = 1 << 25, head_dims: tuple = ()):
    """(B, H, Hkv, M, N, D, Dv): head dims every multiple of 16 up to 256 (most often the
    common ones; only head_dims where given), few items and long keys (split-KV), decode (M
    of 1 to 16), GQA ratios up to 8. B * H * M * N stays within max_elements (the float64
    reference's score matrix)."""
    common = [64, 128, 64, 128, 256, 96, 192, 32]
    D = draw(st.sampled_from(head_dims) if head_dims else
             st.one_of(st.sampled_from(common), st.integers(1, 16).map(lambda n: 16 * n)))
    Dv = draw(st.one_of(st.just(D), st.sampled_from([64, 128, 256]), st.integers(1, 16).map(lambda n: 16 * n)))
    Hkv = draw(st.integers(1, 4))
    H = Hkv * draw(st.sampled_from([1, 1, 2, 4, 8]))
    B = draw(st.integers(1, 3))
    kind = draw(st.sampled_from(["short", "long", "long", "decode"]))
    M = draw(st.integers(1, 16)) if kind == "decode" else draw(_length(kind == "short"))
    N = draw(_length(kind == "short"))
    while B * H * M * N > max_elements:  # shrink the batch, then the longer length
        if B > 1:
            B -= 1
        elif M >= N:
            M = max(1, M // 2)
        else:
            N = max(1, N // 2)
    return B, H, Hkv, M, N, D, Dv
