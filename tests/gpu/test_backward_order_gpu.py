"""The backward's CTAs longest first where its tile classes read data (runtime/backward_order.py,
attention_bwd_order.cuh): gradients against the float64 reference with the order and without
(KDSL_BWD_ORDER=0), and the order itself: every CTA once, longest first, the costs those of the
mask's tiles counted on the host."""
import numpy as np
import pytest

import kdsl
from kdsl.codegen import emit_backward
from kdsl.passes.target import get_target
from kdsl.runtime.launch import _ptr

from exprgen import program
from gradcheck import check_grads

pytestmark = pytest.mark.gpu

DECLS = ("nsink: i32[B]", "plen: i32[B]", "win: i32[B]")
PROGRAMS = {  # name: mask, each classifying tiles by arithmetic on values it loads
    "sinks_window": "j < nsink[b] or (j <= i and i - j < 256)",
    "prefix_causal": "j <= i or j < plen[b]",
    "window_prefix": "j <= i and (i - j < win[b] or j < plen[b])",
}
# (B, H, Hkv, M, N, D): CTAs past one wave of 132 SMs (ordered), GQA, ragged, one wave or less
SHAPES = [(2, 8, 8, 2048, 2048, 128), (2, 8, 2, 1000, 4000, 64), (1, 16, 4, 777, 3001, 96), (1, 4, 4, 512, 512, 64)]


def _inputs(kir, shape, gen):
    import torch
    from kdsl.testing import attention_inputs
    B, H, Hkv, M, N, D = shape
    q, k, v, caps = attention_inputs(kir, B, H, Hkv, M, N, D, generator=gen)
    caps.update(nsink=torch.randint(0, N + 1, (B,), device="cuda", generator=gen, dtype=torch.int32),
                plen=torch.randint(0, N + 1, (B,), device="cuda", generator=gen, dtype=torch.int32),
                win=torch.randint(1, 600, (B,), device="cuda", generator=gen, dtype=torch.int32))
    return q, k, v, caps


@pytest.mark.parametrize("order", ["1", "0"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_an_ordered_backward_gives_the_reference_gradients(name, shape, order, monkeypatch):
    import torch
    monkeypatch.setenv("KDSL_BWD_ORDER", order)
    mod = kdsl.compile(program(None, PROGRAMS[name], name, DECLS), f"{name}.kd")
    kir = mod.ir[name]
    gen = torch.Generator(device="cuda").manual_seed(hash((name, shape)) % 2**31)
    q, k, v, caps = _inputs(kir, shape, gen)
    B, H, _, M, _, D = shape
    dout = torch.randn((B, H, M, D), device="cuda", generator=gen).to(q.dtype)
    check_grads(f"{name} {shape} order={order}", getattr(mod, name), kir, q, k, v, caps, dout)


def test_an_ordered_backward_with_split_query_tiles_gives_the_reference_gradients(monkeypatch):
    """The query-split program's cost helper walks each CTA's range of tiles (backward_query_tiles)."""
    import torch
    monkeypatch.setenv("KDSL_BWD_QUERY_SPLITS", "3")
    name, shape = "sinks_window", (2, 8, 8, 1500, 2048, 64)
    mod = kdsl.compile(program(None, PROGRAMS[name], name, DECLS), f"{name}.kd")
    kir = mod.ir[name]
    gen = torch.Generator(device="cuda").manual_seed(85)
    q, k, v, caps = _inputs(kir, shape, gen)
    dout = torch.randn(q.shape, device="cuda", generator=gen).to(q.dtype)
    check_grads(f"{name} {shape} query splits 3", getattr(mod, name), kir, q, k, v, caps, dout)


def _order_class(cost: int) -> int:
    """attention_bwd_order.cuh order_class at KDSL_BWD_ORDER_CLASSES=2: the half octave of the cost."""
    octave = cost.bit_length() - 1
    return 2 * octave + (cost * cost >= 2 << (2 * octave))


def _host_classes(nsink, B, H, M, N, keys):
    """Each CTA's class of cost as attention_bwd_order.cuh counts it, from sinks_window's mask
    evaluated element by element on 64-query tiles: a full tile 2, a partial one 3, the CTA 1;
    in backward_block's order (one group of heads: key block by key block, heads within)."""
    i = np.arange(M)[:, None]
    j = np.arange(N)[None, :]
    costs = np.zeros((N // keys, B, H), dtype=np.int64)
    for b in range(B):
        kept = (j < nsink[b]) | ((j <= i) & (i - j < 256))
        for kb in range(0, N, keys):
            cost = 1
            for m0 in range(0, M, 64):
                tile = kept[m0:m0 + 64, kb:kb + keys]
                cost += 0 if not tile.any() else 2 if tile.all() else 3
            costs[kb // keys, b, :] = cost
    return [_order_class(int(c)) for c in costs.reshape(-1)]


def test_the_order_is_every_cta_once_longest_first():
    """At 2 x 16 heads and 16 key blocks the head group is all 32 heads (geometry.attention_head_group:
    half the SMs under a mask of data), so unit w is key block w // 32, head w % 32."""
    import torch
    name, (B, H, M, N, D) = "sinks_window", (2, 16, 1024, 2048, 128)
    keys = emit_backward.backward_plan(D, D, get_target("sm_90a")).keys
    mod = kdsl.compile(program(None, PROGRAMS[name], name, DECLS), f"{name}.kd")
    kern = getattr(mod, name)
    gen = torch.Generator(device="cuda").manual_seed(7)
    q, k, v, caps = _inputs(mod.ir[name], (B, H, H, M, N, D), gen)
    # sinks ending on a key block's edge: the tile predicates then classify tiles exactly
    caps["nsink"] = torch.tensor([3 * keys, 11 * keys], dtype=torch.int32, device="cuda")
    q.requires_grad_(True)
    kern(q, k, v, **caps).sum().backward()
    (plan,) = [p for key, p in kern._plans.items() if key[0] == "backward"]
    units = B * H * (N // keys)
    assert plan.order is not None and plan.order.units == units
    cap_ptrs = [_ptr(caps[t.name]) for t in kern.captures]
    buf, _ = plan.order.run(torch.cuda.current_stream().cuda_stream, cap_ptrs, 0, q.device)
    torch.cuda.synchronize()
    keys_ = buf[:units].cpu().numpy().view(np.uint64)
    order = buf[units:].cpu().numpy().view(np.int32)[:units]
    assert sorted(order.tolist()) == list(range(units))  # every CTA once
    classes = (0xFFFFFFFF - (keys_ >> np.uint64(32))).astype(np.int64)
    assert (keys_ & np.uint64(0xFFFFFFFF)).astype(np.int64).tolist() == list(range(units))  # key w at w
    assert classes.tolist() == _host_classes(caps["nsink"].tolist(), B, H, M, N, keys)
    # the longest class first, and within a class the units in their own order
    assert [(-classes[w], w) for w in order] == sorted((-c, w) for w, c in enumerate(classes))

