"""The LLM stage computes each session's next prompt through the user's header before
the turn begins (llm/open_prompts.py), on the real engine."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tests.llm.stage import FakeEvents, FakeSender, reply_text
from voxrelay.ipc.records import (
    CONTROL_BODY,
    FINAL_INFO,
    ControlOp,
    Record,
    RecordKind,
    Stamp,
    text_pair,
)
from voxrelay.llm.backend import REPLY_HEADER
from voxrelay.llm.open_prompts import AHEAD
from voxrelay.llm.worker import LLMHandler

WORDS = "Please tell me a fact about the moon."


class PrefillEvents(FakeEvents):
    """Keeps each reply's LLM_PREFILL stamp: (prompt tokens, tokens ready before it)."""

    def __init__(self) -> None:
        self.prefill: dict[tuple[int, int], tuple[int, int]] = {}

    def stamp(self, session_id: int, turn_id: int, point: Stamp, value: int = 0, **kw: Any) -> None:
        if point == Stamp.LLM_PREFILL:
            self.prefill[(session_id, turn_id)] = (value, int(kw["text"]))


def _handler(model_path: Path, **settings: Any) -> tuple[LLMHandler, FakeSender, PrefillEvents]:
    settings = {"model_path": str(model_path), "device": "cpu", "num_threads": 2,
                "max_new_tokens": 6, **settings}  # fmt: skip
    out, events = FakeSender(), PrefillEvents()
    return LLMHandler(settings, out, events), out, events  # type: ignore[arg-type]


def _control(op: ControlOp, session: int) -> Record:
    return Record(RecordKind.CONTROL, 0, session, 0, 0, 0, CONTROL_BODY.pack(op, 0))


def _final(session: int, turn: int, text: str) -> Record:
    return Record(RecordKind.FINAL, 0, session, turn, 0, 0, FINAL_INFO.pack(5.0) + text.encode())


def _run(handler: LLMHandler, out: FakeSender, ends: int) -> None:
    """Step until `ends` replies have ended (REPLY_END) and no work is left."""
    deadline = time.monotonic() + 60
    while sum(kind == RecordKind.REPLY_END for kind, _ in out.records) < ends:
        assert time.monotonic() < deadline, "replies did not end"
        handler.step()
    while handler.step():
        pass


def test_a_session_s_prompt_through_the_user_header_is_ready_before_its_first_word(
    model_path: Path,
) -> None:
    """Opened at SESSION_OPEN, computed at once; the turn then computes only its words and
    the reply header (with the prompt's held-back last token), and replies exactly as a
    stage that opened nothing ahead."""
    replies: dict[bool, str] = {}
    for ahead in (True, False):
        handler, out, events = _handler(model_path)
        try:
            if ahead:
                handler.handle(_control(ControlOp.SESSION_OPEN, 1))
                while handler.step():
                    pass
                opened = handler.prompts.by_session[1]
                assert opened.turn_id == AHEAD and opened.prompt.endswith("<|im_start|>user\n")
                assert handler.backend.prefilled_tokens(opened.request_id) == opened.tokens - 1
            handler.handle(_final(1, 1, WORDS))
            _run(handler, out, 1)
            total, ready = events.prefill[(1, 1)]
            late = handler.backend.count_tokens(WORDS + REPLY_HEADER) + 1
            if ahead:
                assert total - ready <= late, (total, ready, late)
            else:  # the prefix cache alone serves whole blocks only
                block = handler.config.kv_block_size
                assert ready % block == 0 and total - ready > late, (total, ready, late)
            replies[ahead] = reply_text(out)
        finally:
            handler.backend.close()
    assert replies[True] == replies[False] and replies[True]


def test_the_next_prompt_opens_when_a_reply_joins_the_history(model_path: Path) -> None:
    """...and the prefix cache serves it through the reply: the history holds the turn
    as the reply's prompt asked it (Whisper's closing mark kept), so only the last,
    partly filled block and the next user header are computed again."""
    handler, out, _events = _handler(model_path, max_new_tokens=40)  # a reply of blocks
    try:
        handler.handle(_final(1, 1, WORDS))
        _run(handler, out, 1)
        opened = handler.prompts.by_session[1]
        reply = reply_text(out).strip()
        assert opened.turn_id == AHEAD and reply and reply in opened.prompt
        assert opened.prompt.endswith("<|im_start|>user\n")
        assert handler.backend.prefilled_tokens(opened.request_id) == opened.tokens - 1
        cached = handler.backend.engine.num_cached_tokens(opened.request_id)
        block = handler.config.kv_block_size
        assert cached > opened.tokens - 1 - 2 * block, (cached, opened.tokens)
        # The next turn's stable words extend that same request.
        words = text_pair("And the sun", "")
        handler.handle(Record(RecordKind.PARTIAL, 0, 1, 2, 0, 0, words))
        assert handler.prompts.by_session[1].request_id == opened.request_id
        assert handler.prompts.by_session[1].turn_id == 2
    finally:
        handler.backend.close()


def test_prompts_opened_ahead_give_their_place_to_a_reply(model_path: Path) -> None:
    """With two sequences, two idle sessions' prompts opened ahead would hold the engine
    full: a third session's reply takes one's place instead of waiting forever."""
    handler, out, _events = _handler(model_path, max_num_seqs=2)
    try:
        for session in (1, 2):
            handler.handle(_control(ControlOp.SESSION_OPEN, session))
        while handler.step():
            pass
        assert set(handler.prompts.by_session) == {1, 2}
        handler.handle(_final(3, 1, WORDS))
        _run(handler, out, 1)
        assert reply_text(out)
        # One of the two gave its place up; the reply's session opened its next prompt.
        assert len(handler.prompts.by_session) == 2 and 3 in handler.prompts.by_session
    finally:
        handler.backend.close()


def test_a_revised_word_goes_back_to_the_header_without_computing_it_again(
    model_path: Path,
) -> None:
    """A stable word the ASR takes back (ROLLBACK to nothing), or a turn that heard no
    words (an empty FINAL), leaves the same request at the user's header, its K/V kept."""
    handler, _out, _events = _handler(model_path)
    try:
        handler.handle(_control(ControlOp.SESSION_OPEN, 1))
        while handler.step():
            pass
        header = handler.prompts.by_session[1]
        request_id, header_tokens = header.request_id, header.tokens
        handler.handle(Record(RecordKind.PARTIAL, 0, 1, 1, 0, 0, text_pair("Five", "five")))
        while handler.step():
            pass
        assert header.turn_id == 1 and header.tokens > header_tokens
        handler.handle(Record(RecordKind.ROLLBACK, 0, 1, 1, 0, 0, b""))
        opened = handler.prompts.by_session[1]
        assert opened.request_id == request_id and opened.tokens == header_tokens
        assert handler.backend.prefilled_tokens(request_id) == header_tokens - 1
        handler.handle(_final(1, 1, ""))
        opened = handler.prompts.by_session[1]
        assert opened.request_id == request_id and opened.turn_id == AHEAD
        assert not handler.backend.has_pending_work()
    finally:
        handler.backend.close()
