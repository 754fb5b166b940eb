"""examples/: each runs end to end on the CPU interpreter (`--cpu`: kernel, reference, check),
and the FlexAttention peer each times itself against computes the same attention (eagerly, on
the CPU, in float64) as its reference, so that the GPU timing compares like with like."""
import importlib.util
import sys
import warnings

import pytest

from conftest import ROOT

torch = pytest.importorskip("torch")

EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


def _module(path):
    spec = importlib.util.spec_from_file_location(f"example_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # (Flex's block masks trace the mask function, which looks its module up)
    spec.loader.exec_module(mod)
    return mod


def test_there_are_examples():
    assert {p.stem for p in EXAMPLES} >= {"softcap_alibi", "document_mask_training", "fp8_gemm", "decode_with_cache",
                                          "attention_sinks"}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_runs_on_the_interpreter(path, capsys):
    _module(path).main(["--cpu"])
    assert "against" in capsys.readouterr().out


def _flex_eagerly(fn):
    pytest.importorskip("torch.nn.attention.flex_attention")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Flex warns that it runs uncompiled, which is the point here
        return fn()


def test_softcap_alibi_peer_is_the_same_attention():
    ex = _module(ROOT / "examples" / "softcap_alibi.py")
    q = torch.randn(2, 4, 150, 32, dtype=torch.float64)
    k, v = torch.randn(2, 4, 200, 32, dtype=torch.float64), torch.randn(2, 4, 200, 32, dtype=torch.float64)
    got = _flex_eagerly(ex.flex(q, k, v, compile=False))
    assert float((got - ex.reference(q, k, v)).abs().max()) < 1e-9


def test_document_mask_peer_is_the_same_attention():
    """(Flex has no backward on the CPU: its gradients are autograd's of this same forward.)"""
    ex = _module(ROOT / "examples" / "document_mask_training.py")
    B, H, N, D = 2, 2, 200, 32
    doc = ex.documents(B, N, "cpu", torch.Generator().manual_seed(3))
    assert int(doc.max()) > 0 and (doc.diff(dim=1) >= 0).all()
    q, k, v = (torch.randn(B, H, N, D, dtype=torch.float64) for _ in range(3))
    got = _flex_eagerly(ex.flex(q, k, v, doc, compile=False))
    assert float((got - ex.reference(q, k, v, doc)).abs().max()) < 1e-9


def test_decode_peer_is_the_same_attention():
    ex = _module(ROOT / "examples" / "decode_with_cache.py")
    B, H, Hkv, N, D = 3, 4, 2, 5000, 16
    q = torch.randn(B, H, 1, D, dtype=torch.float64)
    k, v = torch.randn(B, Hkv, N, D, dtype=torch.float64), torch.randn(B, Hkv, N, D, dtype=torch.float64)
    cache_len = torch.tensor([N, 4097, 17], dtype=torch.int32)  # the window binds on the first two
    assert int(ex.keep(cache_len, N)[0].sum()) == 4096 and int(ex.keep(cache_len, N)[2].sum()) == 17
    got = ex.sdpa(q, k, v, cache_len)()
    assert float((got - ex.reference(q, k, v, cache_len)).abs().max()) < 1e-9


@pytest.mark.parametrize("stem", ["document_mask_training", "attention_sinks"])
def test_training_references_take_one_head_at_a_time(stem, capsys):
    """Their float64 references, all heads at once at the GPU shapes, ran out of an H100's memory
    (32 and 16 GiB of scores: 2026-12-05); main() now checks a head at a time."""
    ex = _module(ROOT / "examples" / f"{stem}.py")
    heads, reference = [], ex.reference

    def recording(q, *rest):
        heads.append(q.shape[1])
        return reference(q, *rest)
    ex.reference = recording
    ex.main(["--cpu"])
    assert heads and set(heads) == {1} and len(heads) > 1
    assert "against" in capsys.readouterr().out
