from __future__ import annotations

from pathlib import Path

import pytest

from voxrelay.llm.config import LLMConfig, OpenAIBackendConfig, VLLMBackendConfig

MODEL = Path("model.gguf")


def test_defaults_are_valid() -> None:
    config = LLMConfig(MODEL)
    assert config.temperature == 0.0 and config.max_new_tokens == 60
    assert "voice assistant" in config.system_prompt


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"device": "tpu"}, "device must be one of"),
        ({"dtype": "int8"}, "dtype must be one of"),
        ({"num_threads": 0}, "num_threads"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"temperature": -1.0}, "temperature"),
        ({"kv_block_size": 12}, "power of two"),
        ({"max_context_tokens": 32, "max_new_tokens": 60}, "must exceed"),
        ({"kv_cache_tokens": 1024}, "at least one full context"),
        ({"max_num_seqs": 0}, "max_num_seqs"),
        ({"max_sentences": -1}, "max_sentences"),
        ({"no_repeat_ngram": 1}, "no_repeat_ngram"),
        ({"no_repeat_ngram": 65}, "no_repeat_ngram"),
        ({"backend": "llamacpp"}, "backend must be one of"),
        ({"cuda_graphs": True, "device": "cpu"}, "cuda_graphs=True"),
    ],
)
def test_invalid_values_are_rejected(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LLMConfig(MODEL, **overrides)  # type: ignore[arg-type]


def test_backend_settings_are_validated() -> None:
    with pytest.raises(ValueError, match="base_url"):
        OpenAIBackendConfig(base_url="localhost:8000")
    with pytest.raises(ValueError, match="timeout_s"):
        OpenAIBackendConfig(timeout_s=0)
    with pytest.raises(ValueError, match="gpu_memory_utilization"):
        VLLMBackendConfig(gpu_memory_utilization=1.5)
    with pytest.raises(TypeError, match="OpenAIBackendConfig"):
        LLMConfig(MODEL, openai={"base_url": "http://x"})  # type: ignore[arg-type]


def test_path_type_and_suffix() -> None:
    with pytest.raises(TypeError):
        LLMConfig("model.gguf")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=".gguf"):
        LLMConfig(Path("model.bin"))


def test_frozen() -> None:
    config = LLMConfig(MODEL)
    with pytest.raises(AttributeError):
        config.max_new_tokens = 5  # type: ignore[misc]
