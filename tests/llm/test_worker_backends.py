"""The LLM stage with each backend: the same records in give the same reply out."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from ipc.records import FINAL_INFO, TOKEN_ID, Record, RecordKind, text_pair
from llm.worker import LLMHandler


class FakeSender:
    def __init__(self) -> None:
        self.records: list[tuple[RecordKind, bytes]] = []

    def send(self, kind: RecordKind, *parts: bytes, **_: Any) -> bool:
        self.records.append((kind, b"".join(parts)))
        return True


class FakeEvents:
    def stamp(self, *args: Any, **kwargs: Any) -> None:
        pass

    def commit(self, *args: Any) -> None:
        pass

    def error(self, *args: Any) -> None:
        raise AssertionError(f"stage error: {args}")


def record(kind: RecordKind, payload: bytes) -> Record:
    return Record(kind, 0, 1, 1, 0, 0, payload)


def reply(settings: dict[str, Any]) -> tuple[str, str]:
    """(reply text, finish reason) of one turn spoken as two partials and a final."""
    out = FakeSender()
    handler = LLMHandler(settings, out, FakeEvents())  # type: ignore[arg-type]
    try:
        handler.handle(record(RecordKind.PARTIAL, text_pair("What is the", " cap")))
        handler.handle(record(RecordKind.PARTIAL, text_pair("What is the capital of", " Fr")))
        handler.step()
        handler.handle(record(RecordKind.FINAL, FINAL_INFO.pack(5.0) + b"What is the capital "
                              b"of France?"))  # fmt: skip
        deadline = time.monotonic() + 60
        while not any(kind == RecordKind.REPLY_END for kind, _ in out.records):
            assert time.monotonic() < deadline, "no REPLY_END"
            handler.step()
    finally:
        handler.backend.close()
    text = "".join(p[TOKEN_ID.size :].decode() for k, p in out.records if k == RecordKind.TOKEN)
    reason = next(p.decode() for k, p in out.records if k == RecordKind.REPLY_END)
    return text, reason


@pytest.mark.slow
def test_native_and_openai_backends_give_the_same_reply(model_path: Path, llm_server: str) -> None:
    common = {"model_path": str(model_path), "device": "cpu", "num_threads": 2,
              "max_new_tokens": 12, "decode_dtype": "same"}  # fmt: skip
    native = reply(common)
    remote = reply({**common, "backend": "openai", "openai": {"base_url": llm_server}})
    assert native == remote and "Paris" in native[0]
