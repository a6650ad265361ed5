"""The LLM stage with each backend: the same records in give the same reply out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.llm.stage import record, stage_reply
from voxrelay.ipc.records import FINAL_INFO, RecordKind, text_pair


def reply(settings: dict[str, Any]) -> tuple[str, str]:
    """(reply text, finish reason) of one turn spoken as two partials and a final."""
    return stage_reply(
        settings,
        [
            record(RecordKind.PARTIAL, text_pair("What is the", " cap")),
            record(RecordKind.PARTIAL, text_pair("What is the capital of", " Fr")),
            record(RecordKind.FINAL, FINAL_INFO.pack(5.0) + b"What is the capital of France?"),
        ],
    )


@pytest.mark.slow
def test_native_and_openai_backends_give_the_same_reply(model_path: Path, llm_server: str) -> None:
    common = {"model_path": str(model_path), "device": "cpu", "num_threads": 2,
              "max_new_tokens": 12, "decode_dtype": "same"}  # fmt: skip
    native = reply(common)
    remote = reply({**common, "backend": "openai", "openai": {"base_url": llm_server}})
    assert native == remote and "Paris" in native[0]
