"""`voxrelay llm-serve`: the native engine behind an OpenAI-compatible HTTP endpoint.

POST /v1/completions and /v1/chat/completions (SSE with `stream: true`), GET /v1/models
and GET /health. One engine thread steps for every request (llm/engine_thread.py), so
concurrent clients share forward passes. A client that disconnects has its request
aborted at once (aiohttp cancels the handler; the `finally` sends the abort). `usage`
reports `prompt_tokens_details.cached_tokens`, the prompt tokens the prefix cache
served, as OpenAI and vLLM do: the `openai` backend's cache warming is checked on it.
With `voxrelay -v llm-serve`, each finished request logs its prompt, cached and generated
token counts.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from voxrelay.llm.config import LLMConfig
from voxrelay.llm.engine import LLMEngine
from voxrelay.llm.engine_thread import EngineThread, StreamItem
from voxrelay.llm.openai_api import (
    APIError,
    CompletionRequest,
    LogprobsFormat,
    ServedModel,
    choice,
    envelope,
    parse_request,
    usage,
)
from voxrelay.llm.sequence import TokenOutput

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ServeConfig:
    host: str = "127.0.0.1"
    port: int = 8000  # 0: any free port (the chosen one is printed)
    served_model_name: str = "smollm2"

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must lie in [0, 65535], got {self.port}")
        if not self.served_model_name:
            raise ValueError("served_model_name must not be empty")


def _sse(body: dict[str, Any] | str) -> bytes:
    data = body if isinstance(body, str) else json.dumps(body, separators=(",", ":"))
    return f"data: {data}\n\n".encode()


class CompletionServer:
    def __init__(self, engine: LLMEngine, config: ServeConfig) -> None:
        self.engine_thread = EngineThread(engine)
        self.tokenizer = engine.tokenizer
        self.max_context_tokens = engine.config.max_context_tokens
        self.served = ServedModel(
            config.served_model_name,
            engine.config.temperature,
            engine.config.top_k,
            engine.config.max_new_tokens,
        )
        self.app = web.Application()
        self.app.router.add_get("/v1/models", self.models)
        self.app.router.add_get("/health", self.health)
        self.app.router.add_post("/v1/completions", self.completions)
        self.app.router.add_post("/v1/chat/completions", self.chat_completions)

    async def models(self, request: web.Request) -> web.Response:
        model = {"id": self.served.name, "object": "model", "created": 0,
                 "owned_by": "voxrelay", "max_model_len": self.max_context_tokens}  # fmt: skip
        return web.json_response({"object": "list", "data": [model]})

    async def health(self, request: web.Request) -> web.Response:
        stats = self.engine_thread.stats
        return web.json_response({"status": "ok", "active_requests": self.engine_thread.num_active,
                                  "steps": stats.steps, "max_batch": stats.max_batch})  # fmt: skip

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._complete(request, chat=False)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._complete(request, chat=True)

    async def _complete(self, request: web.Request, chat: bool) -> web.StreamResponse:
        try:
            body = await request.json()
        except ValueError as exc:
            return _error(APIError(400, f"the request body is not valid JSON: {exc}"))
        try:
            parsed = parse_request(body, chat, self.tokenizer, self.served)
        except APIError as exc:
            return _error(exc)
        request_id, stream = self.engine_thread.submit(
            parsed.prompt_ids, parsed.max_tokens, parsed.logprobs
        )
        done = False
        try:
            first = await stream.get()
            if isinstance(first, ValueError):  # the engine refused the prompt
                done = True
                return _error(APIError(400, str(first), "prompt"))
            if isinstance(first, RuntimeError):
                done = True
                return _error(APIError(500, str(first)))
            head = envelope(f"cmpl-{request_id}", int(time.time()), self.served.name, chat,
                            parsed.stream)  # fmt: skip
            if parsed.stream:
                response = await self._stream(request, head, parsed, chat, first, stream)
            else:
                response = await self._collect(head, parsed, chat, first, stream)
            done = True
            return response
        except ConnectionResetError:  # the client went away mid-stream
            return web.Response(status=499)
        finally:
            if not done:  # disconnect (cancelled handler) or failure: free the engine
                self.engine_thread.abort(request_id)

    async def _collect(
        self,
        head: dict[str, Any],
        parsed: CompletionRequest,
        chat: bool,
        output: TokenOutput,
        stream: asyncio.Queue[StreamItem],
    ) -> web.Response:
        outputs = [output]
        while not output.finished:
            output = _token(await stream.get())
            outputs.append(output)
        count = len(outputs)
        texts = [item.text for item in outputs]
        logprobs = None
        if parsed.logprobs is not None:
            tokens = [(item.token_id, item.logprobs) for item in outputs if item.logprobs]
            logprobs = LogprobsFormat(self.tokenizer, chat).body(tokens, texts)
        entry = choice("".join(texts), output.finish_reason, chat, False, logprobs)
        _log_usage(parsed, count, output)
        tokens = usage(len(parsed.prompt_ids), count, output.num_cached_tokens)
        body = {**head, "choices": [entry], "usage": tokens}
        return web.json_response(body)

    async def _stream(
        self,
        request: web.Request,
        head: dict[str, Any],
        parsed: CompletionRequest,
        chat: bool,
        output: TokenOutput,
        stream: asyncio.Queue[StreamItem],
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        if chat:  # the first chat chunk announces the role, as OpenAI's does
            opening = {"index": 0, "delta": {"role": "assistant", "content": ""},
                       "logprobs": None, "finish_reason": None}  # fmt: skip
            await response.write(_sse({**head, "choices": [opening]}))
        count = 1
        logprobs_format = LogprobsFormat(self.tokenizer, chat)
        while True:
            logprobs = None
            if parsed.logprobs is not None and output.logprobs is not None:
                pairs = [(output.token_id, output.logprobs)]
                logprobs = logprobs_format.body(pairs, [output.text])
            entry = choice(output.text, output.finish_reason, chat, True, logprobs)
            await response.write(_sse({**head, "choices": [entry]}))
            if output.finished:
                break
            output = _token(await stream.get())
            count += 1
        _log_usage(parsed, count, output)
        if parsed.include_usage:
            tokens = usage(len(parsed.prompt_ids), count, output.num_cached_tokens)
            await response.write(_sse({**head, "choices": [], "usage": tokens}))
        await response.write(_sse("[DONE]"))
        await response.write_eof()
        return response


def _log_usage(parsed: CompletionRequest, generated: int, last: TokenOutput) -> None:
    # One line per finished request (`voxrelay -v llm-serve`): the prefix cache's share
    # of each prompt, the warming requests (max_tokens 1) of the `openai` backend included.
    log.info("completion: %d prompt tokens, %d cached, max_tokens %d, %d generated, %s",
             len(parsed.prompt_ids), last.num_cached_tokens, parsed.max_tokens, generated,
             last.finish_reason)  # fmt: skip


def _token(item: StreamItem) -> TokenOutput:
    if isinstance(item, Exception):  # the engine failed mid-reply: aiohttp answers 500
        raise item
    return item


def _error(error: APIError) -> web.Response:
    return web.json_response(error.body(), status=error.status)


async def serve_forever(llm_config: LLMConfig, config: ServeConfig) -> None:
    """Load the model, listen, and serve until cancelled (Ctrl-C)."""
    server = CompletionServer(LLMEngine(llm_config), config)
    # handler_cancellation: a client disconnect cancels its handler, which aborts the
    # request in the engine instead of decoding a reply nobody reads.
    runner = web.AppRunner(server.app, handler_cancellation=True, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, config.host, config.port)
    await site.start()
    for host, port in (address[:2] for address in runner.addresses):
        print(f"llm-serve: listening on http://{host}:{port}/v1 (model "
              f"{config.served_model_name!r})", flush=True)  # fmt: skip
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
        server.engine_thread.close()
