"""Inputs in any layout (on the CPU, through the interpreter; tests/gpu/test_attention_gpu.py's
test_inputs_in_any_layout on the GPU). A model's q, k and v are views of a projection,
`x.view(B, N, 3, H, D)` sliced and transposed to [B, H, N, D]; SDPA and FlexAttention take them
as they are, and so does kdsl: k and v by tensor maps of their strides on Hopper (tma.KeyTiles),
anything else by a row-major copy (runtime/arrays.dense). The result, and the gradients reaching
the projection, are those of the copies the caller could have made. An out= or lse= is written
where it is given and must be row-major."""
import os
import random
import subprocess
import sys

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


def test_key_maps_take_a_cache_kept_by_position(monkeypatch):
    """k and v go to the Hopper kernel as they are where a tensor map can take their strides
    (tma.KeyTiles, 4-D: column, row, head, batch); its dims and byte strides are the array's."""
    from kdsl.runtime import tma
    B, N, H, D, cache = 2, 100, 4, 64, 137
    view = (B, H, N, D), (cache * H * D, D, H * D, 1)  # cache[:, :N].transpose(1, 2), cache kept [B, cache, H, D]
    assert tma.key_strides_fit(*view, "bf16")
    assert not tma.key_strides_fit((B, H, N, 4), (cache * H * 4, 4, H * 4, 1), "bf16")  # 8-byte rows: not TMA's
    assert not tma.key_strides_fit((B, H, N, D), (N * D, 0, D, 1), "bf16")  # heads expanded: copied instead
    assert not tma.key_strides_fit((B, H, N, D), (H * N * D, N * D, 1, N), "bf16")  # D not innermost

    # an axis of one element may carry any stride (torch keeps what a view made): it spans the rest
    assert tma.key_strides((1, H, N, D), (1, N * D, D, 1), "bf16") == (D * 2, N * D * 2, H * N * D * 2)
    assert tma.key_strides((B, 1, 1, D), (D, 3, 5, 1), "f16") == (D * 2, D * 2, D * 2)

    class Pack:
        params = [None] * 3

    monkeypatch.setattr(tma, "_encoder", lambda: None)  # (the driver's encoder: no GPU here)
    made = tma.KeyTiles(Pack(), 1, "bf16", *view, 128)
    assert (list(made.dims), list(made.strides), list(made.box)) == \
        ([D, N, H, B], [H * D * 2, D * 2, cache * H * D * 2], [64, 128, 1, 1])


def test_an_output_overlapping_a_strided_input_is_found():
    torch = pytest.importorskip("torch")
    from kdsl.runtime.launch import _extent
    cache = torch.empty(2, 50, 4, 64, dtype=torch.bfloat16)
    k = cache[:, 3:40].transpose(1, 2)
    lo, hi = _extent(k)
    assert lo == k.data_ptr()
    last = k[-1, -1, -1, -1:]  # the view's last element
    assert hi == last.data_ptr() + 2


@pytest.mark.parametrize("sample,head_dim", [("sliding_window", 64), ("document_mask", 128), ("plain", 256)])
def test_the_key_maps_program_builds_as_the_row_major_one_does(sample, head_dim):
    """KDSL_KEY_STRIDES's program (Program.key_maps: 4-D K and V maps, their head and batch
    divided out of the item once a tile) builds with the same local memory as the default one
    (none here), its loads 4-D: keeping the head and batch through the producer's loop spilled
    sliding_window at head dim 64 (8 bytes), where the 3-D program keeps one register."""
    from kdsl.runtime import compiler, cubin_info
    from kdsl.runtime.programs import KEY_MAPS_OPTION, Program
    k = kdsl.load(ROOT / "samples" / f"{sample}.kd").ir[sample]
    default, keyed = (compiler.build(k, "sm_90a", head_dim, program=Program(key_maps=m)) for m in (False, True))
    assert KEY_MAPS_OPTION in Program(key_maps=True).options(keyed.kernel, "sm_90a")
    assert KEY_MAPS_OPTION not in Program().options(keyed.kernel, "sm_90a")
    assert "tensor.4d" in keyed.compiled.ptx and "tensor.4d" not in default.compiled.ptx
    for b in (default, keyed):
        assert cubin_info.frame_bytes(b.compiled.cubin, b.generated.entry) == 0


