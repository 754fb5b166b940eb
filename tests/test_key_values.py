"""passes/key_values.py: a mask's value gathered per key, which the Hopper kernel's partial tiles
gather once a key and hand to each element by a shuffle (KDSL_KEY_VALUES), and its mirror in the
wgmma backward, the value gathered per query (KDSL_BWD_QUERY_VALUES): which masks have one, the
identity mask == mask_valued with kx (qx) = the part at kv (q), and the builds."""
import re

import numpy as np
import pytest
from hypothesis import event, given, settings, strategies as st

from kdsl import ir
from kdsl.passes import key_values

from conftest import lowered

CAPS = ("\n    ks: f32[B, H, N]\n    thr: f32[B, H, M]\n    bk: i32[B, Hkv, N]\n    bq: i32[B, H, M]"
        "\n    doc: i32[B, N]\n    flag: bool[B, N]\n    lens: i32[B]\n    keep: bool[B, M, N]\n    allow: bool[4, 4]")


def program(mask: str) -> str:
    return (f"attention x {{\n    q: bf16[B, H, M, D]; k: bf16[B, Hkv, N, D]; v: bf16[B, Hkv, N, D]{CAPS}\n"
            f"    mask(b, h, i, j) = {mask}\n}}\n")


VALUED = ["ks[b, h, j] >= thr[b, h, i] or i == j",             # a threshold per row on a score per key
          "j <= i and bq[b, h, i] == bk[b, h // (H // Hkv), j]",  # buckets of the key's k/v head
          "doc[b, i] == doc[b, j]",                               # document ids (unsorted: partial tiles)
          "abs(ks[b, h, j] * 2.0 - float(i - j)) < 300.0",        # the value in arithmetic with both positions
          # inside a table's index (held-out 2's segment_rules, 5's class_table: ir.only_largest did not
          # look into a load's indices, and they found no part)
          "allow[bq[b, h, i] % 4, bk[b, h // (H // Hkv), j] % 4]",
          # values inside other values: one gather of the one inside all (ks; thr on the query's side)
          "ks[b, h, j] * 2.0 > thr[b, h, i] + 100.0 or (ks[b, h, j] < -100.0 and thr[b, h, i] < 0.0)"]
NOT_VALUED = ["j <= i",                                  # positions alone: kv_bounds.py's interval
              "j < lens[b]",                             # a bound read per batch, not at the key
              "flag[b, j] or abs(i - j) < 256",          # a bool part: key_mask's bits
              "ks[b, h, j] > thr[b, h, i] and doc[b, i] == doc[b, j]",  # two distinct key values
              "keep[b, i, j] and ks[b, h, j] > 0.0"]     # a streamed mask: read from shared memory already


@pytest.mark.parametrize("mask,valued", [*((m, True) for m in VALUED), *((m, False) for m in NOT_VALUED)])
def test_which_masks_take_key_values(mask, valued):
    assert key_values.applies(lowered(program(mask)), 128) == valued


def test_not_beside_key_bits_nor_on_tiles_of_partial_chunks():
    k = lowered(program(VALUED[0]))
    assert key_values.applies(k, 128) and key_values.applies(k, 64)
    assert not key_values.applies(k, 80)  # D=256's 80-key tile: no whole 32-key chunks
    assert not key_values.applies(k.with_attrs(key_mask=1), 128)


