"""Tensor maps' encodings kept by pointer (runtime/tma.py), with the driver's encoder replaced
by one that writes the pointer into the map: no GPU needed."""
import ctypes

import pytest

from kdsl.errors import KdslError
from kdsl.runtime import tma
from kdsl.runtime.driver import ArgPack


class FakeEncoder:
    """cuTensorMapEncodeTiled's signature; fills the 128 bytes from the pointer and counts calls."""

    def __init__(self):
        self.calls = []
        self.status = 0

    def __call__(self, addr, dtype, rank, ptr, dims, strides, box, elem_strides, interleave, swizzle, l2, oob):
        self.calls.append(ptr)
        self.l2 = l2
        if self.status:
            return self.status
        ctypes.memmove(addr, (ptr % 251 + 1).to_bytes(1, "little") * 96 + ptr.to_bytes(32, "little"), 128)
        return 0


@pytest.fixture
def fake(monkeypatch):
    enc = FakeEncoder()
    monkeypatch.setattr(tma, "_encoder", lambda: enc)
    return enc


def new_map(pack=None, index=1):
    pack = pack or ArgPack(["ptr", "tmap", "tmap"])
    return tma.TensorMap(pack, index, "u8", (7168, 128, 1), (7168, 7168 * 128), (128, 64, 1))


def param(m):
    """The 128 bytes the kernel parameter of map m points at."""
    return ctypes.string_at(m.params[m.index], 128)


def test_a_pointer_seen_before_is_copied_back_not_encoded_again(fake):
    m = new_map()
    m.bind(0x1000)
    first = param(m)
    assert first[-32:] == (0x1000).to_bytes(32, "little")
    m.bind(0x1000)  # unchanged: nothing to do
    m.bind(0x2000)
    assert param(m)[-32:] == (0x2000).to_bytes(32, "little")
    m.bind(0x1000)
    assert param(m) == first
    assert fake.calls == [0x1000, 0x2000]


def test_each_map_keeps_its_own_encodings_and_parameter(fake):
    pack = ArgPack(["ptr", "tmap", "tmap"])
    a, b = new_map(pack, 1), new_map(pack, 2)
    a.bind(0x1000)
    b.bind(0x1000)  # another map (other dims in general): encoded for it
    b.bind(0x2000)
    assert fake.calls == [0x1000, 0x1000, 0x2000]
    assert param(a)[-32:] == (0x1000).to_bytes(32, "little") and param(b)[-32:] == (0x2000).to_bytes(32, "little")


def test_the_oldest_encoding_is_dropped_past_the_limit(fake):
    m = new_map()
    ptrs = [0x1000 * (i + 1) for i in range(tma.TensorMap.ENCODINGS_KEPT + 1)]
    for p in ptrs:
        m.bind(p)
    assert len(m.encoded) == tma.TensorMap.ENCODINGS_KEPT
    m.bind(ptrs[1])  # still kept
    m.bind(ptrs[0])  # dropped: encoded again
    assert fake.calls == ptrs + [ptrs[0]]


def test_a_failed_encode_names_the_error_and_is_not_kept(fake):
    m = new_map()
    m.bind(0x1000)
    fake.status = 1
    with pytest.raises(KdslError, match="cuTensorMapEncodeTiled failed with CUDA error 1"):
        m.bind(0x3000)
    assert m.ptr is None and 0x3000 not in m.encoded
    fake.status = 0
    m.bind(0x1000)
    assert m.ptr == 0x1000 and param(m)[-32:] == (0x1000).to_bytes(32, "little")


def test_a_one_off_encoding_passes_its_layout_and_returns_the_map(monkeypatch):
    seen = {}

    def encoder(addr, dtype, rank, ptr, dims, strides, box, elem_strides, interleave, swizzle, l2, oob):
        seen.update(dtype=dtype, rank=rank, dims=list(dims[:rank]), strides=list(strides[:rank - 1]),
                    box=list(box[:rank]), elem=list(elem_strides[:rank]), swizzle=swizzle, l2=l2, oob=oob)
        ctypes.memmove(addr, ptr.to_bytes(8, "little") * 16, 128)
        return 0
    monkeypatch.setattr(tma, "_encoder", lambda: encoder)
    enc = tma.encode_tiled(0x1234, "u8", (128, 4096), (128,), (128, 128), swizzle=64, l2_promotion=128)
    assert enc == (0x1234).to_bytes(8, "little") * 16
    assert seen == dict(dtype=tma._DTYPE["u8"], rank=2, dims=[128, 4096], strides=[128], box=[128, 128], elem=[1, 1],
                        swizzle=tma._SWIZZLE[64], l2=tma._L2_PROMOTION[128], oob=tma._OOB_FILL_ZEROS)


def test_a_one_off_encoding_the_driver_refuses_names_its_layout(fake):
    fake.status = 1
    with pytest.raises(KdslError, match=r"CUDA error 1 \(dims \[128, 4096\], box \[128, 256\]\)"):
        tma.encode_tiled(0x1234, "u8", (128, 4096), (128,), (128, 256))


def test_the_attention_forward_row_maps_promote_a_line_and_stream_maps_two(fake):
    """A 256-byte promotion on Q / K / V made batched decode 9 % slower on an H200 (the SMs asked
    L2 for 25 % more sectors than K and V hold); the streamed captures' maps keep 256 bytes
    (bench/NOTES.md, fifty-seventh session)."""
    pack = ArgPack(["tmap", "tmap"])
    rows = tma.RowTiles(pack, 0, "bf16", 32, 4096, 128, 128)
    rows.bind(0x1000)
    assert fake.l2 == tma._L2_PROMOTION[128] == tma._L2_PROMOTION[tma.ROW_TILE_L2_PROMOTION]
    stream = tma.StreamTiles(pack, 1, "bool", (2, 4096, 4096), 128)
    stream.bind(0x2000)
    assert fake.l2 == tma._L2_PROMOTION[256]
