"""The TTS stage process: token records in, reply audio records out.

Tokens from every session are chunked as they arrive (a `Chunker` per turn);
fragments wait in one FIFO and `step()` synthesizes one per loop iteration, so
control records are looked at between fragments. Audio leaves at the voice's native
rate; each session's sink converts to the rate its client asked for.

A reply's first fragment is cut only when the delta after its last word arrives ("I'm
sorry" waits for " for": until then the last word may go on, as "The 1" goes on to
"The 10"). With nothing queued, the stage
starts on the fragment the text so far would make (`Chunker.tentative_first`) and keeps
its first audio chunk; when the next delta confirms that cut, the chunk goes out at
once, and otherwise it is dropped (docs/tts.md, "The first fragment ahead of its cut").
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from voxrelay.ipc.channel import Sender
from voxrelay.ipc.records import (
    AUDIO_FORMAT,
    CONTROL_BODY,
    TOKEN_ID,
    ControlOp,
    Record,
    RecordKind,
    SampleFormat,
    Stamp,
)
from voxrelay.pipeline.models import asset_path
from voxrelay.pipeline.worker import Events, TableHandler
from voxrelay.tts.chunker import Chunker
from voxrelay.tts.config import TTSConfig
from voxrelay.tts.voice import AudioChunk, Voice

# Reply audio goes out in records of at most this many samples (~93 ms at 22.05 kHz),
# so a sink can start playing, and drop on barge-in, at a fine grain.
RECORD_SAMPLES = 2048


@dataclass(slots=True)
class _Job:
    session_id: int
    turn_id: int
    fragment: str | None  # None: an END_OF_INPUT marker to pass on in order
    final: bool
    origin_ns: int
    audio: Iterator[AudioChunk] | None = None  # synthesized ahead, in part


@dataclass(slots=True)
class _Ahead:
    """A turn's first fragment started before the delta that confirms its cut."""

    fragment: str
    speed: float | None
    chunks: list[AudioChunk]  # made so far
    rest: Iterator[AudioChunk]  # the same synthesis, paused

    def audio(self) -> Iterator[AudioChunk]:
        return itertools.chain(self.chunks, self.rest)


