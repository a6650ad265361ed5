"""The OpenAI wire format of `voxrelay llm-serve`: request validation and response bodies.

Only what the native engine can honour is accepted; anything else is a 400 that says
what to change (one sampling configuration per server, fixed at start-up, because the
runner samples the whole batch in one go).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from voxrelay.llm.backend import STOP_TEXTS
from voxrelay.llm.config import MAX_TOP_LOGPROBS
from voxrelay.llm.sequence import TokenLogprobs
from voxrelay.llm.tokenizer import ChatTokenizer

DEFAULT_COMPLETION_TOKENS = 16  # OpenAI's and vLLM's default for /v1/completions
ROLES = ("system", "user", "assistant")
# Parameters a client may send only at their neutral value.
_NEUTRAL: dict[str, tuple[Any, ...]] = {
    "n": (None, 1),
    "best_of": (None, 1),
    "top_p": (None, 1, 1.0),
    "presence_penalty": (None, 0, 0.0),
    "frequency_penalty": (None, 0, 0.0),
    "echo": (None, False),
    "suffix": (None, ""),
}


class APIError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.param = param

    def body(self) -> dict[str, Any]:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        return {"error": {"message": str(self), "type": kind, "param": self.param, "code": None}}


@dataclass(frozen=True, slots=True)
class ServedModel:
    """What the server can do, fixed at start-up."""

    name: str
    temperature: float
    top_k: int
    max_new_tokens: int  # default reply length of /v1/chat/completions


@dataclass(frozen=True, slots=True)
class CompletionRequest:
    prompt_ids: list[int]
    max_tokens: int
    stream: bool
    include_usage: bool
    # Log-probabilities of each generated token and of this many likeliest rivals
    # (None: none asked for): `logprobs: N` on /v1/completions, `logprobs: true` with
    # `top_logprobs: N` on /v1/chat/completions.
    logprobs: int | None = None


def parse_request(
    body: Any, chat: bool, tokenizer: ChatTokenizer, served: ServedModel
) -> CompletionRequest:
    """Validate a /v1/completions (chat=False) or /v1/chat/completions body."""
    if not isinstance(body, dict):
        raise APIError(400, "the request body must be a JSON object")
    model = body.get("model")
    if model is not None and model != served.name:
        raise APIError(404, f"model {model!r} is not served here; GET /v1/models", "model")
    for name, allowed in _NEUTRAL.items():
        if body.get(name) not in allowed:
            raise APIError(400, f"{name}={body[name]!r} is not supported by this server", name)
    _check_sampling(body, served)
    stop = body.get("stop")
    stops = [stop] if isinstance(stop, str) else stop or []
    if not isinstance(stops, list) or any(text not in STOP_TEXTS for text in stops):
        raise APIError(400, f"custom stop strings are not supported; the model always stops "
                            f"at {' / '.join(STOP_TEXTS)}", "stop")  # fmt: skip
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise APIError(400, "stream must be true or false", "stream")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict) or (options and not stream):
        raise APIError(400, "stream_options needs stream=true and must be an object")
    if chat:
        prompt_ids = tokenizer.encode(_chat_prompt(body.get("messages"), tokenizer))
        default = served.max_new_tokens
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    else:
        prompt_ids = _completion_prompt(body.get("prompt"), tokenizer)
        default, max_tokens = DEFAULT_COMPLETION_TOKENS, body.get("max_tokens")
    if max_tokens is None:
        max_tokens = default
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise APIError(400, f"max_tokens must be an integer >= 1, got {max_tokens!r}")
    include_usage = bool(options.get("include_usage"))
    logprobs = _chat_logprobs(body) if chat else _completion_logprobs(body)
    return CompletionRequest(prompt_ids, max_tokens, stream, include_usage, logprobs)


def _count(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TOP_LOGPROBS:
        raise APIError(400, f"{name} must be an integer in [0, {MAX_TOP_LOGPROBS}], got "
                            f"{value!r}", name)  # fmt: skip
    return value


def _completion_logprobs(body: Mapping[str, Any]) -> int | None:
    if "top_logprobs" in body:
        raise APIError(400, "top_logprobs belongs to /v1/chat/completions; /v1/completions "
                            "takes logprobs=N", "top_logprobs")  # fmt: skip
    value = body.get("logprobs")
    return None if value is None or value is False else _count(value, "logprobs")


def _chat_logprobs(body: Mapping[str, Any]) -> int | None:
    wanted, top = body.get("logprobs"), body.get("top_logprobs")
    if wanted not in (None, True, False):
        raise APIError(400, "logprobs must be true or false on /v1/chat/completions", "logprobs")
    if not wanted:
        if top is not None:
            raise APIError(400, "top_logprobs needs logprobs=true", "top_logprobs")
        return None
    return 0 if top is None else _count(top, "top_logprobs")


def _check_sampling(body: Mapping[str, Any], served: ServedModel) -> None:
    temperature = body.get("temperature")
    if temperature is not None:
        if isinstance(temperature, bool) or not isinstance(temperature, int | float):
            raise APIError(400, "temperature must be a number", "temperature")
        if not math.isclose(temperature, served.temperature, abs_tol=1e-6):
            message = f"this server samples at temperature={served.temperature} (llm-serve "
            raise APIError(400, message + f"--temperature); got {temperature}", "temperature")
    top_k = body.get("top_k")
    if top_k is not None and top_k not in (served.top_k, -1 if served.top_k == 0 else None):
        raise APIError(400, f"this server samples with top_k={served.top_k}", "top_k")


def _completion_prompt(prompt: Any, tokenizer: ChatTokenizer) -> list[int]:
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str) and prompt:
        return tokenizer.encode(prompt)
    if (
        isinstance(prompt, list)
        and prompt
        and all(isinstance(token, int) and not isinstance(token, bool) for token in prompt)
    ):
        return list(prompt)
    raise APIError(400, "prompt must be a non-empty string or list of token ids (one prompt "
                        "per request)", "prompt")  # fmt: skip


def _chat_prompt(messages: Any, tokenizer: ChatTokenizer) -> str:
    if not isinstance(messages, list) or not messages:
        raise APIError(400, "messages must be a non-empty list", "messages")
    plain = []
    for message in messages:
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise APIError(400, f"each message needs a role in {ROLES}", "messages")
        content = message.get("content")
        if isinstance(content, list):  # content parts: only text ones make sense here
            content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
        if not isinstance(content, str):
            raise APIError(400, "message content must be a string", "messages")
        plain.append({"role": message["role"], "content": content})
    return tokenizer.apply_chat_template(plain, add_generation_prompt=True)


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }


def choice(
    text: str,
    finish_reason: str | None,
    chat: bool,
    streaming: bool,
    logprobs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One entry of `choices`; a chat chunk carries a `delta`, a chat reply a `message`."""
    if not chat:
        return {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish_reason}
    key = "delta" if streaming else "message"
    body = {"content": text} if streaming else {"role": "assistant", "content": text}
    return {"index": 0, key: body, "logprobs": logprobs, "finish_reason": finish_reason}


