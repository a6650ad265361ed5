"""The `vllm` backend: vLLM's async engine inside the LLM stage process (CUDA only).

Written against vLLM's documented API (`AsyncEngineArgs`, `AsyncLLM.from_engine_args`,
`generate(prompt, sampling_params, request_id)` as an async iterator of
`RequestOutput`s with cumulative text, `abort(request_id)`, `shutdown()`); it cannot run
on the CPU-only development machine, so tests drive it with a stand-in module.
Prefix caching and CUDA graphs (`enforce_eager=False`) are always on. Partial prompts
warm vLLM's prefix cache with prefill-only requests (max_tokens=1), as the `openai`
backend does over HTTP.

Import-guarded: without vLLM installed, choosing this backend raises a ValueError that
says so; nothing else imports this module.
"""

from __future__ import annotations

import importlib.util
import itertools
from collections.abc import AsyncIterator
from typing import Any

from voxrelay.llm.async_backend import AsyncBackend, Chunk
from voxrelay.llm.backend import STOP_TEXTS
from voxrelay.llm.config import LLMConfig


class VLLMBackend(AsyncBackend):
    def __init__(self, config: LLMConfig) -> None:
        if importlib.util.find_spec("vllm") is None:
            raise ValueError(
                "backend 'vllm' needs vLLM, which is not installed (pip install vllm on a "
                "CUDA machine); use backend 'native', or 'openai' against a vLLM server"
            )
        self._engine: Any = None
        self._ids = itertools.count()
        super().__init__(config, config.vllm.warm_prefix)

    def engine_args(self) -> dict[str, Any]:
        settings, config = self.config.vllm, self.config
        args: dict[str, Any] = {
            "model": settings.model or str(config.model_path),
            "enable_prefix_caching": True,
            "enforce_eager": False,  # decode runs from CUDA graphs
            "gpu_memory_utilization": settings.gpu_memory_utilization,
            "max_model_len": config.max_context_tokens,
            "max_num_seqs": config.max_num_seqs,
            "seed": config.seed,
        }
        if settings.tokenizer:
            args["tokenizer"] = settings.tokenizer
        return args

    async def _start(self) -> None:
        import vllm

        try:
            from vllm.v1.engine.async_llm import AsyncLLM as engine_class
        except ImportError:  # releases before the V1 engine
            engine_class = vllm.AsyncLLMEngine
        self._engine = engine_class.from_engine_args(vllm.AsyncEngineArgs(**self.engine_args()))

    async def _stop(self) -> None:
        shutdown = getattr(self._engine, "shutdown", None)
        if shutdown is not None:
            shutdown()

    def sampling_params(self, max_tokens: int) -> Any:
        import vllm

        extra: dict[str, Any] = {"top_k": self.config.top_k} if self.config.top_k > 0 else {}
        if self.config.temperature > 0:
            extra["seed"] = self.config.seed
        return vllm.SamplingParams(
            max_tokens=max_tokens,
            temperature=self.config.temperature,
            stop=list(STOP_TEXTS),
            **extra,
        )

    async def _generate(self, prompt: str, max_tokens: int) -> AsyncIterator[Chunk]:
        request_id = f"voxrelay-{next(self._ids)}"
        params = self.sampling_params(max_tokens)
        sent = 0
        finished = False
        try:
            async for output in self._engine.generate(prompt, params, request_id):
                completion = output.outputs[0]
                text, sent = completion.text[sent:], len(completion.text)
                if not output.finished:
                    yield Chunk(text)
                    continue
                finished = True
                prompt_tokens = len(output.prompt_token_ids or ())
                cached = output.num_cached_tokens or 0
                yield Chunk(text, completion.finish_reason or "stop", prompt_tokens, cached)
                return
        finally:
            if not finished:  # cancelled (barge-in) or failed: free its KV now
                await self._engine.abort(request_id)