# the query's side (the backward): (mask, whether it has one value gathered at the query)
QUERY = [("ks[b, h, j] >= thr[b, h, i] or i == j", True), ("j <= i and bq[b, h, i] == bk[b, h // (H // Hkv), j]", True),
         ("doc[b, i] == doc[b, j]", True),   # one tensor read at both: doc[b, q] on the query's side
         ("j <= i", False), ("thr[b, h, i] > 0.0 and thr[b, h, i] < ks[b, h, j]", True),  # one part read twice
         ("thr[b, h, i] > 0.0 and bq[b, h, i] < 2", True),  # two distinct values: qx and qx2
         ("thr[b, h, i] > 0.0 and bq[b, h, i] < 2 and doc[b, i] > 0", False),  # three
         ("doc[b, i] == doc[b, j] and bq[b, h, i] == bk[b, h // (H // Hkv), j]", True),  # two levels of ids
         ("keep[b, i, j] and thr[b, h, i] > 0.0", False),  # a streamed mask
         # a band of key scores (held-out 42's score_band, with one bound): thr inside thr + 200
         ("ks[b, h, j] >= thr[b, h, i] and ks[b, h, j] <= thr[b, h, i] + 200.0", True),
         ("ks[b, h, j] >= thr[b, h, i] * 2.0 and ks[b, h, j] <= thr[b, h, i] + 200.0", True),
         ("ks[b, h, j] >= thr[b, h, i] * 2.0 and ks[b, h, j] <= float(bq[b, h, i])", True)]  # none inside both: two


@pytest.mark.parametrize("mask,has", QUERY)
def test_which_masks_have_a_query_value(mask, has):
    assert bool(key_values.query_parts(lowered(program(mask)))) == has


SIZES = (2, 4, 2, 512, 640)  # B, H, Hkv, M, N of the identity tests' draws


def _draw(rng) -> dict:
    """Random captured data for the masks above, at SIZES."""
    B, H, Hkv, M, N = SIZES
    return {"ks": rng.normal(0, 100, (B, H, N)).astype(np.float32), "thr": rng.normal(0, 100, (B, H, M)).astype(np.float32),
            "bk": rng.integers(0, 3, (B, Hkv, N)), "bq": rng.integers(0, 3, (B, H, M)), "doc": rng.integers(0, 3, (B, N)),
            "allow": rng.integers(0, 2, (4, 4)).astype(bool)}


@pytest.mark.parametrize("mask", VALUED)
def test_the_mask_reading_the_value_is_the_mask(mask):
    """The identity the kernel relies on, at random positions, heads and data: the mask with its
    part read as kx, kx the part evaluated at the element's key, is the mask."""
    from kdsl.semantics import eval_numpy
    whole = lowered(program(mask)).func("mask")
    part = key_values.part(whole)
    valued = key_values.valued(whole, part)
    assert not any(ir.uses(part, v) for v in ("q", "qf")) and ir.uses(part, "kv")
    assert not ir.loads_at(valued, "kv")  # the key's gathers all in kx
    rng = np.random.default_rng()
    B, H, Hkv, M, N = SIZES
    caps = _draw(rng)
    seen = set()
    for _ in range(200):
        q, kv, h, b = (int(rng.integers(0, n)) for n in (M, N, H, B))
        env = {"B": B, "H": H, "Hkv": Hkv, "M": M, "N": N, "D": 64, "b": b, "h": h, "q": q, "kv": kv,
               "qf": float(q), "kvf": float(kv), "dqkf": float(q - kv)}
        want = bool(eval_numpy(whole, env, caps, np.float64))
        kx = eval_numpy(part, env, caps, np.float64)
        got = bool(eval_numpy(valued, {**env, "kx": kx}, caps, np.float64))
        assert got == want, (ir.print_expr(part), q, kv)
        seen.add(want)
    assert seen == {True, False}  # the draws reach both sides of the mask


@pytest.mark.parametrize("mask", [m for m, has in QUERY if has])
def test_the_mask_reading_its_query_values_is_the_mask(mask):
    """The backward's identity: the mask with its query values read as qx (and qx2), each the part
    evaluated at the element's query, is the mask; and it loads nothing at the query then."""
    from kdsl.semantics import eval_numpy
    k = lowered(program(mask))
    whole, parts = k.func("mask"), key_values.query_parts(k)
    qvalued = key_values.valued(whole, parts, "q")
    assert 1 <= len(parts) <= 2 and not ir.loads_at(qvalued, ("q", "qf"))
    assert all(not ir.uses(p, "kv") for p in parts)
    rng = np.random.default_rng()
    B, H, Hkv, M, N = SIZES
    caps = _draw(rng)
    seen = set()
    for _ in range(300):
        q, h, b = (int(rng.integers(0, n)) for n in (M, H, B))
        kv = int(rng.integers(max(0, q - 200), min(N, q + 200))) if rng.random() < 0.5 else int(rng.integers(0, N))
        env = {"B": B, "H": H, "Hkv": Hkv, "M": M, "N": N, "D": 64, "b": b, "h": h, "q": q, "kv": kv,
               "qf": float(q), "kvf": float(kv), "dqkf": float(q - kv)}
        want = bool(eval_numpy(whole, env, caps, np.float64))
        xs = {name: eval_numpy(p, env, caps, np.float64) for name, p in zip(("qx", "qx2"), parts)}
        assert bool(eval_numpy(qvalued, {**env, **xs}, caps, np.float64)) == want, (mask, q, kv)
        seen.add(want)
    assert seen == {True, False}


