"""The whole pass pipeline, in order. Each step says why it sits where it does."""
from __future__ import annotations

from .. import ast, ir
from ..errors import SourceError
from . import (affine_score, exp2_fold, index_floats, invariant_factors, kv_bounds, mask_analysis, mask_facts,
               masked_index, key_table, offset_score, score_bounds, stream_mask, streaming, tile_blocks, tiling, typecheck, warp_map)
from .target import Target

HEAD_DIMS = (64, 128)


def check(program: ast.Program) -> list[ir.Kernel]:
    """Front half: typed IR for every kernel, or a located error. Needs no target."""
    # First: everything after this may assume well-typed, well-shaped kernels.
    kernels = typecheck.check_program(program)
    distinct_entries(kernels, [node.name_span for node in program.kernels])
    # On the score as written, before any pass: the index the user wrote is what the runtime
    # proves (the clamped ones where the mask keeps) and what messages quote.
    return [masked_index.run(k) for k in kernels]


def distinct_entries(kernels: list[ir.Kernel], spans) -> None:
    """No two kernels of a file may generate the same entry point, and so the same output
    files: `attention x` specialised for head dim 64 and `gemm x_d64` would. spans: where
    each kernel is named, for the message."""
    seen: dict[str, str] = {}
    for span, k in zip(spans, kernels):
        for d in head_dims(k):
            symbol = ir.entry_symbol(k.kind, k.name, d, default_value_dim(k, d))
            if symbol in seen:
                raise SourceError(f"kernel '{k.name}' would generate the same entry point and files ({symbol}) "
                                  f"as kernel '{seen[symbol]}'; rename one", span)
            seen[symbol] = k.name


def head_dims(k: ir.Kernel) -> tuple[int, ...]:
    """The q/k head dims a kernel is built for ahead of a call (`kdsl compile`, the
    prebuild at load, `kdsl tune`'s checks): the literal one, else the one an IR file's kernel
    was lowered for (attr head_dim: its tile attrs are that head dim's), else the common ones.
    A call builds its own."""
    if k.kind != "attention":
        return (0,)
    d = k.tensor("q").shape[3]
    if isinstance(d, ir.Const):
        return (d.value,)
    return (k.attr("head_dim"),) if k.attr("head_dim") else HEAD_DIMS


def heads_fold_into_rows(lowered: ir.Kernel) -> bool:
    """Whether the Hopper kernel may run the H / Hkv query heads that share a k/v head as rows
    of one problem (q[b, hkv * G + g, m] is row g * M + m of head hkv, in the same memory;
    runtime/attention_launch.py, interp.py): every function the lowered kernel evaluates is blind to the
    query row and head, and to M and H, which folding changes."""
    return not any(ir.uses(e, v) for _, e in lowered.funcs for v in ("q", "h", "qf", "dqkf", "M", "H"))


def default_value_dim(k: ir.Kernel, head_dim: int) -> int:
    """v's (and out's) head dim that goes with q/k head dim `head_dim` ahead of a call: the
    literal one, else the same as q's (one symbol for both, or a guess a call corrects)."""
    if k.kind != "attention":
        return 0
    dv = k.tensor("v").shape[3]
    return dv.value if isinstance(dv, ir.Const) else head_dim


def lower(k: ir.Kernel, target: Target, head_dim: int = 0, value_dim: int = 0) -> ir.Kernel:
    """Back half: one kernel, specialised for a target (and q/k and v head dims), ready for
    codegen."""
    if k.kind == "attention":
        k = k.with_attrs(head_dim=head_dim, value_dim=value_dim or default_value_dim(k, head_dim))
    # Before mask analysis: the folded score is what the kernel evaluates per element.
    k = exp2_fold.run(k)
    # On the folded score: factors the same for every element gather into one product.
    k = invariant_factors.run(k)
    # On the folded score, whose float(i - j) terms are now final: positions become floats once.
    k = index_floats.run(k)
    # On the positions as floats: |q - kv| loses its abs where the mask fixes the sign.
    k = mask_facts.run(k)
    # On the final score's values (later passes only regroup it): a narrow range fixes the
    # softmax's reference, and the running max goes.
    k = score_bounds.run(k)
    # Independent of tile sizes: emits tile predicates over symbolic bounds q0..k1.
    k = mask_analysis.run(k)
    # On the final score: which captured tensor's tiles can travel with K (by TMA).
    k = streaming.run(k)
    # Tile sizes depend on the target and head dim, and on the streamed tensor's ring.
    k = tiling.run(k, target)
    # On the chosen tile width (kv % C solves only for C a multiple of it): a partial tile's
    # mask as one interval of keys per row, when the mask has one.
    k = kv_bounds.run(k)
    # On the ring the tiling kept (a stream it dropped is no stream): the tiles on which a
    # streamed byte mask is its byte's test alone, for the kernel's warps to test their rows.
    k = stream_mask.run(k)
    # On the final score, for the Hopper kernel only: F * (qk + slope * col) + base, when the
    # score is affine in the positions (one FFMA an element over the scaled dot product).
    k = affine_score.run(k)
    # Beside it, for scores of the offset q - kv that are not affine, when the tiling took the
    # table (attr offset_table): the score's offset part as a function of (b, h, d).
    k = offset_score.run(k)
    # Likewise a part read per key (s + kbias[b, j]), when the tiling took its table (attr
    # key_table): that part over (b, h, kv), and the score reading it as kt.
    k = key_table.run(k)
    # Last of the score's rewrites, on the chosen tile width and only where none of the above
    # took the score apart: a key block `kv // c` the tile never straddles, read once a tile.
    k = tile_blocks.run(k)
    # Warp roles follow from the tile shape.
    k = warp_map.run(k, target)
    return k.with_attrs(arch=target.arch)
