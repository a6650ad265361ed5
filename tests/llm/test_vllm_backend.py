"""The `vllm` backend: a clear error without vLLM; its use of vLLM's API checked against
a stand-in module; where vLLM is installed, against the real package's names and
signatures; where CUDA is there too, a real warmed generation (marked gpu)."""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import importlib.machinery
import importlib.util
import inspect
import math
import sys
import time
import types
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from voxrelay.llm.backend import REPLY_HEADER, create_backend
from voxrelay.llm.config import LLMConfig, VLLMBackendConfig
from voxrelay.llm.vllm_backend import _first_top_logprobs, engine_args, sampling_params

HAS_VLLM = importlib.util.find_spec("vllm") is not None


def test_without_vllm_choosing_it_is_a_clear_error(model_path: Path) -> None:
    if HAS_VLLM:
        pytest.skip("vLLM is installed here")
    with pytest.raises(ValueError, match="needs vLLM, which is not installed"):
        create_backend(LLMConfig(model_path, backend="vllm"))
    import voxrelay.llm.worker  # the stage and the other backends do not need it

    assert voxrelay.llm.worker.LLMHandler is not None


@dataclass
class FakeLogprob:
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class FakeCompletion:
    text: str
    finish_reason: str | None = None
    logprobs: list[dict[int, FakeLogprob]] | None = None


@dataclass
class FakeRequestOutput:
    outputs: list[FakeCompletion]
    finished: bool
    prompt_token_ids: list[int] = field(default_factory=lambda: [1] * 40)
    num_cached_tokens: int = 32


class FakeEngine:
    """Speaks the part of vLLM's AsyncLLM API the backend uses (DELTA outputs)."""

    instance: FakeEngine

    def __init__(self, args: Any) -> None:
        self.args = args
        self.requests: list[tuple[str, Any]] = []
        self.aborted: list[str] = []
        FakeEngine.instance = self

    @classmethod
    def from_engine_args(cls, args: Any) -> FakeEngine:
        return cls(args)

    async def generate(
        self, prompt: str, params: Any, request_id: str
    ) -> AsyncIterator[FakeRequestOutput]:
        self.requests.append((prompt, params))
        assert params.kwargs["output_kind"] is FakeOutputKind.DELTA
        words = ["Hello", " there", ",", " friend", "."] * 20
        for index in range(1, min(params.kwargs["max_tokens"], len(words)) + 1):
            await asyncio.sleep(0.005)
            done = index == params.kwargs["max_tokens"]
            delta = words[index - 1]
            logprobs = None
            if params.kwargs.get("logprobs") is not None:  # the sampled token, then the top N
                top = {2: FakeLogprob(-0.4, 1, "Hello"), 0: FakeLogprob(-1.6, 2, "<|im_end|>")}
                logprobs = [top]
            reason = "length" if done else None
            yield FakeRequestOutput([FakeCompletion(delta, reason, logprobs)], done)

    async def abort(self, request_id: str) -> None:
        self.aborted.append(request_id)

    def shutdown(self) -> None:
        pass


class Recorded:
    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs


class FakeOutputKind(enum.Enum):
    CUMULATIVE = 0
    DELTA = 1
    FINAL_ONLY = 2