def test_the_fp8_gemm_names_a_transposed_operand_and_the_fix():
    """The GEMM copies nothing (a copy of b per call would cost what the call does): a K-major
    operand passed as a transposed view is refused, saying which layout it takes and how."""
    torch = pytest.importorskip("torch")
    from kdsl.backends import Torch
    from kdsl.cases import GemmCase, gemm_inputs
    mod = kdsl.load(ROOT / "samples" / "fp8_gemm.kd", interpret=True)
    a, sa, b, sb, extra = gemm_inputs(mod.ir["fp8_gemm"], GemmCase(64, 96, 256, 1, random.randrange(2**31)),
                                      Torch("cpu"))
    b_view = b.t().contiguous().t()  # the same [N, K] values, stored [K, N]
    with pytest.raises(LaunchError, match=r"argument 'b' must be \[\.\.\., N, K\] with K innermost .*\(b\.contiguous\(\)"):
        mod.fp8_gemm(a, sa, b_view, sb, *extra)
    assert torch.equal(mod.fp8_gemm(a, sa, b_view.contiguous(), sb, *extra), mod.fp8_gemm(a, sa, b, sb, *extra))


def test_one_rule_says_which_keys_are_read_in_place(monkeypatch):
    """The call (_key_input) and validate follow one rule (_reads_keys_in_place): under
    KDSL_KEY_STRIDES a k or v on the GPU whose strides a 4-D tensor map takes is read as it is;
    off the switch, on the host or in a layout no map takes, it is copied (the call) and refused
    (validate, for whoever skips the call's copy)."""
    from kdsl.runtime import attention_launch
    kern = kdsl.load(ALIBI).alibi
    B, N, H, D = 2, random.randint(3, 50), 4, 64
    cache = arrays.ArrayInfo("torch", "bf16", (B, H, N, D), (N * H * D, D, H * D, 1), 0)  # [B, N, H, D] transposed
    odd = arrays.ArrayInfo("torch", "bf16", (B, H, N, D), (N * H * D * 2, D, H * D, 2), 0)  # every second column
    monkeypatch.setattr(attention_launch, "KEY_STRIDES", False)
    assert not kern._reads_keys_in_place(cache)
    monkeypatch.setattr(attention_launch, "KEY_STRIDES", True)
    assert kern._reads_keys_in_place(cache)
    assert not kern._reads_keys_in_place(odd)
    assert not kern._reads_keys_in_place(arrays.ArrayInfo("torch", "bf16", cache.shape, cache.strides, -1))
    assert not kern._reads_keys_in_place(arrays.ArrayInfo("torch", "f32", cache.shape, cache.strides, 0))
    assert not kdsl.load(ALIBI, interpret=True).alibi._args._reads_keys_in_place(cache)  # the interpreter's


@pytest.mark.parametrize("setting,expected", [(None, True), ("0", False), ("1", True)])
def test_keys_are_read_in_place_unless_kdsl_key_strides_is_0(setting, expected):
    """The 4-D key maps are the default (every GPU test passed under them, and they timed as fast
    as copies on row-major keys); KDSL_KEY_STRIDES=0 brings back the copy, for A/B timing."""
    env = {k: v for k, v in os.environ.items() if k != "KDSL_KEY_STRIDES"}
    if setting is not None:
        env["KDSL_KEY_STRIDES"] = setting
    code = "from kdsl.runtime import attention_launch; print(attention_launch.KEY_STRIDES)"
    run = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    assert run.stdout.strip() == str(expected)
