"""`kdsl tune`: rewrite a kernel's hot IR blocks in a closed propose -> verify -> time loop.

A rewriter (the built-in search, or a language model behind an OpenAI-compatible endpoint)
answers with replacement `def NAME = ...` / `attr NAME = ...` lines; kdsl parses them with
its own IR parser, and nothing else of the answer is used, run or pasted anywhere.

    protocol.py    what the proposer is shown, and how replacement lines are read
    guard.py       names offered, types, legal schedules, then semantics against the original
    exprcheck.py   the cheap semantic check: float64 evaluation on index grids, tile by tile
    rewriters.py   the search (schedule attributes, algebraic rules) and the model
    llm_client.py  the chat-completions client: timeout, retries, size cap, key from the env
    measure.py     GPU timing: repeated, interleaved, faster only beyond noise
    loop.py        budget, log (JSONL, resumable), progress, summary, the tuned IR file

docs/tune.md says what the model is and is not trusted with.
"""
