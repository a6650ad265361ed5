"""What the `openai` and `vllm` backends share: an asyncio loop on its own thread, one
streaming task per reply, prefix warming, and a queue the stage's loop drains.

The stage loop is synchronous (rings, zmq polling); the clients are asyncio. The loop
thread owns every coroutine and the warming state; the stage thread only schedules work
onto it and reads finished tokens from a thread-safe queue, so neither blocks the other.

Warming: while the user speaks, each longer stable prompt is sent as a prefill-only
request (max_tokens=1, result discarded), so the server computes and caches its blocks
before the turn ends. At most one warming request per open prompt is in flight; a newer
text waits for it and replaces any older waiting text (partials come faster than a
prefill on a busy server, and only the newest prefix matters).

End-of-turn probe: a remote stream carries no logits, so with `probe_logprobs` > 0 each
reply's request goes out beside a probe: the prompt up to the user's last word (without
Whisper's closing mark, which the reply's prompt keeps: asr/turn_end.py `probe_text`),
max_tokens=1, asking the top `probe_logprobs` log-probabilities of the next token. The
probability of <|im_end|> there is the native engine's probe (llm/runner.py), from the
server's own model. Prefix-cached like a warm, it costs the server a forward over a few
new tokens. Past the top N, <|im_end|> is rarer than each of them and than the mass they
leave; a fixed share of the smaller bound stands for it (`end_of_turn_probability`,
ABSENT_SHARE). The first token of
the reply carries it, as the native engine's does (`probe_prob`), waiting at most
PROBE_GRACE_S for it; a server that rejects `logprobs` turns the probe off for good.
"""

from __future__ import annotations

import asyncio
import logging
import math
import queue
import threading
from collections.abc import AsyncIterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from voxrelay.asr.turn_end import probe_text
from voxrelay.llm.backend import NO_TOKEN_ID, REPLY_HEADER
from voxrelay.llm.config import LLMConfig
from voxrelay.llm.sequence import FinishReason, TokenOutput
from voxrelay.llm.tokenizer import ChatTokenizer

log = logging.getLogger(__name__)

# How long `step()` waits for a token while replies stream: the stage loop looks at its
# control and data rings at least this often, and a token is taken as soon as it lands.
POLL_WAIT_S = 0.005
# How long the reply's first token waits for the end-of-turn probe that went out with it:
# the probe and the reply share the server's prefix cache and finish about together.
PROBE_GRACE_S = 0.25
END_OF_TURN_TOKEN = "<|im_end|>"
# Where <|im_end|> is not among the top 20, the native probe's P is a median 10^-3.45 of
# the bound the top 20 give (252 such pauses of the 281 of `bench.turn_end`'s three sets,
# SmolLM2; docs/llm.md, "The end-of-turn probe over HTTP"): the bound itself would read
# those pauses as far likelier ends than the model does (natural false cut 46%, not 15%).
ABSENT_SHARE = 10**-3.45
_REASONS: dict[str | None, FinishReason] = {"stop": "stop", "length": "length", "abort": "abort"}


@dataclass(frozen=True, slots=True)
class Chunk:
    """A piece of a streamed completion; the last one has `finish_reason` set.
    `top_logprobs`: {token text: logprob} of the chunk's first token, where asked for."""

    text: str
    finish_reason: str | None = None
    num_prompt_tokens: int = 0
    num_cached_tokens: int = 0
    top_logprobs: Mapping[str, float] | None = None


class RequestRejected(ConnectionError):
    """The server answered a request with a 4xx: sending it again will not help."""


def end_of_turn_probability(top: Mapping[str, float]) -> float | None:
    """P(<|im_end|>) from the top log-probabilities of the token after the user's words.
    Absent from them, it lies below their least and below the mass they leave; the
    smaller of the two bounds, times ABSENT_SHARE, stands for it."""
    logprob = top.get(END_OF_TURN_TOKEN)
    if logprob is not None:
        return math.exp(logprob)
    probs = [math.exp(value) for value in top.values()]
    if not probs:
        return None
    return max(0.0, min(min(probs), 1.0 - sum(probs))) * ABSENT_SHARE


