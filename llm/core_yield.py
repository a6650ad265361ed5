"""Leave a core to TTS once every reply in flight has handed TTS its first fragment.

On a 2-core CPU the LLM decodes on both cores while Piper synthesizes the reply's first
fragment beside it, and that synthesis is on the time-to-first-audio path. Decode is
bound by memory bandwidth: a second thread buys it only ~15%, while the LLM produces
text ~5x faster than it is spoken. So once every reply in flight has `after_tokens`
tokens (its first fragment cut, docs/tts.md) and no prompt is being prefilled, decode
steps run on one thread; anything on the TTFT path (a prompt tail, a reply's first
tokens, a partial transcript's prefill) gets every thread. Measured in docs/llm.md.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


class CoreYield:
    def __init__(self, after_tokens: int, full_threads: int) -> None:
        """`after_tokens` 0, or a single thread to start with: never yields."""
        self.enabled = after_tokens > 0 and full_threads > 1
        self.after_tokens = after_tokens
        self.full_threads = full_threads
        self.yielding = False

    def before_step(self, reply_tokens: Iterable[int], prefilling: bool) -> None:
        """Set the thread count for the next step from the token counts of the replies
        still generating and whether any prompt is being prefilled."""
        if not self.enabled:
            return
        counts = list(reply_tokens)
        yielding = bool(counts) and not prefilling and min(counts) >= self.after_tokens
        if yielding != self.yielding:
            torch.set_num_threads(1 if yielding else self.full_threads)
            self.yielding = yielding
