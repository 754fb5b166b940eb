"""Head dims off the multiples of 16 (DiT-XL's 72, 40, 24, ...) run through zero-padded copies
(runtime/head_pad.py), on the CPU through the interpreter, which shares the path with the GPU
(tests/gpu/test_head_dims_gpu.py runs it there). A call at head dim d equals the call a user
could make by padding q, k and v to the next multiple of 16 and passing the scale of d, bit
for bit, gradients included; it is within tolerance of float64 PyTorch; and a program that
reads the head dim is refused, since padding would change what it reads."""
import math
import random

import numpy as np
import pytest

import kdsl
from kdsl import reference
from kdsl.errors import LaunchError
from kdsl.testing import ATTENTION_TOL, rel_frobenius

from conftest import ROOT

torch = pytest.importorskip("torch")

ALIBI = ROOT / "samples" / "alibi.kd"
OWN_VALUE_DIM = """
attention own_value_dim {
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, E]
    lse: f32[B, H, M]
    mask(b, h, i, j) = abs(i - j) <= 5
}
"""


def _padded(x):
    return torch.nn.functional.pad(x, (0, -x.shape[-1] % 16))


@pytest.mark.parametrize("d", [8, 24, 40, 72, 120, 250])
def test_a_padded_call_equals_padding_by_hand_and_the_reference(d):
    mod = kdsl.load(ALIBI, interpret=True)
    M, N = random.randint(1, 40), random.randint(1, 40)
    q, k, v = (torch.randn(1, 2, n, d, dtype=torch.bfloat16) for n in (M, N, N))
    slopes = torch.rand(2)
    out = mod.alibi(q, k, v, slopes)
    assert out.shape == (1, 2, M, d) and out.is_contiguous()
    by_hand = mod.alibi(_padded(q), _padded(k), _padded(v), slopes, scale=1 / math.sqrt(d))[..., :d]
    assert torch.equal(out, by_hand)
    want = reference.attention(mod.ir["alibi"], q, k, v, {"slopes": slopes})[0]
    assert rel_frobenius(out, want) <= ATTENTION_TOL


def test_gradients_through_the_padding_equal_padding_by_hand():
    mod = kdsl.load(ALIBI, interpret=True)
    d, M, N = 40, random.randint(2, 30), random.randint(2, 30)
    base = [torch.randn(1, 2, n, d, dtype=torch.bfloat16) for n in (M, N, N)]
    slopes = torch.rand(2)
    dout = torch.randn(1, 2, M, d, dtype=torch.bfloat16)
    grads = []
    for by_hand in (False, True):
        q, k, v = (x.clone().requires_grad_() for x in base)
        out = mod.alibi(*map(_padded, (q, k, v)), slopes, scale=d ** -0.5)[..., :d] if by_hand else \
            mod.alibi(q, k, v, slopes)
        grads.append(torch.autograd.grad(out, (q, k, v), dout))
    for g, w in zip(*grads):
        assert g.shape == w.shape and torch.equal(g, w)


def test_a_value_head_dim_of_its_own_the_lse_the_scale_and_a_given_out():
    mod = kdsl.compile(OWN_VALUE_DIM, "own_value_dim.kd", interpret=True)
    q, k = (torch.randn(2, 3, 20, 24, dtype=torch.bfloat16) for _ in range(2))
    v = torch.randn(2, 3, 20, 72, dtype=torch.bfloat16)
    out, lse = mod.own_value_dim(q, k, v, scale=0.3)
    want_out, want_lse = mod.own_value_dim(_padded(q), _padded(k), _padded(v), scale=0.3)
    assert torch.equal(out, want_out[..., :72]) and torch.equal(lse, want_lse)
    given = torch.full((2, 3, 20, 72), float("nan"), dtype=torch.bfloat16)
    got, _ = mod.own_value_dim(q, k, v, scale=0.3, out=given)
    assert got is given and torch.equal(given, out)
    with pytest.raises(LaunchError, match=r"out must have shape \[2, 3, 20, 72\]"):
        mod.own_value_dim(q, k, v, out=torch.empty(2, 3, 20, 80, dtype=torch.bfloat16))