@dataclass(slots=True)
class _Warming:
    task: asyncio.Task[None] | None = None
    waiting: str | None = None  # newest prompt text, sent when `task` ends


class PromptFormat:
    """Renders and counts prompts client-side: with the GGUF's own template and tokenizer
    when the file is here (the served model is ours), else plain ChatML and a byte
    estimate (a remote model's exact count is the server's business)."""

    def __init__(self, config: LLMConfig) -> None:
        self.tokenizer: ChatTokenizer | None = None
        if config.model_path.is_file():
            from voxrelay.llm.gguf_loader import GGUFFile, read_tokenizer_data

            self.tokenizer = ChatTokenizer(read_tokenizer_data(GGUFFile(config.model_path)))

    def render(self, messages: Sequence[Mapping[str, str]]) -> str:
        if self.tokenizer is not None:
            return self.tokenizer.apply_chat_template(messages, add_generation_prompt=True)
        turns = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
        return turns + "<|im_start|>assistant\n"

    def count_tokens(self, prompt: str) -> int:
        if self.tokenizer is not None:
            return len(self.tokenizer.encode(prompt))
        return len(prompt.encode()) // 3 + 1  # BPE averages ~4 bytes a token: a safe bound


class AsyncBackend:
    """Base of the remote-style backends; subclasses supply `_start`, `_stop` and
    `_generate` (an async iterator of `Chunk`s for one prompt)."""

    def __init__(self, config: LLMConfig, warm_prefix: bool, probe_logprobs: int = 0) -> None:
        self.config = config
        self.warm_prefix = warm_prefix
        self.probe_logprobs = probe_logprobs
        self.probes_end_of_turn = probe_logprobs > 0
        self.prompt_format = PromptFormat(config)
        self._outputs: queue.SimpleQueue[TokenOutput] = queue.SimpleQueue()
        self._streams: dict[int, Future[None]] = {}  # stage thread only
        self._prefilled: dict[int, int] = {}  # open prompt -> tokens its last warm sent
        self._warming: dict[int, _Warming] = {}  # loop thread only
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="llm-backend", daemon=True
        )
        self._thread.start()
        self._call(self._start())

    async def _start(self) -> None: ...

    async def _stop(self) -> None: ...

    def _generate(
        self, prompt: str, max_tokens: int, top_logprobs: int | None = None
    ) -> AsyncIterator[Chunk]:
        """The completion of `prompt`, streamed; with `top_logprobs`, each chunk's first
        token's top log-probabilities."""
        raise NotImplementedError

    def render(self, messages: Sequence[Mapping[str, str]]) -> str:
        return self.prompt_format.render(messages)

    def count_tokens(self, prompt: str) -> int:
        return self.prompt_format.count_tokens(prompt)

    def open(self, request_id: int, prompt: str) -> None:
        self._prefilled[request_id] = 0
        self.extend(request_id, prompt)

    def extend(self, request_id: int, prompt: str) -> None:
        if self.warm_prefix:
            self._loop.call_soon_threadsafe(self._warm, request_id, prompt)

    def submit(self, request_id: int, prompt: str, probe: bool = True) -> None:
        # A warm still in flight is left to finish: its blocks are the ones this reuses.
        self._prefilled.pop(request_id, None)
        self._loop.call_soon_threadsafe(self._end_warming, request_id, False)
        coroutine = self._decode(request_id, prompt, probe)
        self._streams[request_id] = asyncio.run_coroutine_threadsafe(coroutine, self._loop)

    def prefilled_tokens(self, request_id: int) -> int:
        return self._prefilled.get(request_id, 0)

    def abort(self, request_id: int) -> bool:
        was_open = self._prefilled.pop(request_id, None) is not None
        self._loop.call_soon_threadsafe(self._end_warming, request_id, True)
        stream = self._streams.pop(request_id, None)
        if stream is not None:
            stream.cancel()  # closes the connection: the server aborts the request
        return was_open or stream is not None

    def step(self) -> list[TokenOutput]:
        if not self._streams:
            return []
        try:
            received = [self._outputs.get(timeout=POLL_WAIT_S)]
        except queue.Empty:
            return []
        while not self._outputs.empty():
            received.append(self._outputs.get_nowait())
        outputs = []
        for output in received:
            if output.request_id not in self._streams:
                continue  # aborted while its token was on the way
            outputs.append(output)
            if output.finished:
                del self._streams[output.request_id]
        return outputs

    def has_pending_work(self) -> bool:
        return bool(self._streams)

    def close(self) -> None:
        for request_id in list(self._streams):
            self.abort(request_id)
        self._call(self._stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    def _call(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    async def _decode(self, request_id: int, prompt: str, probe_words: bool) -> None:
        put = self._outputs.put
        probe = None
        if probe_words and self.probes_end_of_turn and prompt.endswith(REPLY_HEADER):
            probe = self._loop.create_task(self._probe(probe_text(prompt[: -len(REPLY_HEADER)])))
        first = True
        try:
            async for chunk in self._generate(prompt, self.config.max_new_tokens):
                prob = None
                if first:
                    first, prob = False, await self._probe_result(probe)
                if chunk.finish_reason is None:
                    put(TokenOutput(request_id, NO_TOKEN_ID, chunk.text, False, probe_prob=prob))
                    continue
                reason = _REASONS.get(chunk.finish_reason, "error")
                cached = chunk.num_cached_tokens
                put(TokenOutput(request_id, NO_TOKEN_ID, chunk.text, True, reason, cached, prob))
                return
            raise ConnectionError("the stream ended without a finish reason")
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a lost server ends the reply; the stage keeps serving
            log.warning("LLM request %d failed: %s", request_id, exc)
            put(TokenOutput(request_id, NO_TOKEN_ID, "", True, "error"))
        finally:
            if probe is not None and not probe.done():
                probe.cancel()

    async def _probe(self, prompt: str) -> float | None:
        """The server's P(<|im_end|>) after `prompt` (the user's words, turn still open)."""
        try:
            async for chunk in self._generate(prompt, 1, self.probe_logprobs):
                if chunk.top_logprobs is not None:
                    return end_of_turn_probability(chunk.top_logprobs)
            log.warning("the LLM server sent no logprobs; the end-of-turn probe is off")
        except asyncio.CancelledError:
            raise
        except RequestRejected as exc:
            log.warning("the LLM server refused the end-of-turn probe (%s); it is off, and "
                        "pauses are decided without the LLM's probability", exc)  # fmt: skip
        except Exception as exc:  # a lost server: the reply's own request says so
            log.info("end-of-turn probe failed: %s", exc)
            return None
        self.probes_end_of_turn = False
        return None

    async def _probe_result(self, probe: asyncio.Task[float | None] | None) -> float | None:
        if probe is None:
            return None
        try:
            return await asyncio.wait_for(asyncio.shield(probe), PROBE_GRACE_S)
        except TimeoutError:
            log.info("end-of-turn probe still out after %.2f s; the reply goes on", PROBE_GRACE_S)
            return None

    # Loop thread from here on.
    def _warm(self, request_id: int, prompt: str) -> None:
        state = self._warming.setdefault(request_id, _Warming())
        if state.task is not None and not state.task.done():
            state.waiting = prompt
            return
        state.task = self._loop.create_task(self._warm_once(request_id, prompt))

    async def _warm_once(self, request_id: int, prompt: str) -> None:
        try:
            async for chunk in self._generate(prompt, 1):
                if chunk.finish_reason is not None and request_id in self._prefilled:
                    self._prefilled[request_id] = chunk.num_prompt_tokens
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # warming is an optimisation: the real request decides
            log.info("warming request for %d failed: %s", request_id, exc)
        state = self._warming.get(request_id)
        if state is not None and state.waiting is not None:
            prompt, state.waiting = state.waiting, None
            state.task = self._loop.create_task(self._warm_once(request_id, prompt))

    def _end_warming(self, request_id: int, cancel: bool) -> None:
        state = self._warming.pop(request_id, None)
        if state is not None and cancel and state.task is not None:
            state.task.cancel()
