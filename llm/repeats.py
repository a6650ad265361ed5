"""No verbatim loops in a reply: the tokens that would repeat one of its n-grams.

Greedy decoding of a 135M model falls into loops ("I'm glad to hear that. I'm glad to
hear that.", a sentence of condolence three times) that a listener hears in full, up
to `max_new_tokens`. Before each sampling step, every token that would complete an
n-gram the reply already holds is banned. Only the reply counts, not the prompt: an
answer may quote the user. n = 6 changed 2 of 38 greedy replies in a one-off run (both
loops); n = 4 changed 10, n = 3 17, rewording ordinary phrases ("assist you." ->
"assist."): docs/llm.md, "What a reply says".
"""

from __future__ import annotations

from collections.abc import Sequence


def banned_tokens(reply: Sequence[int], n: int) -> list[int]:
    """Tokens that would make the last n tokens of `reply` an n-gram it already holds
    (n < 2: none)."""
    if n < 2 or len(reply) < n:
        return []
    tail = list(reply[len(reply) - n + 1 :])
    return [
        reply[start + n - 1]
        for start in range(len(reply) - n + 1)
        if list(reply[start : start + n - 1]) == tail
    ]