@pytest.fixture
def fake_vllm(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Stand-ins at the module paths the backend imports from (vLLM's own)."""
    names = {
        "vllm": {},
        "vllm.engine": {},
        "vllm.engine.arg_utils": {"AsyncEngineArgs": Recorded},
        "vllm.sampling_params": {"SamplingParams": Recorded, "RequestOutputKind": FakeOutputKind},
        "vllm.v1": {},
        "vllm.v1.engine": {},
        "vllm.v1.engine.async_llm": {"AsyncLLM": FakeEngine},
    }
    for name, attributes in names.items():
        module = types.ModuleType(name)
        module.__spec__ = importlib.machinery.ModuleSpec(name, None)
        module.__dict__.update(attributes)
        monkeypatch.setitem(sys.modules, name, module)
    yield


def drain(backend: Any, request_id: int) -> list[Any]:
    outputs: list[Any] = []
    deadline = time.monotonic() + 10
    while backend.has_pending_work() and time.monotonic() < deadline:
        outputs += [out for out in backend.step() if out.request_id == request_id]
    return outputs


def test_prefix_caching_cuda_graphs_warming_and_streaming(
    fake_vllm: None, model_path: Path
) -> None:
    config = LLMConfig(model_path, backend="vllm", max_new_tokens=4, temperature=0.0,
                       vllm=VLLMBackendConfig(gpu_memory_utilization=0.3))  # fmt: skip
    backend = create_backend(config)
    try:
        engine = FakeEngine.instance
        args = engine.args.kwargs
        assert args["enable_prefix_caching"] is True and args["enforce_eager"] is False
        assert args["model"] == str(model_path) and args["gpu_memory_utilization"] == 0.3
        prompt = backend.render([{"role": "user", "content": "Say hello to my friend."}])
        backend.open(1, prompt.removesuffix(REPLY_HEADER)[:-8])
        backend.extend(1, prompt.removesuffix(REPLY_HEADER))
        deadline = time.monotonic() + 5
        while backend.prefilled_tokens(1) == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert backend.prefilled_tokens(1) == 40
        warms = [(text, params.kwargs["max_tokens"]) for text, params in engine.requests]
        assert warms[0][1] == 1 and warms[-1] == (prompt.removesuffix(REPLY_HEADER), 1)
        backend.submit(1, prompt)
        outputs = drain(backend, 1)
        assert "".join(out.text for out in outputs) == "Hello there, friend"
        assert outputs[-1].finish_reason == "length" and outputs[-1].num_cached_tokens == 32
        (reply,) = [params for text, params in engine.requests if text == prompt]
        assert reply.kwargs["stop"] == ["<|im_end|>", "<|endoftext|>"]
        assert reply.kwargs["max_tokens"] == 4 and "logprobs" not in reply.kwargs
        # Beside it, the end-of-turn probe: the user's words alone, without Whisper's
        # closing mark (asr/turn_end.py `probe_text`), one token, the top 20
        # log-probabilities; its P(<|im_end|>) rides on the reply's first token.
        (probe,) = [params for _, params in engine.requests if params.kwargs.get("logprobs")]
        assert probe.kwargs["logprobs"] == 20 and probe.kwargs["max_tokens"] == 1
        assert engine.requests[-1][0] == prompt.removesuffix(REPLY_HEADER).removesuffix(".")
        assert outputs[0].probe_prob == pytest.approx(math.exp(-1.6))
        assert all(out.probe_prob is None for out in outputs[1:])
    finally:
        backend.close()


def test_abort_cancels_the_vllm_request(fake_vllm: None, model_path: Path) -> None:
    backend = create_backend(LLMConfig(model_path, backend="vllm", max_new_tokens=100))
    try:
        backend.submit(5, backend.render([{"role": "user", "content": "Talk."}]))
        while not backend.step():
            pass
        assert backend.abort(5) and not backend.has_pending_work()
        deadline = time.monotonic() + 5
        while not FakeEngine.instance.aborted and time.monotonic() < deadline:
            time.sleep(0.01)
        assert FakeEngine.instance.aborted == ["voxrelay-0"]
    finally:
        backend.close()


@pytest.mark.skipif(not HAS_VLLM, reason="vLLM is not installed (pip install 'voxrelay[vllm]')")
def test_the_real_vllm_has_the_names_and_signatures_the_backend_calls(model_path: Path) -> None:
    from vllm import CompletionOutput, RequestOutput
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.sampling_params import RequestOutputKind, SamplingParams
    from vllm.v1.engine.async_llm import AsyncLLM

    config = LLMConfig(model_path, backend="vllm", top_k=20, temperature=0.7)
    fields = {field.name for field in dataclasses.fields(AsyncEngineArgs)}
    assert set(engine_args(config)) <= fields, set(engine_args(config)) - fields
    AsyncEngineArgs(**engine_args(config))  # builds without a GPU; the engine needs one
    params = sampling_params(config, 7)
    assert isinstance(params, SamplingParams) and params.output_kind == RequestOutputKind.DELTA
    assert (params.max_tokens, params.top_k, params.seed) == (7, 20, 0)
    assert params.logprobs is None and sampling_params(config, 1, 20).logprobs == 20
    assert list(inspect.signature(AsyncLLM.generate).parameters)[:4] == [
        "self", "prompt", "sampling_params", "request_id"]  # fmt: skip
    assert "engine_args" in inspect.signature(AsyncLLM.from_engine_args).parameters
    assert inspect.iscoroutinefunction(AsyncLLM.abort) and callable(AsyncLLM.shutdown)
    outputs = inspect.signature(RequestOutput.__init__).parameters
    assert {"prompt_token_ids", "outputs", "finished", "num_cached_tokens"} <= set(outputs)
    assert {"text", "finish_reason", "logprobs"} <= set(
        inspect.signature(CompletionOutput).parameters
    )
    # The probe reads the first token's {id: Logprob} (the dict and the flat container).
    from vllm.logprobs import FlatLogprobs, Logprob

    assert {"logprob", "decoded_token"} <= set(inspect.signature(Logprob).parameters)
    flat = FlatLogprobs()
    flat.append({7: Logprob(-1.5, 1, "<|im_end|>")})
    assert _first_top_logprobs(flat) == {"<|im_end|>": -1.5}


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_VLLM, reason="vLLM is not installed (pip install 'voxrelay[vllm]')")
def test_real_vllm_streams_and_serves_the_warmed_prefix_from_its_cache(model_path: Path) -> None:
    import torch

    if not torch.cuda.is_available():
        pytest.skip("vLLM's engine needs CUDA")
    # tokenizer "": the GGUF's own, so nothing is fetched from a model hub.
    settings = VLLMBackendConfig(tokenizer="", gpu_memory_utilization=0.3)
    config = LLMConfig(model_path, backend="vllm", max_new_tokens=16, vllm=settings)
    backend = create_backend(config)
    try:
        words = "I would like to book a table for four people tomorrow evening at seven"
        prompt = backend.render([{"role": "user", "content": words}])
        backend.open(1, prompt.removesuffix(REPLY_HEADER))
        deadline = time.monotonic() + 60
        while backend.prefilled_tokens(1) == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        warmed = backend.prefilled_tokens(1)
        assert warmed > 16
        backend.submit(1, prompt)
        outputs = drain(backend, 1)
        assert "".join(out.text for out in outputs).strip() and outputs[-1].finished
        # vLLM's block size is 16 by default: the warm's whole blocks came from the cache.
        assert outputs[-1].num_cached_tokens >= warmed // 16 * 16 - 16 > 0
    finally:
        backend.close()
