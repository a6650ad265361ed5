"""The in-process engine behind the backend protocol: open prompts are prefilled for real.

A thin layer: the stage's latency path is the engine's (`add_request(prompt_complete=
False)` / `append_tokens` / `start_decode` / `step`); the only extra work is keeping the
ids of each open prompt to send the engine just what a longer prompt adds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from voxrelay.asr.turn_end import is_trailing_mark
from voxrelay.llm.backend import REPLY_HEADER
from voxrelay.llm.config import LLMConfig
from voxrelay.llm.engine import LLMEngine
from voxrelay.llm.sequence import TokenOutput

# The most tokens of closing marks looked past at the end of the user's words.
MAX_MARK_TOKENS = 8


class NativeBackend:
    probes_end_of_turn = True

    def __init__(self, config: LLMConfig, engine: LLMEngine | None = None) -> None:
        self.engine = LLMEngine(config) if engine is None else engine
        self.tokenizer = self.engine.tokenizer
        self._open: dict[int, list[int]] = {}  # ids of each open prompt
        # The stage counts a prompt's tokens and then opens or submits the same text:
        # one remembered encoding spares the second pass over a ~300-token prompt.
        self._last_text = ""
        self._last_ids: list[int] = []
        (self._im_end,) = self.tokenizer.encode(REPLY_HEADER[: REPLY_HEADER.index("\n")])

    def render(self, messages: Sequence[Mapping[str, str]]) -> str:
        return self.tokenizer.apply_chat_template(messages, add_generation_prompt=True)

    def count_tokens(self, prompt: str) -> int:
        return len(self._encode(prompt))

    def open(self, request_id: int, prompt: str) -> None:
        ids = self._encode(prompt)
        self.engine.add_request(request_id, ids, prompt_complete=False)
        self._open[request_id] = ids

    def extend(self, request_id: int, prompt: str) -> None:
        ids = self._encode(prompt)
        self._update(request_id, self._open[request_id], ids, prompt_complete=False)
        self._open[request_id] = ids

    def submit(self, request_id: int, prompt: str, probe: bool = True) -> None:
        ids = self._encode(prompt)
        previous = self._open.pop(request_id, None)
        if previous is None:
            self.engine.add_request(request_id, ids)
        else:
            self._update(request_id, previous, ids, prompt_complete=True)
        # The <|im_end|> that closes the user's words: its probability is the model's
        # P(the user's turn is over), read from the prefill this reply runs anyway. It is
        # read after the words, before Whisper's closing marks (asr/turn_end.py
        # `probe_text`), which the prompt keeps for the reply.
        if probe and prompt.endswith(REPLY_HEADER) and self._im_end in ids:
            end = len(ids) - 1 - ids[::-1].index(self._im_end)
            self.engine.probe(request_id, self._after_words(ids, end), self._im_end)

    def _after_words(self, ids: list[int], end: int) -> int:
        """The position after the user's words in `ids`, whose message closes at `end`:
        before the closing marks that end them (a few tokens; a tail that decodes to
        half a character is the middle of one, so no cut goes there)."""
        after = end
        for start in range(end - 1, max(end - MAX_MARK_TOKENS, 1) - 1, -1):
            tail = self.tokenizer.decode(ids[start:end])
            if "\ufffd" in tail:
                continue
            if not is_trailing_mark(tail):
                break
            after = start
        return after

    def prefilled_tokens(self, request_id: int) -> int:
        if request_id not in self._open:
            return 0
        return self.engine.num_computed_tokens(request_id)

    def abort(self, request_id: int) -> bool:
        self._open.pop(request_id, None)
        return self.engine.abort(request_id)

    def step(self) -> list[TokenOutput]:
        return self.engine.step()

    def has_pending_work(self) -> bool:
        return self.engine.has_pending_work()

    def close(self) -> None:
        for request_id in list(self._open):
            self.abort(request_id)

    def _update(
        self, request_id: int, previous: list[int], ids: list[int], prompt_complete: bool
    ) -> None:
        if ids[: len(previous)] == previous:
            self.engine.append_tokens(request_id, ids[len(previous) :])
            if prompt_complete:
                self.engine.start_decode(request_id)
            return
        # A revised word: the request keeps the K/V of what the two prompts share, so
        # the rollback costs only the tokens after the divergence.
        self.engine.replace_prompt(request_id, ids)
        if prompt_complete:
            self.engine.start_decode(request_id)

    def _encode(self, prompt: str) -> list[int]:
        if prompt != self._last_text:
            self._last_text, self._last_ids = prompt, self.tokenizer.encode(prompt)
        return self._last_ids