_VALUE_LEAVES = ["ks[b, h, j]", "thr[b, h, i]", "float(bq[b, h, i])", "float(doc[b, j])", "float(doc[b, i])",
                 "float(i)", "float(j)", "float(i - j)", "50.0", "-25.0"]


@st.composite
def _value(draw, depth=2):
    if depth == 0 or draw(st.booleans()):
        return draw(st.sampled_from(_VALUE_LEAVES))
    form = draw(st.sampled_from(["({a} + {b})", "({a} - {b})", "({a} * 2.0)", "max({a}, {b})", "abs({a})"]))
    return form.format(a=draw(_value(depth - 1)), b=draw(_value(depth - 1)))


@st.composite
def _valued_mask(draw, depth=2):
    if depth == 0 or draw(st.booleans()):
        op = draw(st.sampled_from(["<", "<=", ">=", "==", "!="]))
        return f"({draw(_value())} {op} {draw(_value())})"
    form = draw(st.sampled_from(["({a} and {b})", "({a} or {b})", "(not {a})", "({a} or i == j)"]))
    return form.format(a=draw(_valued_mask(depth - 1)), b=draw(_valued_mask(depth - 1)))


@settings(max_examples=60, deadline=None)
@given(mask=_valued_mask(), seed=st.integers(0, 2**32 - 1))
def test_any_mask_reads_its_values_as_the_mask(mask, seed):
    """Masks over values read at the key and the query, drawn at random: wherever key_values finds
    the key's part or the query's parts (one, or two for the backward), the mask reading them as
    kx / qx, qx2 is the mask at random elements."""
    from kdsl.semantics import eval_numpy
    k = lowered(program(mask))
    whole = k.func("mask")
    kpart, qparts = key_values.part(whole), key_values.query_parts(k)
    event(f"key part {kpart is not None}, query parts {len(qparts)}")
    kvalued = key_values.valued(whole, kpart) if kpart is not None else None
    qvalued = key_values.valued(whole, qparts, "q") if qparts else None
    rng = np.random.default_rng(seed)
    B, H, Hkv, M, N = SIZES
    caps = _draw(rng)
    for _ in range(40):
        q, h, b = (int(rng.integers(0, n)) for n in (M, H, B))
        kv = int(rng.integers(0, N))
        env = {"B": B, "H": H, "Hkv": Hkv, "M": M, "N": N, "D": 64, "b": b, "h": h, "q": q, "kv": kv,
               "qf": float(q), "kvf": float(kv), "dqkf": float(q - kv)}
        want = bool(eval_numpy(whole, env, caps, np.float64))
        if kvalued is not None:
            kx = eval_numpy(kpart, env, caps, np.float64)
            assert bool(eval_numpy(kvalued, {**env, "kx": kx}, caps, np.float64)) == want, (mask, q, kv)
        if qvalued is not None:
            xs = {n: eval_numpy(p, env, caps, np.float64) for n, p in zip(("qx", "qx2"), qparts)}
            assert bool(eval_numpy(qvalued, {**env, **xs}, caps, np.float64)) == want, (mask, q, kv)


