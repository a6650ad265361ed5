"""The `openai` backend: streaming /v1/completions from any OpenAI-compatible server.

The prompt is rendered to ChatML here and sent as text to /v1/completions, not as
messages to /v1/chat/completions: a warming request for the stable words and the final
request then start with byte-identical text, hence identical tokens, which is what the
server's prefix cache matches on (a chat template rendered server-side might not end
where our partial prompt ends).
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from voxrelay.llm.async_backend import AsyncBackend, Chunk, RequestRejected
from voxrelay.llm.backend import STOP_TEXTS
from voxrelay.llm.config import LLMConfig


class OpenAIBackend(AsyncBackend):
    def __init__(self, config: LLMConfig) -> None:
        settings = config.openai
        self.url = settings.base_url.rstrip("/") + "/completions"
        api_key = os.environ.get(settings.api_key_env)
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._session: aiohttp.ClientSession | None = None
        super().__init__(config, settings.warm_prefix, settings.probe_logprobs)

    async def _start(self) -> None:
        timeout = self.config.openai.timeout_s
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=timeout, sock_read=timeout)
        )

    async def _stop(self) -> None:
        if self._session is not None:
            await self._session.close()

    def request_body(
        self, prompt: str, max_tokens: int, top_logprobs: int | None = None
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.config.openai.model,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": self.config.temperature,
            "stream": True,
            "stream_options": {"include_usage": True},
            "stop": list(STOP_TEXTS),
        }
        if self.config.top_k > 0:
            body["top_k"] = self.config.top_k  # vLLM's extension; llm-serve takes it too
        if self.config.temperature > 0:
            body["seed"] = self.config.seed
        if top_logprobs is not None:
            body["logprobs"] = top_logprobs
        return body

    async def _generate(
        self, prompt: str, max_tokens: int, top_logprobs: int | None = None
    ) -> AsyncIterator[Chunk]:
        assert self._session is not None
        body = self.request_body(prompt, max_tokens, top_logprobs)
        async with self._session.post(self.url, json=body, headers=self._headers) as response:
            if response.status != 200:
                detail = (await response.text())[:300]
                error = RequestRejected if 400 <= response.status < 500 else ConnectionError
                raise error(f"{self.url} answered {response.status}: {detail}")
            # The finish chunk is held back until the usage chunk that follows it (the
            # same write on the server), so the last Chunk carries the cache statistics.
            final: tuple[str, str, dict[str, float] | None] | None = None
            prompt_tokens = cached_tokens = 0
            async for line in response.content:
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    break
                event = json.loads(data)
                usage = event.get("usage")
                if usage:
                    prompt_tokens = int(usage.get("prompt_tokens", 0))
                    details = usage.get("prompt_tokens_details") or {}
                    cached_tokens = int(details.get("cached_tokens") or 0)
                for choice in event.get("choices") or ():
                    text, reason = choice.get("text") or "", choice.get("finish_reason")
                    top = _first_top_logprobs(choice.get("logprobs"))
                    if reason is None:
                        yield Chunk(text, top_logprobs=top)
                    else:
                        final = (text, reason, top)
            if final is None:
                raise ConnectionError(f"{self.url}: the stream ended without a finish reason")
            yield Chunk(final[0], final[1], prompt_tokens, cached_tokens, final[2])


def _first_top_logprobs(logprobs: Any) -> dict[str, float] | None:
    """{token: logprob} of a completion chunk's first token (`logprobs.top_logprobs[0]`)."""
    if not isinstance(logprobs, dict):
        return None
    top = logprobs.get("top_logprobs")
    if not isinstance(top, list) or not top or not isinstance(top[0], dict):
        return None
    return {str(token): float(value) for token, value in top[0].items()}
