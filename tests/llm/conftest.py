"""Shared fixtures: the real SmolLM2 GGUF, loaded once per session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from llm.config import LLMConfig
from llm.engine import LLMEngine
from llm.gguf_loader import GGUFFile, read_tokenizer_data
from llm.tokenizer import ChatTokenizer
from pipeline.models import asset_path


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
