"""File-in/file-out runs through the three stage processes (CLI `run`, demo, bench).

Audio is fed at real-time pace in 20 ms frames, as a microphone would deliver it,
followed by trailing silence so the endpointer sees the end of speech the way it
would live. END_OF_INPUT then travels down the pipeline behind the session's last
records: when it comes back out of TTS, every turn of that input is complete.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from voxrelay.asr.config import ASRConfig
from voxrelay.ipc.records import (
    AUDIO_FORMAT,
    CONTROL_BODY,
    PROB_SCALE,
    STAMP_BODY,
    TURN_HINT,
    ControlOp,
    Record,
    RecordKind,
    SampleFormat,
    Stamp,
)
from voxrelay.pipeline.audio_io import Clip
from voxrelay.pipeline.barge_in import check_min_words
from voxrelay.pipeline.config import OPENING_TURN, PipelineConfig, agent_words, check_user_text
from voxrelay.pipeline.idle import IdlePrompter
from voxrelay.pipeline.interrupts import Interrupts
from voxrelay.pipeline.otel import exporter_from_env
from voxrelay.pipeline.router import SessionRouter
from voxrelay.pipeline.session import Session, Sink
from voxrelay.pipeline.supervisor import Supervisor
from voxrelay.pipeline.trace import TraceSink, TurnTrace

log = logging.getLogger(__name__)

FRAME_MS = 20
# How often trace rows waiting for their reply audio to play are checked (Session.settle).
SETTLE_INTERVAL_S = 0.05
# Client audio goes to the ASR in records of at most this many bytes (1 s at 16 kHz), so
# one large client message cannot take a big bite of the shared input ring at once.
MAX_AUDIO_RECORD_BYTES = 32_000


@dataclass(slots=True)
class ClipResult:
    traces: list[TurnTrace]
    audio: bytes
    sample_rate: int
    errors: list[str] = field(default_factory=list)


class CollectingSink:
    """Gathers one session's reply audio and events; `done` is set by END_OF_INPUT."""

    def __init__(self) -> None:
        self.audio = bytearray()
        self.sample_rate = 0
        self.errors: list[str] = []
        self.texts: list[tuple[str, str]] = []
        self.done = asyncio.Event()

    def on_audio(self, turn_id: int, pcm16: bytes, sample_rate: int) -> None:
        self.audio += pcm16
        self.sample_rate = sample_rate

    def on_text(self, turn_id: int, kind: str, text: str) -> None:
        self.texts.append((kind, text))

    def on_error(self, turn_id: int, message: str) -> None:
        self.errors.append(message)

    def on_audio_end(self, turn_id: int) -> None:
        pass

    def on_turn_done(self, trace: TurnTrace) -> None:
        pass

    def on_input_end(self, lost: bool) -> None:
        self.done.set()


