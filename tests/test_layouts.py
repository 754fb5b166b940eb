"""Inputs in any layout (on the CPU, through the interpreter; tests/gpu/test_attention_gpu.py's
test_inputs_in_any_layout on the GPU). A model's q, k and v are views of a projection,
`x.view(B, N, 3, H, D)` sliced and transposed to [B, H, N, D]; SDPA and FlexAttention take them
as they are, and so does kdsl, by a row-major copy (runtime/arrays.dense): the result, and the
gradients reaching the projection, are those of the copies the caller could have made. An out=
or lse= is written where it is given and must be row-major."""
import random

import numpy as np
import pytest

import kdsl
from kdsl.errors import LaunchError
from kdsl.runtime import arrays

from conftest import ROOT

ALIBI = ROOT / "samples" / "alibi.kd"


def test_dense_copies_only_what_is_not_row_major():
    x = np.random.default_rng().standard_normal((2, 3, 4))
    assert arrays.dense(x) is x
    view = x.transpose(1, 0, 2)
    copy = arrays.dense(view)
    assert copy.flags.c_contiguous and np.array_equal(copy, view)
    empty = np.zeros((0, 3)).T
    assert arrays.dense(empty) is empty
    assert arrays.dense([1, 2]) == [1, 2]  # not an array: left for validation to name


def test_numpy_views_equal_their_copies():
    mod = kdsl.load(ALIBI, interpret=True)
    rng = np.random.default_rng()
    B, N, H, D = 1, random.randint(2, 40), 2, 64  # (at N = 1 the view is row-major)
    x = rng.standard_normal((B, N, 3, H, D)).astype(np.float32)
    q, k, v = (x[:, :, n].transpose(0, 2, 1, 3) for n in range(3))
    slopes = rng.random(H).astype(np.float32)
    assert not q.flags.c_contiguous
    got = mod.alibi(q, k, v, slopes)
    want = mod.alibi(*(np.ascontiguousarray(t) for t in (q, k, v)), slopes)
    assert np.array_equal(got, want)


def test_torch_views_and_expanded_captures_equal_their_copies_with_gradients():
    torch = pytest.importorskip("torch")
    mod = kdsl.load(ALIBI, interpret=True)
    B, N, H, D = 2, random.randint(2, 40), 2, 64  # (at N = 1 the view is row-major)
    x = torch.randn(B, N, 3, H, D, dtype=torch.bfloat16, requires_grad=True)
    slope = torch.rand(1, requires_grad=True)
    q, k, v = (x[:, :, n].transpose(1, 2) for n in range(3))
    assert not q.is_contiguous() and slope.expand(H).stride() == (0,)
    out = mod.alibi(q, k, v, slope.expand(H))
    dout = torch.randn_like(out)
    got = torch.autograd.grad(out, (x, slope), dout)

    xc, sc = x.detach().clone().requires_grad_(), slope.detach().clone().requires_grad_()
    want_out = mod.alibi(*(xc[:, :, n].transpose(1, 2).contiguous() for n in range(3)), sc.expand(H).contiguous())
    want = torch.autograd.grad(want_out, (xc, sc), dout)
    assert torch.equal(out, want_out)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_a_compiled_model_passes_its_views_as_they_are():
    torch = pytest.importorskip("torch")
    mod = kdsl.load(ALIBI, interpret=True)
    B, N, H, D = 1, random.randint(2, 40), 2, 64  # (at N = 1 the view is row-major)

    def attend(x, slopes):
        q, k, v = (x[:, :, n].transpose(1, 2) for n in range(3))
        return mod.alibi(q, k, v, slopes)

    x, slopes = torch.randn(B, N, 3, H, D, dtype=torch.bfloat16), torch.rand(H)
    compiled = torch.compile(attend, fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(x, slopes), attend(x, slopes))
    torch._dynamo.reset()


def test_an_output_in_another_layout_is_refused():
    torch = pytest.importorskip("torch")
    mod = kdsl.load(ALIBI, interpret=True)
    q = torch.randn(1, 2, 8, 64, dtype=torch.bfloat16)
    out = torch.empty(1, 2, 64, 8, dtype=torch.bfloat16).transpose(2, 3)
    with pytest.raises(LaunchError, match="argument 'out' must be contiguous"):
        mod.alibi(q, q, q, torch.rand(2), out=out)
