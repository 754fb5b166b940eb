"""docs/testing.md's example runs as written: a user's own variant property-tested through
the interpreter with kdsl.testing, in a few lines."""
import re

import pytest

from kdsl import ir
from kdsl.passes import mask_analysis

from conftest import ROOT

pytest.importorskip("hypothesis")


def _doc_tests():
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "testing.md").read_text(), flags=re.S)
    assert blocks, "docs/testing.md lost its python example"
    ns = {}
    for code in blocks:
        exec(compile(code, "docs/testing.md", "exec"), ns)
    tests = [f for name, f in ns.items() if name.startswith("test_") and callable(f)]
    assert tests, "the example defines no test"
    return tests


def test_testing_doc_example_passes():
    for test in _doc_tests():
        test()  # a Hypothesis test: its examples run through the interpreter


def test_testing_doc_example_catches_a_broken_lowering(monkeypatch):
    """Not vacuous: with mask analysis calling partial tiles 'full', the doc's test fails."""
    real = mask_analysis.run

    def unsound(k):
        k = real(k)
        return k.with_func("tile_full", ir.Op("bool", "not", (k.func("tile_empty"),)))
    monkeypatch.setattr(mask_analysis, "run", unsound)
    with pytest.raises(AssertionError, match=r"fails on AttentionCase\("):
        for test in _doc_tests():
            test()