class Pipeline:
    """A running supervisor plus the session router: the streaming pipeline as a whole."""

    def __init__(
        self, config: PipelineConfig, trace_path: Path | None = None, transport_name: str = "file"
    ) -> None:
        self.traces = TraceSink(trace_path)
        self.router = SessionRouter(
            self.traces, transport=transport_name, models=config.model_names()
        )
        self._spans = exporter_from_env()  # None unless OTEL_EXPORTER_OTLP_* is set
        if self._spans is not None:
            self.traces.observers.append(self._spans.export_turn)
        self.supervisor = Supervisor(config, self._on_record)
        self.asr_settings = dict(config.asr)
        self.supervisor.on_restart = self._on_restart
        self._idle = IdlePrompter(config, self._speak_up)
        self.interrupts = Interrupts(self.supervisor, self.router)

    def _on_restart(self, stage: str, why: str) -> None:
        # Work in flight died with the stage: fail those turns and tell every session that
        # its END_OF_INPUT marker may have died too; the next input works again.
        for session_id, turn_id in self.router.on_stage_restart(stage, why):
            # Leftovers of the lost turn must not keep the stages busy.
            self.supervisor.control(ControlOp.NEW_TURN, session_id=session_id, turn_id=turn_id + 1)
        for session in list(self.router.sessions.values()):
            session.sink.on_input_end(lost=True)

    def _on_record(self, stage: str, record: Record) -> None:
        if record.kind == RecordKind.STAMP and stage == "llm":
            point, value = STAMP_BODY.unpack_from(record.payload)
            if point == Stamp.TURN_END_PROB:  # the ASR decides the pause on it
                self.supervisor.control(
                    ControlOp.TURN_HINT,
                    session_id=record.session_id,
                    turn_id=record.turn_id,
                    stages=("asr",),
                    text=TURN_HINT.pack(value / PROB_SCALE if value >= 0 else math.nan),
                )
        if record.kind == RecordKind.END_OF_INPUT:
            # The supervisor has delivered the events written before it (LAST_WORDS).
            session = self.router.sessions.get(record.session_id)
            if session is not None:
                session.flush()  # every turn of the input is complete: write their rows
                session.sink.on_input_end(lost=False)
            return
        self.router.on_record(stage, record)

    async def __aenter__(self) -> Pipeline:
        await self.supervisor.start()
        self._settler = asyncio.create_task(self._settle_rows())
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._settler.cancel()
        for session in self.router.sessions.values():
            session.flush()
        await self.supervisor.stop()
        self.traces.close()
        if self._spans is not None:
            self._spans.shutdown()

    async def _settle_rows(self) -> None:
        """Writes each turn's trace row once its reply audio has played (Session.settle)."""
        while True:
            await asyncio.sleep(SETTLE_INTERVAL_S)
            now = time.perf_counter_ns()
            for session in list(self.router.sessions.values()):
                session.settle(now)
                if self._idle.enabled:
                    self._idle.check(session, now)

    def _speak_up(self, session: Session, text: str) -> None:
        try:
            self.say(session.session_id, text)
        except ValueError as exc:  # a reply came in between: the next check sees it
            log.info("session %d: idle prompt not said: %s", session.session_id, exc)

    def open_session(self, sink: Sink, transport: str) -> Session:
        """A live session (a WebSocket client): its output goes to `sink`."""
        session = self.router.open(sink, transport)
        # The LLM computes the session's first prompt through the user's header now (a
        # hint: a stalled stage's full ring does not stop the session from opening).
        self.supervisor.control(
            ControlOp.SESSION_OPEN, session_id=session.session_id, stages=("llm",), block=False
        )
        if self.supervisor.config.greeting:
            self.greet(session.session_id, self.supervisor.config.greeting)
        if self.supervisor.config.barge_in:
            self.interrupts.watch(session)
        return session

    def greet(
        self, session_id: int, text: str | None = None, instructions: str | None = None
    ) -> int:
        """The agent speaks first: `text` as written, or (None) an opening the model writes
        from the system prompt (`instructions`: in its place, for this reply only). Only
        before the session's first audio: the greeting is turn OPENING_TURN and the
        user's turns are numbered after it. Returns its turn. The user speaking over it
        cuts it (barge-in), and the dialogue keeps what was heard of it."""
        session = self._open(session_id)
        if not session.before_first_audio:
            raise ValueError("the agent can speak first only before the session's first audio")
        verbatim, words = agent_words(text, instructions)
        session.trace(OPENING_TURN).opening = True
        # On the audio ring, ahead of the session's first audio: the ASR numbers the user's
        # first utterance after the greeting, whatever the stages' loops read first.
        self._to_asr(session_id, ControlOp.TURN_BASE, OPENING_TURN + 1, turn_id=OPENING_TURN)
        self.supervisor.control(
            ControlOp.GREET,
            int(verbatim),
            session_id=session_id,
            turn_id=OPENING_TURN,
            stages=("llm",),
            text=words.encode(),
        )
        return OPENING_TURN

    def say(
        self, session_id: int, text: str | None = None, instructions: str | None = None
    ) -> None:
        """The agent speaks up now, with no user words before it ("Are you still there?"):
        `text` as written, or words the model writes from the conversation so far and the
        system prompt (`instructions`: in its place, for this reply only). Before the
        session's first audio this is `greet`. The ASR numbers it as the next turn; if
        the user has begun speaking by then, it is dropped and their turn is answered.
        ValueError while a reply is coming or playing (the agent speaks after it), or for
        bad words."""
        session = self._open(session_id)
        if session.before_first_audio:
            self.greet(session_id, text, instructions)
            return
        verbatim, words = agent_words(text, instructions)
        if session.replying():
            raise ValueError("a reply is coming or playing: the agent speaks after it")
        self._to_asr(session_id, ControlOp.AGENT_TURN, int(verbatim), words)

    def _to_asr(
        self, session_id: int, op: ControlOp, argument: int, text: str = "", turn_id: int = 0
    ) -> None:
        """A control for the ASR on the audio ring, behind the audio sent before it: the
        controls that have the ASR number a turn (UNNUMBERED_CONTROLS)."""
        self.supervisor.audio_in.send(
            RecordKind.CONTROL,
            CONTROL_BODY.pack(op, argument),
            text.encode(),
            session_id=session_id,
            turn_id=turn_id,
        )

    def _open(self, session_id: int) -> Session:
        session = self.router.sessions.get(session_id)
        if session is None:
            raise ValueError(f"session {session_id} is not open")
        return session

    def send_audio(self, session_id: int, pcm16: bytes, sample_rate: int, channels: int = 1) -> int:
        """PCM16 (interleaved if stereo) to the ASR without blocking; returns the bytes
        dropped (ring full)."""
        session = self.router.sessions.get(session_id)
        if session is not None:
            session.input_sent = True
        header = AUDIO_FORMAT.pack(sample_rate, channels, SampleFormat.PCM16)
        dropped = 0
        for start in range(0, len(pcm16), MAX_AUDIO_RECORD_BYTES):
            chunk = pcm16[start : start + MAX_AUDIO_RECORD_BYTES]
            if not self.supervisor.audio_in.send(
                RecordKind.AUDIO_IN, header, chunk, session_id=session_id, block=False
            ):
                dropped += len(chunk)
        return dropped

    def send_text(self, session_id: int, text: str) -> None:
        """A turn the user typed: answered as a spoken one would be (a reply playing is
        cut as by speech over it, and the dialogue keeps what was heard of it). It goes
        behind the session's audio on the ASR's ring, so what was said before it is a
        turn of its own first; the ASR numbers it. ValueError if the session is not open
        or the text is empty or too long (MAX_USER_TEXT_CHARS)."""
        session = self._open(session_id)
        text = check_user_text(text)
        session.input_sent = True  # the conversation has begun: no greeting after this
        if self.supervisor.config.barge_in and session.replying():
            # Cut it here, as speech over it would: a typed turn's speech start and final
            # leave the ASR together, so a cut decided on that speech start could reach the
            # LLM after the typed turn's prompt was built on the whole unheard reply.
            # NEW_TURN and HEARD are on the LLM's control ring before the ASR reads the text.
            self.interrupts.barge_in(session, session.last_reply_turn() + 1, speech=False)
        self._to_asr(session_id, ControlOp.TEXT_TURN, 0, text)

    def end_input(self, session_id: int) -> None:
        """The speech ends here: the ASR finalizes the open utterance."""
        self.supervisor.audio_in.send(RecordKind.END_OF_INPUT, session_id=session_id)

    def new_turn(self, session_id: int, turn_id: int, speech: bool = False) -> None:
        """Barge-in: every stage drops the session's turns older than `turn_id`
        (`Interrupts.new_turn`)."""
        self.interrupts.new_turn(session_id, turn_id, speech)

    def set_system_prompt(self, session_id: int, prompt: str) -> None:
        self.supervisor.control(
            ControlOp.SYSTEM_PROMPT, session_id=session_id, stages=("llm",), text=prompt.encode()
        )

    def set_voice_speed(self, session_id: int, speed: float) -> None:
        """The session's replies speak at `speed` (0.5..2.0) from the next fragment on."""
        if not 0.5 <= speed <= 2.0:
            raise ValueError(f"voice speed {speed} is outside 0.5..2.0 (1.0 = normal tempo)")
        self.supervisor.control(
            ControlOp.VOICE_SPEED, round(speed * 1000), session_id=session_id, stages=("tts",)
        )

    def set_turn_taking(
        self, session_id: int, eagerness: str | None, fallback_ms: int | None = None
    ) -> None:
        """The session's pauses end the turn with this eagerness ("low", "medium",
        "high") and wait at most `fallback_ms`; None keeps the ASR's configured value.
        ValueError (nothing sent) when either is out of range."""
        settings = ASRConfig(**self.asr_settings)
        eagerness = settings.eagerness if eagerness is None else eagerness
        fallback_ms = settings.turn_fallback_ms if fallback_ms is None else fallback_ms
        replace(settings, eagerness=eagerness, turn_fallback_ms=fallback_ms)  # validates
        self.supervisor.control(
            ControlOp.TURN_TAKING,
            fallback_ms,
            session_id=session_id,
            stages=("asr",),
            text=eagerness.encode(),
        )

    def set_barge_in_min_words(self, session_id: int, words: object) -> int:
        """The words the session's speech over a reply must hold to cut it (the reply
        pauses meanwhile), from its next transcript on: a client that holds paused audio
        asks for them on a server that cuts at once. None: the server's. Returns the
        session's value now; ValueError (nothing changed) as `check_barge_in_min_words`."""
        words = self.check_barge_in_min_words(words)
        session = self.router.sessions.get(session_id)
        if session is not None and session.barge_in_rule is not None:
            session.barge_in_rule.min_words = words
        return words

    def check_barge_in_min_words(self, words: object) -> int:
        """What a session's `words` come to (None: the server's); ValueError when out of
        range, or when the server has barge-in off."""
        if not self.supervisor.config.barge_in:
            raise ValueError("barge-in is off on this server (barge_in = false)")
        return check_min_words(
            self.supervisor.config.barge_in_min_words if words is None else words
        )

    def set_heard(self, session_id: int, turn_id: int, heard: str) -> None:
        """The dialogue keeps `heard` as turn `turn_id`'s reply: a client that knows what it
        played (a Realtime `conversation.item.truncate`) corrects the barge-in's bound."""
        self.supervisor.control(
            ControlOp.HEARD,
            session_id=session_id,
            turn_id=turn_id,
            stages=("llm",),
            text=heard.encode(),
        )

    def close_session(self, session_id: int) -> None:
        """Frees the session here and in every stage (its records still in flight drop)."""
        self.router.close(session_id)
        self.supervisor.control(ControlOp.SESSION_CLOSE, session_id=session_id)

    async def run_clip(
        self,
        clip: Clip,
        *,
        realtime: bool = True,
        trailing_silence_s: float = 1.0,
        timeout_s: float = 120.0,
    ) -> ClipResult:
        sink = CollectingSink()
        session = self.open_session(sink, "file")
        try:
            await self.feed(session.session_id, clip.with_silence(trailing_silence_s), realtime)
            self.supervisor.audio_in.send(RecordKind.END_OF_INPUT, session_id=session.session_id)
            try:
                await asyncio.wait_for(sink.done.wait(), timeout_s)
            except TimeoutError:
                sink.errors.append(f"no reply within {timeout_s:.0f} s")
            self.supervisor.control(ControlOp.SESSION_CLOSE, session_id=session.session_id)
            traces = list(session.finished)
            return ClipResult(traces, bytes(sink.audio), sink.sample_rate, sink.errors)
        finally:
            self.router.close(session.session_id)

    async def feed(self, session_id: int, clip: Clip, realtime: bool) -> None:
        start = time.perf_counter()
        for index, frame in enumerate(clip.frames(FRAME_MS)):
            if realtime:
                # Pace against the start time, not frame to frame, so drift cannot build up.
                delay = start + index * FRAME_MS / 1000 - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
            elif index % 50 == 0:
                await asyncio.sleep(0)  # let the loop route replies while we feed
            self.send_audio(session_id, frame, clip.sample_rate, clip.channels)