def test_the_variant_carries_the_value_and_the_valued_mask():
    from kdsl.codegen.emit import generate
    src = generate(lowered(program(VALUED[1]), 128)).source
    assert "kKeyValues = KDSL_KEY_VALUES && true" in src and "typedef int KeyValue;" in src
    value = re.search(r"KeyValue mask_key_value\([^)]*\) \{\s*return (.*);", src).group(1)
    assert "cap_bk" in value and "cap_bq" not in value
    valued = re.search(r"bool mask_valued\([^)]*\) \{\s*return (.*);", src).group(1)
    assert "== kx" in valued and "cap_bk" not in valued
    plain = generate(lowered(program("j <= i"), 128)).source
    assert "kKeyValues = KDSL_KEY_VALUES && false" in plain


def test_the_build_gathers_once_a_key_and_shuffles(monkeypatch):
    """row_threshold at head dim 128 (held-out set 40): with the values the partial tiles' loop
    loads nothing (a tile's BN / 32 gathers a thread before it, 16 fewer LDG a copy of the loop) and
    takes them by SHFL; nothing spills either way."""
    from kdsl.grammar import parse
    from kdsl.passes import pipeline
    from kdsl.runtime.compiler import build
    from kdsl.sass import find_cuobjdump, inspect
    if not find_cuobjdump():
        pytest.skip("cuobjdump is needed for the SASS check: pip install 'kdsl[sass]'")
    k = pipeline.check(parse(program(VALUED[0]), "t.kd"))[0]
    reps = {}
    for on in (0, 1, None):  # None: the default, on since the eighty-third session's timings
        if on is None:
            monkeypatch.delenv("KDSL_DEFINES")
        else:
            monkeypatch.setenv("KDSL_DEFINES", f"KDSL_KEY_VALUES={on}")
        built = build(k, "sm_90a", 128)
        reps[on] = rep = inspect(built.compiled.cubin, built.generated.entry)
        assert rep.local_bytes == 0 and rep.spill_ops == 0, on
    assert reps[None].other_ops == reps[1].other_ops
    assert reps[0].other_ops["LDG"] - reps[1].other_ops["LDG"] >= 16, (reps[0].other_ops, reps[1].other_ops)
    assert reps[1].other_ops["SHFL"] >= reps[0].other_ops["SHFL"] + 16


def test_the_backward_gathers_once_a_query_and_shuffles(monkeypatch):
    """row_threshold's backward at head dims 64 and 128, and 256 (the wide kernel): with the query
    values a step's per-element gathers of its queries' thresholds go (16 a thread a 64-query block,
    8 in the wide kernel's half; the lanes' before the wgmmas are waited for instead), taken by SHFL;
    nothing spills either way."""
    from kdsl.grammar import parse
    from kdsl.passes import pipeline
    from kdsl.runtime.compiler import build
    from kdsl.runtime.programs import Program
    from kdsl.sass import find_cuobjdump, inspect
    if not find_cuobjdump():
        pytest.skip("cuobjdump is needed for the SASS check: pip install 'kdsl[sass]'")
    k = pipeline.check(parse(program(VALUED[0]), "t.kd"))[0]
    for d in (64, 128, 256):
        reps = {}
        for on in (0, 1, None):  # None: the default (on)
            if on is None:
                monkeypatch.delenv("KDSL_DEFINES")
            else:
                monkeypatch.setenv("KDSL_DEFINES", f"KDSL_BWD_QUERY_VALUES={on}")
            built = build(k, "sm_90a", d, program=Program(backward=True))
            reps[on] = rep = inspect(built.compiled.cubin, built.generated.entry)
            assert rep.local_bytes == 0 and rep.spill_ops == 0, (d, on)
        assert reps[None].other_ops == reps[1].other_ops, d
        wide = d > 128
        assert reps[0].other_ops["LDG"] - reps[1].other_ops["LDG"] >= (6 if wide else 12), (d, reps[0].other_ops,
                                                                                              reps[1].other_ops)
        assert reps[1].other_ops["SHFL"] >= reps[0].other_ops["SHFL"] + (8 if wide else 16)


