"""The wgmma backward copying a dense mask's tiles into shared memory (attention_bwd_stream.cuh),
with no GPU: which rings the plan keeps and the room they take (emit_backward.backward_plan_for), the
generated define, the per-element program's option, and the SASS of both programs (NVRTC and
cuobjdump). tests/gpu/test_backward_stream_gpu.py runs them."""
import pytest

import kdsl
from kdsl import sass
from kdsl.codegen import emit_backward
from kdsl.passes import pipeline
from kdsl.passes.target import get_target
from kdsl.runtime.compiler import build
from kdsl.runtime.programs import NO_STREAM_OPTION, Program

from stream_masks import SOURCE

MOD = kdsl.compile(SOURCE)
SM90 = get_target("sm_90a")


def _plan(name, d, arch="sm_90a"):
    target = get_target(arch)
    return emit_backward.backward_plan_for(emit_backward.backward_kernel(pipeline.lower(MOD.ir[name], target, d), target), target)


@pytest.mark.parametrize("name, d, streams", [
    ("head_bool", 64, 1), ("head_bool", 128, 1),  # a 1-byte ring: 32 KB at 64, 16 KB of the 17 left at 128
    ("score_and_mask", 128, 2),  # the score's float tensor is ring 1 (read per element), the mask's ring 2
    ("two_rings", 64, 0), ("two_rings", 128, 0),  # both rings or none: both are 16 bytes too many at 64
    ("float_mask", 64, 0),  # 4-byte tiles: 128 KB
    ("head_bool", 256, 0),  # the wide body copies none
    ("causal", 128, 0)])    # nothing streamed
def test_the_plan_keeps_the_rings_the_mask_reads_where_they_fit(name, d, streams):
    plan = _plan(name, d)
    base = emit_backward.backward_plan(d, d, SM90)
    assert plan.streams == streams
    rows = 128 if d <= 64 else 64
    assert plan.smem == base.smem + (2 * rows * 128 if streams else 0) <= SM90.smem_per_block


def test_targets_without_wgmma_copy_nothing():
    assert _plan("head_bool", 64, "sm_80").streams == 0


def test_the_per_element_program_has_its_option_only_where_a_tensor_streams():
    low = pipeline.lower(MOD.ir["head_bool"], SM90, 128)
    assert NO_STREAM_OPTION in Program(backward=True, stream=False).options(low, "sm_90a")
    assert NO_STREAM_OPTION not in Program(backward=True).options(low, "sm_90a")
    plain = pipeline.lower(MOD.ir["causal"], SM90, 128)
    assert NO_STREAM_OPTION not in Program(backward=True, stream=False).options(plain, "sm_90a")


@pytest.mark.parametrize("d", [64, 128])
def test_the_copied_tiles_replace_the_per_element_global_loads(d):
    """The backward of a per-head bool mask reads a partial tile's elements from shared memory
    (one LDS.U8 an element: 32 a step at 64 queries) and copies the tiles by cp.async (LDGSTS);
    the per-element program (KDSL_STREAM_CAPTURES=0) loads them from global memory instead, an
    LDG an element. Both build with the room for the tiles (the static_assert on the launch's
    shared memory holds in either)."""
    k = MOD.ir["head_bool"]
    copied = build(k, "sm_90a", d, program=Program(backward=True))
    loaded = build(k, "sm_90a", d, program=Program(backward=True, stream=False))
    assert "#define KDSL_BWD_STREAM 1\n" in copied.generated.source
    a = sass.inspect(copied.compiled.cubin, copied.generated.entry)
    b = sass.inspect(loaded.compiled.cubin, loaded.generated.entry)
    if a is None:  # no cuobjdump here
        pytest.skip("cuobjdump")
    assert a.other_ops.get("LDS.U8", 0) >= 32 and not b.other_ops.get("LDS.U8"), (a.other_ops, b.other_ops)
    assert a.other_ops["LDG.8"] == 0 and b.other_ops["LDG.8"] >= 16, (a.other_ops, b.other_ops)


@pytest.mark.parametrize("name, d, prefetched", [
    ("score_and_mask", 128, True),   # the score's f32 bias, read per element beside the copied bool mask
    ("float_mask", 128, True),       # a 4-byte mask tile is not copied: read per element
    ("score_and_mask", 64, False)])  # head dim 64: it cost x0.969 there (attention_bwd_stream.cuh)
def test_tiles_read_per_element_under_a_loading_mask_are_prefetched_into_l2(name, d, prefetched):
    """Under a mask that loads, the step tiles of the streamed tensors the backward reads per
    element are asked into L2 a step ahead (one bulk prefetch a row: UBLKPF), at head dims above
    64; the copied rings need none."""
    built = build(MOD.ir[name], "sm_90a", d, program=Program(backward=True))
    rep = sass.inspect(built.compiled.cubin, built.generated.entry)
    if rep is None:
        pytest.skip("cuobjdump")
    assert (rep.other_ops.get("UBLKPF", 0) > 0) == prefetched, rep.other_ops
