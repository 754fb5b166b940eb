"""Generated proposals for samples/alibi.kd (a score reading a captured tensor, a causal mask
and its tile predicates), each labelled by construction: wrong ones differ from the program
at a stated point, are illegal, or are not IR at all; correct ones are identities of the
program (under its mask) or legal schedules. tests/test_tune_adversarial.py serves them from
a loopback chat endpoint to `kdsl tune --verify-only --interpret`.

Positions are chosen inside the guard's smallest grids' reach only as far as the construction
needs: a score change at kept (q, kv) in a row with another kept key (kv = 0 and kv = q are
kept for q >= 1) changes that row's softmax, whatever the guard's shapes.
"""
from __future__ import annotations

import random

LOG2E = "1.4426950408889634"
SLOPE = "(load:f32 slopes h)"
DIST = "(float:f32 (abs:i32 (sub:i32 q kv)))"
BIAS = f"(mul:f32 (mul:f32 {SLOPE} {DIST}) {LOG2E})"
BASE = f"(sub:f32 (mul:f32 qk scale_log2) {BIAS})"
MASK = "(le:bool kv q)"


def score(e):
    return f"def score_log2 = {e}"


def _wrong_scores(rng):
    out = []
    rows = [1, 2, 63, 64, 65, 127, 128, 129, 130, 191, 255, 256, 257, 258]
    deltas = ["0.5", "-0.5", "3.0", "-7.0", "100.0", "-inf", "inf", "nan"]
    for _ in range(48):
        q = rng.choice(rows)
        kv = rng.choice([0, q - 1, q, q // 2])
        out.append((score(f"(add:f32 {BASE} (where:f32 (and:bool (eq:bool q {q}) (eq:bool kv {kv})) "
                          f"{rng.choice(deltas)} 0.0))"), f"point q={q} kv={kv}"))
    for k in (1, 64, 127, 128, 129, 255, 256):  # rows q >= k keep keys on both sides of k
        out.append((score(f"(add:f32 {BASE} (where:f32 (ge:bool kv {k}) {rng.choice(deltas[:5])} 0.0))"),
                    f"columns from {k}"))
    out += [(score(f"(add:f32 {BASE} (where:f32 (ge:bool kv (mul:i32 (floordiv:i32 N 128) 128)) 2.0 0.0))"),
             "last partial kv tile"),
            (score(f"(add:f32 {BASE} (where:f32 (and:bool (eq:bool q (sub:i32 M 1)) (eq:bool kv 0)) 2.0 0.0))"),
             "last row"),
            (score(f"(add:f32 {BASE} (where:f32 (eq:bool q 1) (float:f32 kv) 0.0))"), "second row")]
    for factor in ("1.4571219912", "2.885390081777927", "0.7213475204444817", "1.0", "0.0"):
        out.append((score(f"(sub:f32 (mul:f32 qk scale_log2) (mul:f32 (mul:f32 {SLOPE} {DIST}) {factor}))"),
                    f"bias factor {factor}"))
    out += [(score(f"(sub:f32 (mul:f32 qk scale_log2) (mul:f32 (mul:f32 {SLOPE} (float:f32 (sub:i32 kv q))) {LOG2E}))"),
             "no abs, flipped"),
            (score(f"(add:f32 (mul:f32 qk scale_log2) {BIAS})"), "bias sign"),
            (score("(mul:f32 qk scale_log2)"), "bias dropped"),
            (score(f"(sub:f32 (mul:f32 qk scale) {BIAS})"), "natural-domain dot product"),
            (score(f"(sub:f32 (mul:f32 qk 0.18033688011112042) {BIAS})"), "scale hard-coded for D=64"),
            (score(f"(sub:f32 (mul:f32 (mul:f32 qk scale_log2) 2.0) {BIAS})"), "dot product doubled"),
            (score(f"(sub:f32 (mul:f32 qk scale_log2) (mul:f32 (mul:f32 (load:f32 slopes (sub:i32 H (add:i32 h 1))) "
                   f"{DIST}) {LOG2E}))"), "heads reversed"),
            (score(f"(sub:f32 (mul:f32 qk scale_log2) (mul:f32 (mul:f32 (load:f32 slopes 0) {DIST}) {LOG2E}))"),
             "head 0's slope for all"),
            (score(f"(where:f32 (lt:bool (sub:i32 q kv) 256) {BASE} -inf)"), "a window smuggled in"),
            (score(f"(where:f32 (ne:bool kv 0) {BASE} -inf)"), "first key masked"),
            (score(f"(max:f32 {BASE} -2.0)"), "clamped"),
            (score(f"(sub:f32 (mul:f32 qk scale_log2) (mul:f32 (mul:f32 {SLOPE} (float:f32 (min:i32 (abs:i32 "
                   f"(sub:i32 q kv)) 200))) {LOG2E}))"), "distance clamped at 200")]
    return out


def _wrong_masks():
    masks = ["(lt:bool kv q)", "(le:bool kv (add:i32 q 1))", "(le:bool kv (sub:i32 q 1))", "(le:bool q kv)",
             "(and:bool (le:bool kv q) (ne:bool q 0))", "(or:bool (le:bool kv q) (eq:bool kv (add:i32 q 1)))",
             "(and:bool (le:bool kv q) (lt:bool q (sub:i32 M 1)))", "(and:bool (le:bool kv q) (ne:bool kv 0))",
             "(le:bool kv (min:i32 q 200))", "(and:bool (le:bool kv q) (lt:bool (sub:i32 q kv) 128))",
             "(and:bool (le:bool kv q) (ne:bool kv 129))", "true", "false", "(eq:bool kv q)",
             "(le:bool (floordiv:i32 kv 64) (floordiv:i32 q 64))", "(and:bool (le:bool kv q) (lt:bool kv (sub:i32 N 1)))"]
    return [(f"def mask = {m}", f"mask {m}") for m in masks]


def _wrong_tiles():
    empty = ["true", "(ge:bool k0 q0)", "(le:bool k0 q1)", "(eq:bool k0 q0)", "(ge:bool k1 q0)",
             "(gt:bool (add:i32 k0 128) q1)", "(lt:bool k0 (add:i32 q1 1))", "(gt:bool k1 q1)"]
    full = ["true", "(le:bool k0 q0)", "(le:bool k0 q1)", "(ge:bool q1 k0)", "(le:bool k1 q1)", "(ge:bool q0 k0)",
            "(lt:bool k0 (add:i32 q0 1))"]
    return [(f"def tile_empty = {e}", f"tile_empty {e}") for e in empty] + \
           [(f"def tile_full = {f}", f"tile_full {f}") for f in full]


def _illegal_attrs():
    values = {"tile_n": ["0", "-128", "100", "63", "512", "1000000", "1e3", '"128"', "true", "null", "[128]", "128.5",
                         "16", "NaN", "Infinity"],
              "consumers": ["0", "4", "-1", "2.0"], "stages": ["0", "1", "9", "1000"],
              "schedule": ['"fastest"', "1", '"GRID"'], "math": ['"approx"', '"unsafe"', "true"]}
    out = [(f"attr {a} = {v}", f"{a} = {v}") for a, vs in values.items() for v in vs]
    out += [("attr tile_n = 256\nattr stages = 4", "too much shared memory"),
            ("attr tile_n = 192\nattr stages = 3", "too much shared memory at D=128")]
    for a in ("smem_bytes", "threads", "head_dim", "kernel", "arch", "mask_tiles", "producer_regs", "tile_m", "roles",
              "consumer_regs", "tile_k", "grouping", "exact"):
        out.append((f"attr {a} = 128", f"not tunable: {a}"))
    for d in ("score", "scale", "score_bias", "tile_both", "out"):
        out.append((f"def {d} = (mul:f32 qk scale_log2)", f"def {d} not offered"))
    return out


def _not_ir():
    deep = "(neg:f32 " * 200 + "qk" + ")" * 200
    return [(score("__import__('os').system('touch PWNED')"), "python"),
            ("attr tile_n = __import__('os').system('touch PWNED')", "python in JSON"),
            (score("$(touch PWNED)"), "shell"), (score("eval(\"qk * scale_log2\")"), "eval"),
            (score("qk * scale_log2 - slopes[h] * abs(q - kv) * 1.4427"), "infix source syntax"),
            (score("(system:f32 qk)"), "unknown op"), (score("(add:f64 qk qk)"), "unknown type"),
            (score("(add:f32 (mul:f32 qk scale_log2)"), "unbalanced"), (score("(mul:f32 qk scale_log2))"), "extra paren"),
            (score("(sub:f32 (mul:f32 qk scale_log2) (load:f32 q b h q 0))"), "load of an operand"),
            (score("(sub:f32 (mul:f32 qk scale_log2) (load:f32 slopes (add:i32 h 1)))"), "load past the end"),
            (score("(sub:f32 (mul:f32 qk scale_log2) (load:f32 slopes (sub:i32 h 1)))"), "load before the start"),
            (score("(sub:f32 (mul:f32 qk scale_log2) (load:f32 slopes q))"), "load by row"),
            (score("(sub:f32 (mul:f32 qk scale_log2) (load:f32 slopes h 0))"), "load arity"),
            (score("(sub:f32 (mul:f32 qk scale_log2) (load:i32 slopes h))"), "load type"),
            (score("(add:f32 qk 99999999999)"), "int out of range"), (score(deep), "too deep"),
            (score("(add:f32 qk " + "1.0 " * 2000 + ")"), "too long"),
            (score("(mul:f32 qk scale_log2) } attention evil { input q: bf16[B, H, M, D]"), "second kernel"),
            ("dеf score_log2 = (mul:f32 qk scale_log2)", "look-alike letter"),
            (f"{score(BASE)}\n{score(BASE)}", "replaced twice"),
            ("\n".join(f"attr stages = {i}" for i in range(20)), "too many lines"),
            (score("(mul:f32 qk q)"), "type: f32 * i32"), (score("(int:i32 qk)"), "type: i32 score"),
            (score("(where:f32 q 1.0 0.0)"), "type: int condition"), (score("(not:bool qk)"), "type: not of f32"),
            (score("(add:f32 qk s)"), "s is not in score_log2"), (score("(add:f32 qk q0)"), "tile bound in score"),
            ("def tile_empty = (gt:bool kv q)", "element index in a tile predicate"),
            ("def mask = (le:bool k0 q)", "tile bound in the mask")]


def _correct():
    scores = [BASE,
              f"(sub:f32 (mul:f32 qk scale_log2) (mul:f32 {DIST} (mul:f32 {SLOPE} {LOG2E})))",
              f"(sub:f32 (mul:f32 qk scale_log2) (mul:f32 (mul:f32 {SLOPE} (float:f32 (abs:i32 (sub:i32 kv q)))) {LOG2E}))",
              f"(sub:f32 (mul:f32 qk scale_log2) (mul:f32 (mul:f32 {SLOPE} (float:f32 (sub:i32 q kv))) {LOG2E}))",
              f"(add:f32 {BASE} 0.0)", f"(mul:f32 {BASE} 1.0)", f"(add:f32 {BASE} (float:f32 q))",
              f"(add:f32 {BASE} (where:f32 (eq:bool q 0) 5.0 0.0))", f"(sub:f32 (mul:f32 scale_log2 qk) {BIAS})",
              f"(sub:f32 (mul:f32 (mul:f32 qk scale) {LOG2E}) {BIAS})", f"(neg:f32 (neg:f32 {BASE}))",
              f"(add:f32 (mul:f32 qk scale_log2) (mul:f32 (mul:f32 {SLOPE} (float:f32 (sub:i32 kv q))) {LOG2E}))"]
    masks = ["(ge:bool q kv)", "(not:bool (gt:bool kv q))", "(lt:bool kv (add:i32 q 1))", "(le:bool (sub:i32 kv q) 0)",
             "(or:bool (lt:bool kv q) (eq:bool kv q))"]
    empty = ["(lt:bool q1 k0)", "false", "(gt:bool k0 (add:i32 q1 5))", "(gt:bool k0 q1)"]
    full = ["(ge:bool q0 k1)", "false", "(le:bool k1 (sub:i32 q0 1))"]
    attrs = ['attr math = "fast"', 'attr math = "exact"', "attr tile_n = 64", "attr tile_n = 80", "attr tile_n = 96",
             "attr tile_n = 176\nattr stages = 2", "attr stages = 2", "attr tile_n = 64\nattr stages = 4", "attr consumers = 1",
             "attr consumers = 3\nattr stages = 2", 'attr schedule = "persistent"', "attr tile_n = 64\nattr consumers = 1\nattr stages = 2"]
    out = [(score(s), f"score identity {i}") for i, s in enumerate(scores)]
    out += [(f"def mask = {m}", f"mask identity {m}") for m in masks]
    out += [(f"def tile_empty = {e}", f"sound tile_empty {e}") for e in empty]
    out += [(f"def tile_full = {f}", f"sound tile_full {f}") for f in full]
    out += [(a, a) for a in attrs]
    out.append((f"{score(scores[1])}\nattr tile_n = 96\nattr math = \"fast\"", "score and schedule together"))
    return out


_WRAPPERS = [
    lambda body: f"```\n{body}\n```",
    lambda body: f"Here is my proposal:\n\n```ir\n{body}\n```\n\nIt should be faster.",
    lambda body: f"<think>\nLet me see... ```\ndef score_log2 = (mul:f32 qk scale_log2)\n```\n</think>\n```\n{body}\n```",
    lambda body: f"```text\nfirst attempt, ignore:\n```\nFinal answer:\n```\n{body}\n```",
]


def proposals(seed: int = 0) -> list[tuple[str, bool, str]]:
    """(answer text, whether it must be accepted, label): wrong ones and correct ones, shuffled."""
    rng = random.Random(seed)
    wrong = _wrong_scores(rng) + _wrong_masks() + _wrong_tiles() + _illegal_attrs() + _not_ir()
    items = [(body, False, label) for body, label in wrong] + [(body, True, label) for body, label in _correct()]
    rng.shuffle(items)
    return [(rng.choice(_WRAPPERS)(body), ok, label) for body, ok, label in items]
