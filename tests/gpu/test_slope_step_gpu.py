"""The slope step (passes/tiling.py SLOPE_STEP): scores affine in the key position get slope *
col from one more wgmma k-step of Q K^T. Slopes of both signs and of very different sizes,
captured per head or constant, under masks, on ragged, GQA and decode shapes, at several head
dims, against the float64 reference; and the same kernel without the step agrees."""
import pytest

import kdsl

from exprgen import program
from gpu.test_attention_gpu import _check

pytestmark = pytest.mark.gpu

PROGRAMS = {
    "relpos_scaled": "s + 0.37 * float(i - j)",
    "key_ramp": "s - w[h] * float(j)",                    # w ~ N(0, 1): any sign, per head
    "big_slope": "s * 0.5 + 40.0 * float(i - j) * 0.01",  # 0.4 per key: most keys far below the max
    "tiny_slope": "s + 0.0003 * float(j - i)",
}
MASKS = {None: None, "window": "abs(i - j) < 300", "causal": "j <= i"}
# (B, H, Hkv, M, N, D)
SHAPES = [(2, 4, 4, 256, 256, 64), (1, 4, 2, 129, 1000, 128), (2, 2, 1, 200, 513, 96), (1, 8, 2, 1, 4096, 128),
          (1, 2, 2, 1000, 1000, 64)]


def _module(name, score, mask):
    return kdsl.compile(program(score, mask, name, ("w: f32[H]",) if "w[h]" in score else ()), f"{name}.kd")


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("mask", list(MASKS), ids=str)
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_affine_scores_with_the_slope_step_match_reference(name, mask, shape):
    mod = _module(name, PROGRAMS[name], MASKS[mask])
    _check(mod, name, shape, seed=hash((name, mask, shape)) % 2**31)
    _check(mod, name, shape, seed=hash((name, mask, shape, 1)) % 2**31,
           kernel=getattr(mod, name).with_attrs(slope_step=0))


def test_samples_take_the_slope_step_where_it_applies():
    from conftest import ROOT, lowered
    for sample, d in (("relpos", 64), ("relpos", 128), ("alibi", 64)):
        assert lowered((ROOT / "samples" / f"{sample}.kd").read_text(), d).attr("slope_step") == 1, (sample, d)
