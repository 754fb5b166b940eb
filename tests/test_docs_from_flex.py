"""docs/from_flex.md: every FlexAttention mod there and the kdsl program beside it compute the
same attention. Flex runs eagerly on the CPU in float64 on the inputs kdsl check would draw for
the program (its captured tensors under the same names), and the program's float64 reference
(kdsl.reference: what kdsl check judges the kernels against) must match it to float32's
rounding of the score expressions."""
import re
import warnings

import pytest

import kdsl
from kdsl import reference
from kdsl.backends import Torch
from kdsl.cases import AttentionCase, attention_inputs, conform

from conftest import ROOT

torch = pytest.importorskip("torch")
flex = pytest.importorskip("torch.nn.attention.flex_attention")

DOC = ROOT / "docs" / "from_flex.md"


def _pairs():
    """(title, Flex's Python, the kdsl program) of each section of the page."""
    for section in DOC.read_text().split("\n### ")[1:]:
        title = section.splitlines()[0]
        python = re.findall(r"```python\n(.*?)```", section, re.S)
        program = re.findall(r"```kdsl\n(.*?)```", section, re.S)
        assert len(python) == 1 and len(program) == 1, f"{title}: one Flex block and one kdsl block"
        yield pytest.param(python[0], program[0], id=title.split(":")[0])


def test_the_page_has_its_pairs():
    assert len(list(_pairs())) >= 12


@pytest.mark.parametrize("python,program", list(_pairs()))
@pytest.mark.parametrize("seed", [1, 2])
def test_flex_and_kdsl_compute_the_same_attention(python, program, seed):
    (name, kernel), = kdsl.compile(program, "from_flex.md", interpret=True).ir.items()
    gqa = kernel.tensor("k").shape[1] != kernel.tensor("q").shape[1]
    case = conform(kernel, AttentionCase(2, 4, 2 if gqa else 4, 200, 256, 32, seed=seed))
    q, k, v, caps = attention_inputs(kernel, case, Torch("cpu"))
    q, k, v = (x.double() for x in (q, k, v))
    want, _ = reference.attention(kernel, q, k, v, caps)

    scope = {"torch": torch, "kv_len": case.N, **caps}
    exec(python, scope)
    mask_mod, score_mod = scope.get("mask_mod"), scope.get("score_mod")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Flex warns that it runs uncompiled, which is the point here
        block_mask = flex.create_block_mask(mask_mod, case.B, case.H, case.M, case.N, device="cpu") \
            if mask_mod else None
        got = flex.flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask, enable_gqa=gqa)
    assert got.shape == want.shape
    # to float32's rounding: both evaluate a score expression over float32 captures in float32
    # where it reads them (Flex by torch's promotion, the reference as the kernel does), not
    # always in the same order; a wrong mask or sign is off by the outputs' size, ~0.1
    assert float((got - want).abs().max()) < 1e-5, name