def test_numpy_arrays_are_padded_too():
    mod = kdsl.load(ALIBI, interpret=True)
    rng = np.random.default_rng()
    q, k, v = (rng.standard_normal((1, 2, 9, 56)).astype(np.float32) for _ in range(3))
    slopes = rng.random(2).astype(np.float32)
    out = mod.alibi(q, k, v, slopes)
    pad = ((0, 0),) * 3 + ((0, 8),)
    assert np.array_equal(out, mod.alibi(*(np.pad(x, pad) for x in (q, k, v)), slopes, scale=56 ** -0.5)[..., :56])


def test_a_compiled_call_pads_as_eager_does():
    mod = kdsl.load(ALIBI, interpret=True)
    q, k, v = (torch.randn(1, 2, 17, 72, dtype=torch.bfloat16) for _ in range(3))
    slopes = torch.rand(2)
    compiled = torch.compile(lambda *a: mod.alibi(*a), fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(q, k, v, slopes), mod.alibi(q, k, v, slopes))
    torch._dynamo.reset()


@pytest.mark.parametrize("body,reader", [
    ("score(s, b, h, i, j) = s * float(D) / 64.0", "score()"),
    ("t: f32[D]\n score(s, b, h, i, j) = s + t[0]", "'t' shape"),
])
def test_a_program_that_reads_the_head_dim_is_refused_not_padded(body, reader):
    mod = kdsl.compile("attention reads_d { q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]\n"
                       f"{body} }}", "reads_d.kd", interpret=True)
    q = torch.randn(1, 1, 4, 40, dtype=torch.bfloat16)
    extra = {"t": torch.randn(40)} if "t:" in body else {}
    with pytest.raises(LaunchError, match=rf"head dimension 40 is not supported here: .* whose {reader}"):
        mod.reads_d(q, q, q, **extra)
    mod.reads_d(*[torch.randn(1, 1, 4, 48, dtype=torch.bfloat16)] * 3, **({"t": torch.randn(48)} if extra else {}))


@pytest.mark.parametrize("d", [260, 272, 512])
def test_past_256_is_refused_naming_the_limit(d):
    """One message whether or not the dim is a multiple of 16 (the padded call's check and the
    unpadded call's validation once said different things)."""
    mod = kdsl.load(ALIBI, interpret=True)
    q = torch.randn(1, 2, 4, d, dtype=torch.bfloat16)
    with pytest.raises(LaunchError, match=rf"head dimension {d} of q and k is not supported: it must be from 1 to 256 "
                                          r"\(a multiple of 16 runs as it is, any other padded with zeros\)"):
        mod.alibi(q, q, q, torch.rand(2))


def test_compiled_gradients_pad_as_eager_ones_do():
    """Under torch.compile the op's backward gets the unpadded tensors: it pads them itself."""
    mod = kdsl.load(ALIBI, interpret=True)
    base = [torch.randn(1, 2, 11, 24, dtype=torch.bfloat16) for _ in range(3)]
    slopes = torch.rand(2)
    grads = []
    for compiled in (False, True):
        q, k, v = (x.clone().requires_grad_() for x in base)
        fn = (lambda *a: mod.alibi(*a).float().square().sum())
        if compiled:
            fn = torch.compile(fn, fullgraph=True, backend="aot_eager")
        grads.append(torch.autograd.grad(fn(q, k, v, slopes), (q, k, v)))
    torch._dynamo.reset()
    for g, w in zip(*grads):
        assert g.shape == (1, 2, 11, 24) and torch.equal(g, w)


def test_blank_has_the_padded_shape_kind_and_dtype_without_a_copy():
    """What tile_summary() hands the plan at a padded head dim: the shapes the calls run at,
    of the input's kind and dtype, no copy (the summary reads no q, k or v)."""
    from kdsl.runtime import head_pad
    torch = pytest.importorskip("torch")
    d = random.choice([8, 40, 72, 100])
    for x in (np.ones((1, 2, 3, d), np.float16), torch.ones(1, 2, 3, d, dtype=torch.bfloat16)):
        b = head_pad.blank(x)
        assert type(b) is type(x) and b.dtype == x.dtype and tuple(b.shape) == (1, 2, 3, head_pad.padded_dim(d))
