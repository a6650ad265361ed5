"""The `vllm` backend: a clear error without vLLM, and its use of vLLM's API checked
against a stand-in module (vLLM needs CUDA; the development machine has none)."""

from __future__ import annotations

import asyncio
import importlib.machinery
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


def test_without_vllm_choosing_it_is_a_clear_error(model_path: Path) -> None:
    if "vllm" in sys.modules or importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here")
    with pytest.raises(ValueError, match="needs vLLM, which is not installed"):
        create_backend(LLMConfig(model_path, backend="vllm"))
    import voxrelay.llm.worker  # the stage and the other backends do not need it

    assert voxrelay.llm.worker.LLMHandler is not None


@dataclass
class FakeCompletion:
    text: str
    finish_reason: str | None = None


@dataclass
class FakeRequestOutput:
    outputs: list[FakeCompletion]
    finished: bool
    prompt_token_ids: list[int] = field(default_factory=lambda: [1] * 40)
    num_cached_tokens: int = 32


class FakeEngine:
    """Speaks the part of vLLM's AsyncLLMEngine API the backend uses."""

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
        words = ["Hello", " there", ",", " friend", "."] * 20
        for index in range(1, min(params.kwargs["max_tokens"], len(words)) + 1):
            await asyncio.sleep(0.005)
            done = index == params.kwargs["max_tokens"]
            text = "".join(words[:index])
            yield FakeRequestOutput([FakeCompletion(text, "length" if done else None)], done)

    async def abort(self, request_id: str) -> None:
        self.aborted.append(request_id)

    def shutdown(self) -> None:
        pass


class Recorded:
    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs


@pytest.fixture
def fake_vllm(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    module = types.ModuleType("vllm")
    module.__spec__ = importlib.machinery.ModuleSpec("vllm", None)
    module.AsyncEngineArgs = Recorded  # type: ignore[attr-defined]
    module.SamplingParams = Recorded  # type: ignore[attr-defined]
    module.AsyncLLMEngine = FakeEngine  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm", module)
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
        assert engine.requests[-1] == (prompt, engine.requests[-1][1])
        assert engine.requests[-1][1].kwargs["stop"] == ["<|im_end|>", "<|endoftext|>"]
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
