"""Leave a core to TTS while the LLM only decodes.

On a 2-core CPU the LLM decodes on both cores while Piper synthesizes the reply's first
fragment beside it, and that synthesis is on the time-to-first-audio path. Decode is
bound by memory bandwidth, and the LLM produces text ~5x faster than it is spoken. So
once every reply in flight has `after_tokens` tokens and no prompt is being prefilled,
decode steps run on one thread; prompt passes (a prompt tail, a partial transcript's
prefill) get every thread. The stage's default is 1, every decode step: on the GGUF
block kernels with passive OpenMP, a step on two threads pays a thread wake-up per
parallel region and is slower than on one (docs/llm.md, "Session 26"; it was 4, when
a second thread still bought ~15%).
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
