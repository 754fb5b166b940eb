"""What to write instead, where a parse fails on a habit from Python, PyTorch or C.

FlexAttention's score_mod and mask_mod are Python; people bring `torch.tanh(s)`, `a & b`,
`x if c else y`, `bias[h][i]`, `s ** 2` and chained comparisons with them. The parser's own
message names the unexpected token; the hint appended here names the kdsl form. Each hint
looks only at the source around the failure, so a wrong guess costs a sentence, not a
wrong error location.
"""
from __future__ import annotations

import re

# a character Lark cannot start a token with -> the kdsl way
_CHARACTER_HINTS = {
    "&": "conditions combine with 'and', 'or' and 'not', not & or &&",
    "|": "conditions combine with 'or', 'and' and 'not', not | or ||",
    "!": "negate a condition with 'not'",
    "?": "choose with where(cond, a, b)",
    "^": "kdsl has no power or xor operator; write s * s, or exp2(y * log2(x)) for x ** y",
    "@": "s is already the scaled q.k product; write the score from s",
    "'": "kdsl has no strings; -inf and inf are literals: write -inf for float('-inf')",
    '"': "kdsl has no strings; -inf and inf are literals: write -inf for float('-inf')",
}
# a Python word just before the failure -> the kdsl way
_WORD_HINTS = {
    "if": "choose with where(cond, a, b), not a if c else b",
    "else": "choose with where(cond, a, b), not a if c else b",
    "in": "test a range as lo <= x and x < hi",
    "def": "define a function as name(params) = expression, without def or return",
    "return": "define a function as name(params) = expression, without def or return",
    "lambda": "define a function as name(params) = expression",
}


def character_hint(text: str, pos: int) -> str:
    """For an unexpected character at `pos`."""
    ch = text[pos]
    if ch == "." and re.search(r"[A-Za-z_]\w*$", text[:pos]):
        return ("kdsl has no modules, attributes or methods: call a function by its name, tanh(s) for "
                "torch.tanh(s), and clamp with min(max(x, lo), hi)")
    return _CHARACTER_HINTS.get(ch, "")


def token_hint(text: str, pos: int, token: str, token_type: str) -> str:
    """For an unexpected token starting at `pos` (its text and Lark type)."""
    before = text[:pos].rstrip()
    if token == "*" and before.endswith("*"):
        return "kdsl has no power operator; write s * s, or exp2(y * log2(x)) for x ** y"
    if token == "[" and before.endswith("]"):
        return "index with one pair of brackets: bias[h, i - j], not bias[h][i - j]"
    if token_type == "CMP":
        return "comparisons do not chain; write a <= b and b <= c"
    words = re.findall(r"[A-Za-z_]\w*", before.split("\n")[-1] + " " + token)
    for word in reversed(words[-3:]):
        if word in _WORD_HINTS:
            return _WORD_HINTS[word]
    return ""


def with_hint(message: str, hint: str) -> str:
    return f"{message}; {hint}" if hint else message