class LogprobsFormat:
    """`choices[].logprobs` in OpenAI's two shapes: /v1/completions' parallel lists
    (tokens, token_logprobs, top_logprobs as {token: logprob}, text_offset) and chat's
    `content` entries (token, logprob, bytes, top_logprobs). A token is written as its
    own text, special tokens by name ("<|im_end|>")."""

    def __init__(self, tokenizer: ChatTokenizer, chat: bool) -> None:
        self.tokenizer = tokenizer
        self.chat = chat
        self.offset = 0  # characters of completion text before the next token

    def body(self, tokens: list[tuple[int, TokenLogprobs]], texts: list[str]) -> dict[str, Any]:
        """The logprobs of `tokens` (id, its logprobs), whose streamed texts are `texts`."""
        name = self._name
        if self.chat:
            return {"content": [self._entry(name(token), item.logprob, [
                self._entry(name(rival), logprob) for rival, logprob in item.top
            ]) for token, item in tokens]}  # fmt: skip
        offsets = []
        for text in texts:
            offsets.append(self.offset)
            self.offset += len(text)
        return {
            "tokens": [name(token) for token, _ in tokens],
            "token_logprobs": [item.logprob for _, item in tokens],
            "top_logprobs": [{name(rival): lp for rival, lp in item.top} for _, item in tokens],
            "text_offset": offsets,
        }

    def _name(self, token_id: int) -> str:
        return self.tokenizer.decode([token_id])

    @staticmethod
    def _entry(
        token: str, logprob: float, top: list[dict[str, Any]] | None = None
    ) -> dict[str, Any]:
        entry: dict[str, Any] = {"token": token, "logprob": logprob,
                                 "bytes": list(token.encode())}  # fmt: skip
        if top is not None:
            entry["top_logprobs"] = top
        return entry


def envelope(
    request_id: str, created: int, model: str, chat: bool, streaming: bool
) -> dict[str, Any]:
    kinds = {(False, False): "text_completion", (False, True): "text_completion",
             (True, False): "chat.completion", (True, True): "chat.completion.chunk"}  # fmt: skip
    return {"id": request_id, "object": kinds[chat, streaming], "created": created,
            "model": model}  # fmt: skip
