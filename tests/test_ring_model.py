"""tools/dev/ring_model.py, the FP8 GEMM's ring protocol as a host model: the kernel's forms
finish without an overwrite, and the forms that hung device calls are reported as deadlocks,
so that a change to the ring's waits can be checked here before it costs device time."""
import importlib.util
import random
import sys

import pytest

from conftest import ROOT

_spec = importlib.util.spec_from_file_location("ring_model", ROOT / "tools" / "dev" / "ring_model.py")
ring_model = sys.modules["ring_model"] = importlib.util.module_from_spec(_spec)  # (dataclasses look it up)
_spec.loader.exec_module(ring_model)


def _units(rng):
    return [rng.randint(1, 20) for _ in range(rng.randint(1, 6))]


@pytest.mark.parametrize("seed", range(40))
def test_the_kernels_rings_finish_without_overwrites(seed):
    """Every stage count the tile model gives, one-wave tiles (prefetch) and two-wave ones, and the
    paired form (a trial not kept, which ran correct on the device) on even STAGES >= 4."""
    rng = random.Random(seed)
    units = _units(rng)
    for stages in range(2, 9):
        for prefetch in (False, True):
            assert ring_model.run(stages, units, prefetch=prefetch) == "ok", (stages, units, prefetch)
            if stages % 2 == 0 and stages >= 4:
                assert ring_model.run(stages, units, pair=True, prefetch=prefetch) == "ok", (stages, units)


def test_the_forms_that_hung_are_deadlocks():
    """A producer waiting for a whole ring of free slots while one-wave tiles hold a slot until
    the next is full (KDSL_FP8_ISSUE_GROUP = STAGES: a device call hung, bench/NOTES.md
    thirty-third session); pairs over a ring of one pair, which is why the pair trial needed four stages."""
    assert ring_model.run(8, [16, 16], group=8, prefetch=True) == "deadlock"
    assert ring_model.run(8, [16, 16], group=7, prefetch=True) == "ok"
    assert ring_model.run(3, [16], group=2, prefetch=True) == "ok"
    assert ring_model.run(2, [16], pair=True, prefetch=True) == "deadlock"
    assert ring_model.run(2, [16], pair=True) == "ok"


def test_a_pair_handed_back_early_is_an_overwrite(monkeypatch):
    """The model sees hazards, not only hangs: a pair released after its first block lets the
    producer refill it while the math warpgroups still read its second slot."""
    monkeypatch.setattr(ring_model.Ring, "closes", lambda self, s, kb, nk: True)
    assert ring_model.run(4, [8, 8], pair=True) != "ok"