def test_the_backward_gathers_two_query_values(monkeypatch):
    """Two levels of ids (held-out 27's two_level_docs; score_band's lo and hi): both values of a
    step's queries gathered by its lanes and shuffled (KDSL_BWD_QUERY_VALUES2, on by default), where
    each element gathered both: at D=128 the per-element gathers go (LDG 101 -> 73), SHFL 32 more,
    and local memory with them (88 -> 8 B; 72 -> 0 at D=256): never more local memory than without."""
    from kdsl.grammar import parse
    from kdsl.passes import pipeline
    from kdsl.runtime.compiler import build
    from kdsl.runtime.programs import Program
    from kdsl.sass import find_cuobjdump, inspect
    if not find_cuobjdump():
        pytest.skip("cuobjdump is needed for the SASS check: pip install 'kdsl[sass]'")
    k = pipeline.check(parse(program("doc[b, i] == doc[b, j] and bq[b, h, i] == bk[b, h // (H // Hkv), j]"),
                             "t.kd"))[0]
    for d in (64, 128, 256):
        reps = {}
        for on in (0, 1, None):
            if on is None:
                monkeypatch.delenv("KDSL_DEFINES")
            else:
                monkeypatch.setenv("KDSL_DEFINES", f"KDSL_BWD_QUERY_VALUES2={on}")
            built = build(k, "sm_90a", d, program=Program(backward=True))
            reps[on] = inspect(built.compiled.cubin, built.generated.entry)
        assert reps[None].other_ops == reps[1].other_ops, d
        assert reps[1].local_bytes <= reps[0].local_bytes, (d, reps[1].local_bytes, reps[0].local_bytes)
        if d == 128:
            assert reps[0].other_ops["LDG"] - reps[1].other_ops["LDG"] >= 20, (reps[0].other_ops, reps[1].other_ops)
            assert reps[1].other_ops["SHFL"] >= reps[0].other_ops.get("SHFL", 0) + 32


def _trial_builds(switch: str, monkeypatch):
    """row_threshold's D=128 forward built with `switch` off, on and left to its default: ({0, 1,
    None}: SASS report, {0, 1, None}: generated source); none may spill."""
    from kdsl.grammar import parse
    from kdsl.passes import pipeline
    from kdsl.runtime.compiler import build
    from kdsl.sass import find_cuobjdump, inspect
    if not find_cuobjdump():
        pytest.skip("cuobjdump is needed for the SASS check: pip install 'kdsl[sass]'")
    k = pipeline.check(parse(program(VALUED[0]), "t.kd"))[0]
    reps, sources = {}, {}
    for trial in (0, 1, None):
        if trial is None:
            monkeypatch.delenv("KDSL_DEFINES", raising=False)
        else:
            monkeypatch.setenv("KDSL_DEFINES", f"{switch}={trial}")
        built = build(k, "sm_90a", 128)
        sources[trial] = built.generated.source
        reps[trial] = rep = inspect(built.compiled.cubin, built.generated.entry)
        assert rep.local_bytes == 0 and rep.spill_ops == 0, (switch, trial)
    return reps, sources


def test_key_values_drop_keys_past_n_once_a_tile(monkeypatch):
    """KDSL_KEY_VALUES_RANGE (on by default since the eighty-fourth session's H200 A/B; 0 for the
    per-element compare): keys past N leave a ragged tile's bits once (by interval bits), not by
    a compare an element, and row_threshold's valued mask, which loads nothing at the key
    (kValuedKeyFree), takes its key unclamped: the loop's ISETP and VIMNMX a copy go
    (row_threshold D=128: 142 -> 83 instructions a copy of the loop, its bits packed a chunk at a
    time); nothing spills; the default build is the switch-on build."""
    reps, sources = _trial_builds("KDSL_KEY_VALUES_RANGE", monkeypatch)
    assert all("kValuedKeyFree = true" in src for src in sources.values())
    assert reps[None].other_ops == reps[1].other_ops
    for op in ("ISETP", "VIMNMX"):
        assert reps[0].other_ops[op] - reps[1].other_ops[op] >= 16, (op, reps[0].other_ops, reps[1].other_ops)
