"""The wgmma backward copying a dense mask's tiles into shared memory (attention_bwd_stream.cuh):
masks that read a 1-byte tensor at [..., q, kv] (per head and shared, bool / u8 / i8, beside
causal; tests/stream_masks.py), random bits and runs, ragged M and N, rows that are not whole
16-byte chunks (the per-element program by shape) and a data pointer off 16 bytes (the same
program by pointer); two rings, which do not fit; a float score tensor in ring 1 beside the
mask's in ring 2, and that tensor (prefetched into L2 by rows) off 16 bytes. Gradients against
float64 autograd of the reference."""
import pytest

import kdsl

from gradcheck import check_grads
from stream_masks import SOURCE

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def mod():
    return kdsl.compile(SOURCE)


def _draw(torch, dtype, shape, gen, runs):
    """A mask tensor: random values, or (runs) sorted along the rows (whole blocks kept and dropped)."""
    if dtype == torch.bool:
        x = torch.rand(shape, device="cuda", generator=gen) < 0.5
    elif dtype == torch.uint8:
        x = torch.randint(0, 256, shape, device="cuda", generator=gen).to(torch.uint8)
    elif dtype == torch.int8:
        x = torch.randint(-128, 128, shape, device="cuda", generator=gen).to(torch.int8)
    else:
        x = torch.randn(shape, device="cuda", generator=gen).to(dtype)
    return x.sort(dim=-1).values if runs else x


def _case(torch, kern, shape, runs, salt=""):
    B, H, M, N, D = shape
    gen = torch.Generator(device="cuda").manual_seed(hash((kern.name, shape, runs, salt)) % 2**31)
    q = torch.randn(B, H, M, D, device="cuda", generator=gen).bfloat16()
    k, v = (torch.randn(B, H, N, D, device="cuda", generator=gen).bfloat16() for _ in range(2))
    dims = {"B": B, "H": H, "M": M, "N": N}
    caps = {}
    for t in kern.ir.tensors:
        if t.role == "capture":
            dtype = {"bool": torch.bool, "u8": torch.uint8, "i8": torch.int8, "f32": torch.float32}[t.dtype]
            caps[t.name] = _draw(torch, dtype, tuple(dims[s.name] for s in t.shape), gen, runs)
    dout = torch.randn(q.shape, device="cuda", generator=gen).bfloat16()
    return q, k, v, caps, dout


def _streamed(kern) -> set:
    """Names of the captured tensors the backward launches recorded so far copy tiles of."""
    from kdsl.runtime.attention_backward import _BackwardLaunch
    return {kern.captures[t].name for p in kern._plans.values() if isinstance(p, _BackwardLaunch)
            for t in p.stream_args}


SHAPES = [(1, 2, 1024, 1024, 128),  # whole tiles
          (2, 3, 600, 1200, 64),    # ragged rows; the last key block 48 keys: chunks past N zero-filled
          (1, 2, 300, 272, 128),    # the last key block 16 keys
          (1, 1, 1, 1024, 64)]      # one row


@pytest.mark.parametrize("runs", [False, True], ids=["random", "runs"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", ["head_bool", "shared_bool", "head_u8_causal", "shared_i8"])
def test_streamed_mask_gradients_match_the_reference(mod, name, shape, runs):
    torch = pytest.importorskip("torch")
    kern = getattr(mod, name)
    q, k, v, caps, dout = _case(torch, kern, shape, runs)
    check_grads(f"{name} {shape}", kern, mod.ir[name], q, k, v, caps, dout)
    assert _streamed(kern) == set(caps)  # the copied tiles served the mask, not global memory


@pytest.mark.parametrize("d", [64, 128])
def test_two_rings_do_not_fit_and_the_mask_reads_global_memory(mod, d):
    """Two 1-byte rings would take 64 KB at head dim 64 (16 bytes too many beside the buffers)
    and 32 KB at 128 (17 KB left): neither is copied, since the mask reads both."""
    torch = pytest.importorskip("torch")
    kern = mod.two_rings
    q, k, v, caps, dout = _case(torch, kern, (1, 2, 700, 900, d), False)
    check_grads(f"two_rings D={d}", kern, mod.ir["two_rings"], q, k, v, caps, dout)
    assert _streamed(kern) == set()


def test_a_score_tensor_beside_a_streamed_mask(mod):
    """The score's float bias is ring 1 (the forward streams it), read per element by the
    backward's score; the mask's bool tensor is ring 2, copied."""
    torch = pytest.importorskip("torch")
    kern = mod.score_and_mask
    q, k, v, caps, dout = _case(torch, kern, (1, 2, 512, 640, 128), False)
    check_grads("score_and_mask", kern, mod.ir["score_and_mask"], q, k, v, caps, dout)
    assert _streamed(kern) == {"keep"}


def test_rows_not_whole_chunks_take_the_per_element_program(mod):
    torch = pytest.importorskip("torch")
    kern = mod.head_bool
    q, k, v, caps, dout = _case(torch, kern, (1, 2, 333, 1000, 128), False)  # rows of 1000 bytes
    check_grads("head_bool rows of 1000 bytes", kern, mod.ir["head_bool"], q, k, v, caps, dout)
    assert _streamed(kern) <= {"keep"}  # (earlier calls' launches may copy; this one's does not)
    launches = [p for key, p in kern._plans.items() if key[0] == "backward" and p.loaded is not None
                and p.stream_args == ()]
    assert launches


def test_a_mask_off_16_bytes_takes_the_per_element_program(mod):
    torch = pytest.importorskip("torch")
    kern = mod.shared_bool
    q, k, v, caps, dout = _case(torch, kern, (1, 2, 512, 1024, 64), False, "misaligned")
    buf = torch.empty(caps["keep"].numel() + 16, dtype=torch.bool, device="cuda")
    shifted = buf[3:3 + caps["keep"].numel()].view(caps["keep"].shape)
    shifted.copy_(caps["keep"])
    assert shifted.data_ptr() % 16 != 0
    check_grads("shared_bool misaligned", kern, mod.ir["shared_bool"], q, k, v, {"keep": shifted}, dout)
    assert any(key[-1] == "no stream" for key in kern._plans if key[0] == "backward")


def test_a_prefetched_tensor_off_16_bytes_takes_the_per_element_program(mod):
    """score_and_mask's f32 bias is read per element, its step tiles asked into L2 by rows
    (attention_bwd_stream.cuh prefetch_stream_tile, at head dim 128 under a mask that loads),
    which takes 16-byte aligned rows: a bias whose pointer is off 16 bytes takes the per-element
    program as a copied mask does, and so do rows of 127 floats (508 bytes)."""
    torch = pytest.importorskip("torch")
    kern = mod.score_and_mask
    q, k, v, caps, dout = _case(torch, kern, (1, 2, 256, 512, 128), False, "misaligned bias")
    bias = caps["bias"]
    buf = torch.empty(bias.numel() + 4, dtype=torch.float32, device="cuda")
    shifted = buf[1:1 + bias.numel()].view(bias.shape)
    shifted.copy_(bias)
    assert shifted.data_ptr() % 16 != 0
    check_grads("score_and_mask, bias off 16 bytes", kern, mod.ir["score_and_mask"], q, k, v,
                {**caps, "bias": shifted}, dout)
    assert any(key[-1] == "no stream" for key in kern._plans if key[0] == "backward")
    q, k, v, caps, dout = _case(torch, kern, (1, 2, 200, 127, 128), False, "rows of 508 bytes")
    check_grads("score_and_mask, rows of 508 bytes", kern, mod.ir["score_and_mask"], q, k, v, caps, dout)