class TTSHandler(TableHandler):
    def __init__(self, config: dict[str, Any], out: Sender, events: Events) -> None:
        settings = dict(config)
        settings.setdefault("voice_dir", str(asset_path(str(settings.pop("voice", "joe")))))
        self.config = TTSConfig(**settings)
        self.voice = Voice(self.config)
        self.out = out
        self.events = events
        self.chunkers: dict[tuple[int, int], Chunker] = {}
        self.jobs: deque[_Job] = deque()
        self.started: set[tuple[int, int]] = set()
        self.speeds: dict[int, float] = {}  # by session: a client's own voice speed
        self.ahead: dict[tuple[int, int], _Ahead] = {}
        self._format = AUDIO_FORMAT.pack(self.voice.sample_rate, 1, SampleFormat.PCM16)
        self._dispatch: dict[RecordKind, Callable[[Record], None]] = {
            RecordKind.TOKEN: self._on_token,
            RecordKind.REPLY_END: self._on_reply_end,
            RecordKind.END_OF_INPUT: self._on_end_of_input,
            RecordKind.CONTROL: self._on_control,
            RecordKind.RESUME: self._on_resume,
            RecordKind.COMMIT: self._pass_on,
        }

    def _chunker(self, key: tuple[int, int]) -> Chunker:
        if key not in self.chunkers:
            self.chunkers[key] = Chunker(self.config)
        return self.chunkers[key]

    def _on_token(self, record: Record) -> None:
        key = (record.session_id, record.turn_id)
        delta = record.payload[TOKEN_ID.size :].decode("utf-8", errors="replace")
        for fragment in self._chunker(key).push(delta):
            job = _Job(*key, fragment, False, record.origin_ns)
            ahead = self.ahead.pop(key, None)
            if ahead is not None:
                speed = self.speeds.get(record.session_id)
                if (ahead.fragment, ahead.speed) == (fragment, speed):
                    job.audio = ahead.audio()
                else:
                    ahead.rest.close()  # the text went on: "The 1" became "The 10"
            self.jobs.append(job)

    def _on_reply_end(self, record: Record) -> None:
        key = (record.session_id, record.turn_id)
        chunker = self.chunkers.pop(key, None)
        self._drop_orphaned_ahead()  # a last fragment is spoken as the last
        tail = chunker.flush() if chunker else []
        for index, fragment in enumerate(tail or [""]):
            self.jobs.append(_Job(*key, fragment, index == len(tail or [""]) - 1, record.origin_ns))

    def _on_end_of_input(self, record: Record) -> None:
        self.jobs.append(_Job(record.session_id, record.turn_id, None, False, 0))

    def _on_resume(self, record: Record) -> None:
        # A speculative reply was retracted: drop what is left of it, and tell the sink
        # to drop what it holds (every audio record of it already went out before this).
        key = (record.session_id, record.turn_id)
        self.jobs = deque(
            j for j in self.jobs if (j.session_id, j.turn_id) != key or j.fragment is None
        )
        self.chunkers.pop(key, None)
        self._drop_orphaned_ahead()
        self.started.discard(key)
        self._pass_on(record)

    def _pass_on(self, record: Record) -> None:
        self.out.send(
            record.kind,
            session_id=record.session_id,
            turn_id=record.turn_id,
            origin_ns=record.origin_ns,
            timeout_s=5.0,
        )

    def _on_control(self, record: Record) -> None:
        op, argument = CONTROL_BODY.unpack_from(record.payload)
        if op == ControlOp.VOICE_SPEED:
            # From the next fragment on, queued ones included; the supervisor validated it.
            self.speeds[record.session_id] = argument / 1000
            return
        if op == ControlOp.SESSION_CLOSE:
            self.speeds.pop(record.session_id, None)
        if op in (ControlOp.NEW_TURN, ControlOp.SESSION_CLOSE):
            # Drop every fragment of this session's older turns (barge-in, hang-up). A
            # barge-in keeps the END_OF_INPUT marker (turn 0): the session still waits
            # for it; a hang-up drops it with the rest.
            limit = record.turn_id if op == ControlOp.NEW_TURN else 1 << 32
            keep_marker = op == ControlOp.NEW_TURN
            self.jobs = deque(
                j
                for j in self.jobs
                if j.session_id != record.session_id
                or j.turn_id >= limit
                or (keep_marker and j.fragment is None)
            )
            for key in [k for k in self.chunkers if k[0] == record.session_id and k[1] < limit]:
                del self.chunkers[key]
            self._drop_orphaned_ahead()

    def _drop_orphaned_ahead(self) -> None:
        """A guess lives as long as its turn's chunker: whatever drops that (the reply's
        end, a retraction, a barge-in, a hang-up) drops the guess."""
        for key in [k for k in self.ahead if k not in self.chunkers]:
            self.ahead.pop(key).rest.close()

    def _synthesize_ahead(self) -> None:
        """With nothing queued: the first chunk of one turn's tentative first fragment."""
        for key, chunker in self.chunkers.items():
            fragment = chunker.tentative_first()
            if fragment is None or key in self.started:
                continue
            ahead = self.ahead.get(key)
            if ahead is not None and ahead.fragment == fragment:
                continue  # this text's first chunk is made already
            if ahead is not None:
                ahead.rest.close()
            speed = self.speeds.get(key[0])
            rest = self.voice.synthesize(fragment, final=False, speed=speed)
            self.ahead[key] = _Ahead(fragment, speed, list(itertools.islice(rest, 1)), rest)
            return

    def step(self) -> bool:
        if not self.jobs:
            if self.config.synthesize_ahead:
                self._synthesize_ahead()
            return False
        job = self.jobs.popleft()
        key = (job.session_id, job.turn_id)
        if job.fragment is None:
            self.out.send(RecordKind.END_OF_INPUT, session_id=job.session_id, timeout_s=5.0)
            return bool(self.jobs)
        speed = self.speeds.get(job.session_id)
        fragment_samples = 0
        audio = job.audio or self.voice.synthesize(job.fragment, final=job.final, speed=speed)
        for chunk in audio:
            pcm = chunk.pcm.tobytes()
            fragment_samples += len(chunk.pcm)
            for start in range(0, len(pcm), RECORD_SAMPLES * 2):
                if key not in self.started:
                    self.started.add(key)
                    self.events.stamp(job.session_id, job.turn_id, Stamp.TTS_FIRST_AUDIO)
                self.out.send(
                    RecordKind.AUDIO_OUT,
                    self._format,
                    pcm[start : start + RECORD_SAMPLES * 2],
                    session_id=job.session_id,
                    turn_id=job.turn_id,
                    origin_ns=job.origin_ns,
                    timeout_s=5.0,
                )
        if job.fragment.strip():
            # Which text made which samples: the supervisor maps the audio a user heard
            # before a barge-in back to words (pipeline/heard.py).
            self.events.stamp(
                job.session_id, job.turn_id, Stamp.FRAGMENT, fragment_samples, job.fragment
            )
        if job.final:
            self.started.discard(key)
            self.out.send(
                RecordKind.AUDIO_END,
                session_id=job.session_id,
                turn_id=job.turn_id,
                origin_ns=job.origin_ns,
                timeout_s=5.0,
            )
            self.events.stamp(
                job.session_id, job.turn_id, Stamp.TTS_DONE, at_ns=time.perf_counter_ns()
            )
        return bool(self.jobs)
