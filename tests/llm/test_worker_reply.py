"""What the LLM stage asks for a reply: the user's words as Whisper wrote them, closing
mark included. The end-of-turn probe reads before the mark (tests/llm/test_probe.py)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.llm.stage import record, stage_reply
from voxrelay.ipc.records import FINAL_INFO, RecordKind
from voxrelay.llm.backend import REPLY_HEADER
from voxrelay.llm.native_backend import NativeBackend

# `make demo`'s transcript of demo/ill-disposed.wav. Asked without its period, SmolLM2
# answers with the same words (the stage did so until session 31).
DEMO_WORDS = "He was not an ill-sposed young man."


def _words(text: str) -> str:
    return re.sub(r"[^a-z ]", "", text.lower()).strip()


def test_the_reply_prompt_keeps_the_closing_mark_and_answers_a_statement(
    model_path: Path, monkeypatch
) -> None:
    submitted: list[str] = []
    submit = NativeBackend.submit

    def spy(self: NativeBackend, request_id: int, prompt: str) -> None:
        submitted.append(prompt)
        submit(self, request_id, prompt)

    monkeypatch.setattr(NativeBackend, "submit", spy)
    settings = {"model_path": str(model_path), "device": "cpu", "num_threads": 2}
    final = FINAL_INFO.pack(5.0) + DEMO_WORDS.encode()
    reply, _reason = stage_reply(settings, [record(RecordKind.FINAL, final)])
    assert submitted and submitted[-1].endswith(DEMO_WORDS + REPLY_HEADER), submitted[-1][-80:]
    assert _words(reply) and not _words(reply).startswith(_words(DEMO_WORDS)), reply
