"""The `vllm` backend: vLLM's async engine inside the LLM stage process (CUDA only).

Written against vLLM's V1 engine, the only one in current releases (`voxrelay[vllm]`
pins 0.32.0, the newest that pins torch 2.13.0 as voxrelay does), and its module paths
rather than the top-level re-exports: `vllm.engine.arg_utils.AsyncEngineArgs`,
`vllm.v1.engine.async_llm.AsyncLLM.from_engine_args(args)`, `generate(prompt,
sampling_params, request_id)` as an async generator of `RequestOutput`s, `abort(request_id)`
(async) and `shutdown()`. `RequestOutputKind.DELTA` makes each output carry only the new
text, so a reply is not re-sliced from its cumulative text at every token; every output
carries `prompt_token_ids` and `num_cached_tokens` (the prefix-cache hits). Prefix caching
and CUDA graphs (`enforce_eager=False`) are always on. Partial prompts warm vLLM's prefix
cache with prefill-only requests (max_tokens=1), as the `openai` backend does over HTTP.

Import-guarded: without vLLM installed, choosing this backend raises a ValueError that
says so; nothing else imports this module. It cannot run on the CPU-only development
machine: tests/llm/test_vllm_backend.py checks its calls against a stand-in module, the
real package's import surface and signatures where vLLM is installed, and a real
generation where CUDA is there too.
"""

from __future__ import annotations

import importlib.util
import itertools
from collections.abc import AsyncIterator
from typing import Any

from voxrelay.llm.async_backend import AsyncBackend, Chunk
from voxrelay.llm.backend import STOP_TEXTS
from voxrelay.llm.config import LLMConfig


def engine_args(config: LLMConfig) -> dict[str, Any]:
    """Keyword arguments of `AsyncEngineArgs` for this stage."""
    settings = config.vllm
    args: dict[str, Any] = {
        "model": settings.model or str(config.model_path),
        "enable_prefix_caching": True,
        "enforce_eager": False,  # decode runs from CUDA graphs
        "gpu_memory_utilization": settings.gpu_memory_utilization,
        "max_model_len": config.max_context_tokens,
        "max_num_seqs": config.max_num_seqs,
        "seed": config.seed,
    }
    if settings.tokenizer:  # else the model's own (a GGUF file carries one)
        args["tokenizer"] = settings.tokenizer
    return args


def sampling_params(config: LLMConfig, max_tokens: int, top_logprobs: int | None = None) -> Any:
    from vllm.sampling_params import RequestOutputKind, SamplingParams

    extra: dict[str, Any] = {"top_k": config.top_k} if config.top_k > 0 else {}
    if config.temperature > 0:
        extra["seed"] = config.seed
    if top_logprobs is not None:
        extra["logprobs"] = top_logprobs
    return SamplingParams(
        max_tokens=max_tokens,
        temperature=config.temperature,
        stop=list(STOP_TEXTS),
        output_kind=RequestOutputKind.DELTA,
        **extra,
    )


class VLLMBackend(AsyncBackend):
    def __init__(self, config: LLMConfig) -> None:
        if importlib.util.find_spec("vllm") is None:
            raise ValueError(
                "backend 'vllm' needs vLLM, which is not installed (pip install "
                "'voxrelay[vllm]' on a CUDA machine); use backend 'native', or 'openai' "
                "against a vLLM server"
            )
        self._engine: Any = None
        self._ids = itertools.count()
        super().__init__(config, config.vllm.warm_prefix, config.vllm.probe_logprobs)

    async def _start(self) -> None:
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        # On this loop's thread: AsyncLLM starts its output handler on the running loop.
        self._engine = AsyncLLM.from_engine_args(AsyncEngineArgs(**engine_args(self.config)))

    async def _stop(self) -> None:
        if self._engine is not None:
            self._engine.shutdown()

    async def _generate(
        self, prompt: str, max_tokens: int, top_logprobs: int | None = None
    ) -> AsyncIterator[Chunk]:
        request_id = f"voxrelay-{next(self._ids)}"
        params = sampling_params(self.config, max_tokens, top_logprobs)
        finished = False
        try:
            async for output in self._engine.generate(prompt, params, request_id):
                completion = output.outputs[0]  # DELTA: the text since the last output
                top = _first_top_logprobs(completion.logprobs)
                if not output.finished:
                    yield Chunk(completion.text, top_logprobs=top)
                    continue
                finished = True
                prompt_tokens = len(output.prompt_token_ids or ())
                cached = output.num_cached_tokens or 0
                yield Chunk(completion.text, completion.finish_reason or "stop", prompt_tokens,
                            cached, top)  # fmt: skip
                return
        finally:
            if not finished:  # cancelled (barge-in) or failed: free its KV now
                await self._engine.abort(request_id)


def _first_top_logprobs(logprobs: Any) -> dict[str, float] | None:
    """{token: logprob} of an output's first token: vLLM gives one {id: Logprob} per
    token (the sampled one and the top N), each with `decoded_token` and `logprob`."""
    if not logprobs:
        return None
    return {str(item.decoded_token): float(item.logprob) for item in logprobs[0].values()}
