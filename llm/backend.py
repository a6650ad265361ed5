"""What the LLM stage needs from an engine, and the backend chosen by `LLMConfig.backend`.

Prompts cross this boundary as ChatML text, rendered once by the stage: the native
engine encodes it, the `openai` backend sends it byte for byte to /v1/completions (so a
prefill-only warming request and the final request share an identical prefix, which is
what a server's prefix cache keys on), and vLLM tokenizes it itself.

Life of a request: `open` while the user speaks (prefill or warm the stable prefix),
`extend` as more words become stable, `submit` with the final prompt, then `step`
streams `TokenOutput`s until one is `finished`; `abort` at any point (barge-in).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from voxrelay.llm.config import LLMConfig
from voxrelay.llm.sequence import TokenOutput

# Remote backends stream text, not ids: their TokenOutputs carry this id (TTS reads text).
NO_TOKEN_ID = 0xFFFF_FFFF
# The ChatML tokens that close the user's message and open the reply: a prompt for
# partial words is the final prompt without them.
REPLY_HEADER = "<|im_end|>\n<|im_start|>assistant\n"
STOP_TEXTS = ("<|im_end|>", "<|endoftext|>")


class LLMBackend(Protocol):
    # Whether the first TokenOutput of a reply carries `probe_prob` (the LLM's P(end of
    # turn), llm/runner.py): the native engine's does; a remote server's stream does not.
    probes_end_of_turn: bool

    def render(self, messages: Sequence[Mapping[str, str]]) -> str:
        """The ChatML prompt for `messages`, ending with the assistant header."""
        ...

    def count_tokens(self, prompt: str) -> int: ...

    def open(self, request_id: int, prompt: str) -> None:
        """Start an open prompt: computed (or warmed) now, nothing generated yet."""
        ...

    def extend(self, request_id: int, prompt: str) -> None:
        """The open prompt is now `prompt`: usually a longer text; a revision replaces it."""
        ...

    def submit(self, request_id: int, prompt: str, probe: bool = True) -> None:
        """Generate a reply to `prompt`, completing the open prompt `request_id` if any;
        `probe`: read P(<|im_end|>) after the user's words (`probes_end_of_turn`), off
        for a prompt that ends with no user words (the agent's opening)."""
        ...

    def prefilled_tokens(self, request_id: int) -> int:
        """Prompt tokens of an open request already computed (or warmed) on the server."""
        ...

    def abort(self, request_id: int) -> bool:
        """Drop the request now; False if it was unknown or finished."""
        ...

    def step(self) -> list[TokenOutput]:
        """One unit of work: the tokens it produced (may wait a few ms for remote ones)."""
        ...

    def has_pending_work(self) -> bool: ...

    def close(self) -> None: ...


def _native(config: LLMConfig) -> LLMBackend:
    from voxrelay.llm.native_backend import NativeBackend

    return NativeBackend(config)


def _openai(config: LLMConfig) -> LLMBackend:
    from voxrelay.llm.openai_backend import OpenAIBackend

    return OpenAIBackend(config)


def _vllm(config: LLMConfig) -> LLMBackend:
    from voxrelay.llm.vllm_backend import VLLMBackend

    return VLLMBackend(config)


# Imported lazily: a backend's libraries (aiohttp, vllm) load only when it is chosen.
_FACTORIES: dict[str, Callable[[LLMConfig], LLMBackend]] = {
    "native": _native,
    "openai": _openai,
    "vllm": _vllm,
}


def create_backend(config: LLMConfig) -> LLMBackend:
    """The backend `config.backend` names, started and ready for requests."""
    return _FACTORIES[config.backend](config)
