"""The ASR stage handler: what a decode finds travels with what its backlog finds."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from tests.asr.clipdata import SAMPLE_RATE, read_clip, silence, trim
from voxrelay.asr.config import ASRConfig
from voxrelay.asr.events import Partial
from voxrelay.asr.turn_end import EAGERNESS
from voxrelay.asr.worker import ASRHandler
from voxrelay.ipc.records import (
    AUDIO_FORMAT,
    CONTROL_BODY,
    TURN_HINT,
    ControlOp,
    Record,
    RecordKind,
    SampleFormat,
    Stamp,
)

FRAME = SAMPLE_RATE // 50  # 20 ms, as the pipeline's sources send it
FRAME_NS = 20_000_000


class RecordingSender:
    """Records what the handler sends, and in which input batch (`batch` is set by the
    test between batches, as the stage loop calls `step` between them)."""

    def __init__(self) -> None:
        self.batch = 0
        self.sent: list[tuple[int, RecordKind]] = []

    def send(self, kind: RecordKind, *parts: bytes, **_: Any) -> bool:
        self.sent.append((self.batch, kind))
        return True


class NoEvents:
    def stamp(self, *args: Any, **kwargs: Any) -> None:
        pass

    def error(self, *args: Any) -> None:
        raise AssertionError(f"stage error: {args}")


def _audio_record(samples: np.ndarray, arrival_ns: int, session_id: int = 1) -> Record:
    payload = AUDIO_FORMAT.pack(SAMPLE_RATE, 1, SampleFormat.FLOAT32) + samples.tobytes()
    return Record(RecordKind.AUDIO_IN, 0, session_id, 0, arrival_ns, 0, payload)


def test_a_decodes_partial_leaves_with_the_speculative_end_its_backlog_holds(
    clips: Path,
) -> None:
    out = RecordingSender()
    handler = ASRHandler({"partial_interval_ms": 0}, out, NoEvents())  # type: ignore[arg-type]
    audio = np.concatenate([trim(read_clip(clips / "goforward.raw")), silence(1.0)])
    records = [
        _audio_record(audio[i : i + FRAME], (i // FRAME + 1) * FRAME_NS)
        for i in range(0, len(audio) - FRAME + 1, FRAME)
    ]
    # As a live stage sees it: frames one by one until the pause decode runs; during
    # that decode ~its length of audio queues up, and the next batch reads all of it.
    index = 0
    while not any(isinstance(event, Partial) for _, event in handler.held):
        assert index < len(records), "no pause decode"
        handler.handle(records[index])
        index += 1
        if not any(isinstance(event, Partial) for _, event in handler.held):
            handler.step()
            out.batch += 1
    assert RecordKind.PARTIAL not in [kind for _, kind in out.sent]
    backlog = 12  # ~240 ms of audio: one end-of-turn decode's worth on this machine
    for record in records[index : index + backlog]:
        handler.handle(record)
    handler.step()
    kinds = [kind for batch, kind in out.sent if batch == out.batch]
    assert kinds == [RecordKind.PARTIAL, RecordKind.SPECULATIVE_END], kinds
    # Later events still leave with the batch that found them (nothing waits longer).
    out.batch += 1
    for record in records[index + backlog :]:
        handler.handle(record)
        handler.step()
        out.batch += 1
    assert RecordKind.FINAL in [kind for _, kind in out.sent]
    assert not handler.held


class FinalModels(NoEvents):
    """Notes the model each ASR_FINAL stamp names, by session."""

    def __init__(self) -> None:
        self.models: list[tuple[int, str]] = []

    def stamp(self, session_id: int, turn_id: int, point: Stamp, value: int = 0,
              text: str = "", at_ns: int | None = None) -> None:  # fmt: skip
        if point == Stamp.ASR_FINAL:
            self.models.append((session_id, text))


def test_auto_decodes_with_base_alone_and_tiny_while_another_session_is_open(
    clips: Path,
) -> None:
    events = FinalModels()
    handler = ASRHandler({"partial_interval_ms": 0}, RecordingSender(), events)  # type: ignore[arg-type]
    audio = np.concatenate([trim(read_clip(clips / "goforward.raw")), silence(1.0)])
    clock = [0]

    def feed(session_id: int, samples: np.ndarray) -> None:
        for i in range(0, len(samples) - FRAME + 1, FRAME):
            clock[0] += FRAME_NS
            handler.handle(_audio_record(samples[i : i + FRAME], clock[0], session_id))
            handler.step()

    feed(1, audio)  # alone
    feed(2, silence(0.1))  # a second session opens; it says nothing
    feed(1, audio)
    handler.handle(Record(RecordKind.END_OF_INPUT, 0, 2, 0, clock[0], 0, b""))
    feed(1, audio)  # alone again
    assert events.models == [(1, "base"), (1, "tiny.en"), (1, "base")]


def _turn_hint(prob: float, session_id: int = 1, turn_id: int = 0) -> Record:
    payload = CONTROL_BODY.pack(ControlOp.TURN_HINT, 0) + TURN_HINT.pack(prob)
    return Record(RecordKind.CONTROL, 0, session_id, turn_id, 0, 0, payload)


def _frames_from_speculative_end_to_final(
    clips: Path, prob: float | None, speech: np.ndarray | None = None
) -> int:
    """Feed goforward (or `speech`) and silence one 20 ms frame per batch; at the
    SpeculativeEnd the LLM's P(end of turn) arrives (None: never; NaN: the backend says
    at once that it has none). Frames from it to the FINAL."""
    out = RecordingSender()
    handler = ASRHandler({"partial_interval_ms": 0}, out, NoEvents())  # type: ignore[arg-type]
    if speech is None:
        speech = trim(read_clip(clips / "goforward.raw"))
    audio = np.concatenate([speech, silence(3.0)])
    speculative_at = None
    for index, start in enumerate(range(0, len(audio) - FRAME + 1, FRAME)):
        handler.handle(_audio_record(audio[start : start + FRAME], (index + 1) * FRAME_NS))
        handler.step()
        sent = [kind for _, kind in out.sent]
        if speculative_at is None and RecordKind.SPECULATIVE_END in sent:
            speculative_at = index
            if prob is not None:
                handler.handle(_turn_hint(prob))
                handler.step()
        if RecordKind.FINAL in sent:
            assert speculative_at is not None
            return index - speculative_at
    raise AssertionError("no FINAL")


def test_a_confident_llm_ends_the_pause_at_once_an_unsure_one_waits(clips: Path) -> None:
    at_once = _frames_from_speculative_end_to_final(clips, 0.9)
    no_hint = _frames_from_speculative_end_to_final(clips, None)
    unsure = _frames_from_speculative_end_to_final(clips, 1e-9)
    # A sure end waits only for the breath-length floor: medium's 300 ms of silence,
    # 150 ms after the SpeculativeEnd (one VAD window of slack).
    floor_frames = (EAGERNESS["medium"].min_wait_ms - 150) / 20
    assert floor_frames - 1 <= at_once <= floor_frames + 2
    # Without the hint the pause is decided at its deadline (text_hint_wait_ms later).
    assert at_once < ASRConfig().text_hint_wait_ms / 20 - 1 <= no_hint < unsure
    assert unsure * 20 >= 600  # "Go forward ten meters" is no end with P 1e-9


def test_a_pause_with_no_llm_probability_is_decided_by_whispers_voice(
    clips: Path, natural_dir: Path, models
) -> None:
    """A backend with no probability to give (no probe, a server without logprobs) says
    so at once. The pause is then decided by the fusion fitted without the LLM's term,
    on Whisper's closing probability, not by the 300 ms silence rule: a closed sentence
    still ends at the floor, and JFK's "And so my fellow Americans," (Whisper reads the
    voice as less sure of a close: 0.96 against 0.98) waits past the rule (it cut every
    such pause; docs/asr.md, "Session 21")."""
    from tests.asr.natural import natural_turns

    floor_frames = (EAGERNESS["medium"].min_wait_ms - 150) / 20
    closed = _frames_from_speculative_end_to_final(clips, math.nan)
    assert floor_frames - 1 <= closed <= floor_frames + 2
    (jfk,) = [turn for turn in natural_turns(natural_dir, clips, models.vad) if turn.name == "jfk"]
    first_pause = jfk.pauses[0][0]
    hangs = _frames_from_speculative_end_to_final(clips, math.nan, jfk.audio[:first_pause])
    assert hangs >= floor_frames + 5, hangs  # 100 ms or more past the silence rule
    assert hangs * 20 + 150 < ASRConfig().turn_fallback_ms  # and no fallback: it was heard
