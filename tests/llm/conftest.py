"""Shared fixtures: the real SmolLM2 GGUF, loaded once per session."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from voxrelay.llm.config import LLMConfig
from voxrelay.llm.engine import LLMEngine
from voxrelay.llm.gguf_loader import GGUFFile, read_tokenizer_data
from voxrelay.llm.tokenizer import ChatTokenizer
from voxrelay.pipeline.models import asset_path


@pytest.fixture(scope="session")
def model_path() -> Path:
    path = asset_path("smollm2") / "model.gguf"
    if not path.is_file():
        pytest.skip(f"SmolLM2 GGUF not provisioned at {path}; run `voxrelay models fetch`")
    return path


@pytest.fixture(scope="session")
def gguf_file(model_path: Path) -> GGUFFile:
    return GGUFFile(model_path)


@pytest.fixture(scope="session")
def tokenizer(gguf_file: GGUFFile) -> ChatTokenizer:
    return ChatTokenizer(read_tokenizer_data(gguf_file))


@pytest.fixture(scope="session")
def shared_engine(model_path: Path) -> LLMEngine:
    config = LLMConfig(
        model_path,
        device="cpu",
        num_threads=2,
        max_new_tokens=8,
        max_context_tokens=512,
        kv_cache_tokens=2048,
        decode_dtype="same",  # exactness tests: one set of float32 weights
    )
    return LLMEngine(config)


@pytest.fixture
def engine(shared_engine: LLMEngine) -> Iterator[LLMEngine]:
    """The session engine, checked to be idle after each test so tests stay independent."""
    yield shared_engine
    assert not shared_engine.has_unfinished(), "test left requests running"
    manager = shared_engine.block_manager
    assert manager.num_free_blocks == len(manager.blocks), "test leaked KV blocks"


@pytest.fixture(scope="session")
def llm_server(model_path: Path) -> Iterator[str]:
    """A real `voxrelay llm-serve` subprocess (float32 decode, like `shared_engine`, so
    its greedy text can be compared token for token); yields its /v1 base URL."""
    command = [sys.executable, "-m", "voxrelay.pipeline.cli", "llm-serve", "--port", "0",
               "--threads", "2", "--decode-dtype", "same",
               "--model-path", str(model_path)]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # blocks until the model is loaded and listening
        match = re.search(r"(http://\S+/v1)", line)
        assert match, f"llm-serve did not start: {line!r}"
        yield match.group(1)
    finally:
        process.terminate()
        process.wait(timeout=10)
