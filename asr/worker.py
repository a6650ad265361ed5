"""The ASR stage process: audio records in, transcript records out.

One `ASRStream` per session shares one Whisper model and one VAD session. Each
utterance becomes a turn. A session's turn ids keep rising across END_OF_INPUT (which
ends a stream; the next audio starts a new one): a NEW_TURN floor set by an earlier
interrupt must never swallow the turns of later input.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from voxrelay.asr.budget import DecodeBudget
from voxrelay.asr.config import ASRConfig
from voxrelay.asr.events import (
    TYPED,
    AgentTurn,
    ASREvent,
    Discard,
    EndScored,
    Final,
    Hold,
    Partial,
    Resume,
    Rollback,
    SpeculativeEnd,
    SpeechStart,
)
from voxrelay.asr.models import load_asr, warm_up
from voxrelay.asr.stream import ASRStream
from voxrelay.ipc.channel import Sender
from voxrelay.ipc.records import (
    AUDIO_FORMAT,
    CONTROL_BODY,
    END_SCORE,
    FINAL_INFO,
    TURN_HINT,
    ControlOp,
    Record,
    RecordKind,
    SampleFormat,
    Stamp,
    text_pair,
)
from voxrelay.pipeline.memory import release_freed_memory
from voxrelay.pipeline.worker import Events, TableHandler

log = logging.getLogger(__name__)


class ASRHandler(TableHandler):
    def __init__(self, config: dict[str, Any], out: Sender, events: Events) -> None:
        self.config = ASRConfig(**config)
        self.models = load_asr(self.config)
        warm_up(self.models, self.config)
        # One budget for every session's partial decodes (asr/budget.py).
        self.budget = DecodeBudget(self.config.partial_cpu_share)
        self.out = out
        self.events = events
        self.streams: dict[int, ASRStream] = {}
        # Events of the current input batch, sent when it ends or a decode starts: see
        # `step`. (session, event) in the order the streams produced them.
        self.held: list[tuple[int, ASREvent]] = []
        self.turn_base: dict[int, int] = {}  # turn id of the current stream's utterance 0
        self.next_turn: dict[int, int] = {}  # one past the session's highest turn so far
        # A session's turn-taking settings (TURN_TAKING), kept across its streams.
        self.turn_taking: dict[int, tuple[str, int]] = {}
        self._dispatch: dict[RecordKind, Callable[[Record], None]] = {
            RecordKind.AUDIO_IN: self._on_audio,
            RecordKind.END_OF_INPUT: self._on_end_of_input,
            RecordKind.CONTROL: self._on_control,
        }
        self._emit: dict[type, Callable[[int, Any], None]] = {
            SpeechStart: self._speech_start,
            Partial: self._partial,
            Rollback: self._rollback,
            SpeculativeEnd: self._speculative_end,
            Resume: self._resume,
            Hold: self._hold,
            EndScored: self._end_scored,
            Final: self._final,
            Discard: self._discard,
            AgentTurn: self._agent_turn,
        }
        # The control ops the ASR acts on (CONTROL records on its audio and control rings).
        self._controls: dict[int, Callable[[Record, int], None]] = {
            ControlOp.TURN_HINT: self._on_turn_hint,
            ControlOp.TURN_TAKING: self._on_turn_taking,
            ControlOp.TURN_BASE: self._on_turn_base,
            ControlOp.TEXT_TURN: self._on_text_turn,
            ControlOp.AGENT_TURN: self._on_agent_turn,
            ControlOp.SESSION_CLOSE: self._on_session_close,
        }

    def step(self) -> bool:
        """The input batch is done: send what it produced.

        A decode blocks the loop while ~its own length of audio queues up; the batch
        after it runs VAD over that backlog. Holding the decode's Partial until then
        lets a SpeculativeEnd found in the backlog travel right behind it, so the LLM
        takes both in one read and prefills the turn's tail in one pass, instead of
        starting a pass for the Partial alone and reading the SpeculativeEnd only when
        that pass is done (docs/asr.md has the measured effect).
        """
        self._send_held()
        # A learned pause's audio is scored only now, with its SpeculativeEnd already on
        # the way: the LLM prefills the reply (and reads its P(end of turn)) meanwhile.
        for stream in self.streams.values():
            stream.score_pending()
        return False

    def _send_held(self) -> None:
        held, self.held = self.held, []
        for session_id, event in held:
            self._emit[type(event)](session_id, event)

    def _stream(self, session_id: int) -> ASRStream:
        if session_id not in self.streams:
            self.streams[session_id] = ASRStream(
                self.config,
                self.models,
                self.budget,
                before_decode=self._send_held,
                shared=lambda: len(self.streams) > 1,
            )
            self.turn_base[session_id] = self.next_turn.get(session_id, 0)
            if session_id in self.turn_taking:
                self.streams[session_id].set_turn_taking(*self.turn_taking[session_id])
        return self.streams[session_id]

    def _on_audio(self, record: Record) -> None:
        rate, channels, sample_format = AUDIO_FORMAT.unpack_from(record.payload)
        body = record.payload[AUDIO_FORMAT.size :]
        samples: bytes | np.ndarray = (
            np.frombuffer(body, dtype="<f4") if sample_format == SampleFormat.FLOAT32 else body
        )
        self._forward(
            record.session_id,
            self._stream(record.session_id).feed(
                samples, rate, channels, arrival_ns=record.stamp_ns
            ),
        )

    def _on_end_of_input(self, record: Record) -> None:
        stream = self.streams.pop(record.session_id, None)
        if stream is not None:
            self._forward(record.session_id, stream.flush(record.stamp_ns))
        self._send_held()
        # Travels behind this session's last records: when it leaves TTS, all is done.
        self.out.send(RecordKind.END_OF_INPUT, session_id=record.session_id)

    def _on_control(self, record: Record) -> None:
        op, argument = CONTROL_BODY.unpack_from(record.payload)
        handler = self._controls.get(op)
        if handler is not None:  # the other ops are for other stages
            handler(record, int(argument))

    def _on_turn_hint(self, record: Record, argument: int) -> None:
        stream = self.streams.get(record.session_id)
        if stream is not None:
            (prob,) = TURN_HINT.unpack_from(record.payload, CONTROL_BODY.size)
            utterance = record.turn_id - self.turn_base.get(record.session_id, 0)
            known = None if math.isnan(prob) else prob  # NaN: the backend has none
            self._forward(record.session_id, stream.hint(utterance, known))

    def _on_turn_taking(self, record: Record, fallback_ms: int) -> None:
        settings = (record.text(CONTROL_BODY.size), fallback_ms)
        stream = self.streams.get(record.session_id)
        try:
            if stream is not None:
                stream.set_turn_taking(*settings)
        except ValueError as exc:  # Pipeline.set_turn_taking checks first; still no crash
            self.events.error(record.session_id, record.turn_id, str(exc))
            return
        self.turn_taking[record.session_id] = settings

    def _on_turn_base(self, record: Record, first: int) -> None:
        self._turn_base(record.session_id, record.turn_id, first)

    def _on_text_turn(self, record: Record, argument: int) -> None:
        # Behind the session's audio on the same ring: what was said before the text
        # is numbered first (Pipeline.send_text).
        stream = self._stream(record.session_id)
        self._forward(
            record.session_id, stream.text_turn(record.text(CONTROL_BODY.size), record.stamp_ns)
        )

    def _on_agent_turn(self, record: Record, verbatim: int) -> None:
        session_id = record.session_id
        stream = self._stream(session_id)
        try:
            events = stream.agent_turn(record.text(CONTROL_BODY.size), bool(verbatim))
        except ValueError as exc:
            # The user began speaking as the agent was asked to: their turn is answered,
            # and an error here would fail it. Pipeline.say checks first; this is the race.
            log.info("session %d: agent turn dropped: %s", session_id, exc)
            return
        self._forward(session_id, events)

    def _on_session_close(self, record: Record, argument: int) -> None:
        self.held = [(sid, event) for sid, event in self.held if sid != record.session_id]
        self.streams.pop(record.session_id, None)
        self.turn_base.pop(record.session_id, None)
        self.next_turn.pop(record.session_id, None)
        self.turn_taking.pop(record.session_id, None)
        release_freed_memory()  # its ~2 MB of buffers; glibc would keep them

    def _turn_base(self, session_id: int, turn_id: int, first: int) -> None:
        """The session's utterances are numbered from `first` on (the agent's greeting
        took the turns below). Pipeline.greet sends it before the session's first audio;
        a stream that has already numbered an utterance keeps its numbers."""
        used = self.next_turn.get(session_id, 0)
        if session_id in self.streams and used > self.turn_base.get(session_id, 0):
            self.events.error(session_id, turn_id, f"turn {used - 1} was numbered already")
            return
        self.next_turn[session_id] = max(used, first)
        if session_id in self.streams:
            self.turn_base[session_id] = self.next_turn[session_id]

    def _forward(self, session_id: int, events: list[ASREvent]) -> None:
        for event in events:
            turn = self._turn(session_id, event)
            self.next_turn[session_id] = max(self.next_turn.get(session_id, 0), turn + 1)
            self.held.append((session_id, event))

    def _turn(self, session_id: int, event: ASREvent) -> int:
        return self.turn_base.get(session_id, 0) + event.utterance_id

    def _speech_start(self, session_id: int, event: SpeechStart) -> None:
        turn = self._turn(session_id, event)
        # A typed turn says so: the client hears no speech started (pipeline/session.py).
        kind = TYPED if event.typed else ""
        self.events.stamp(session_id, turn, Stamp.SPEECH_START, text=kind, at_ns=event.start_ns)
        self.out.send(
            RecordKind.SPEECH_START, session_id=session_id, turn_id=turn, origin_ns=event.start_ns
        )

    def _partial(self, session_id: int, event: Partial) -> None:
        turn = self._turn(session_id, event)
        self.out.send(
            RecordKind.PARTIAL,
            text_pair(event.stable, event.unstable),
            session_id=session_id,
            turn_id=turn,
        )
        # Live captions for the client: an event to the supervisor, not the data path.
        text = " ".join(part for part in (event.stable, event.unstable) if part)
        self.events.stamp(session_id, turn, Stamp.PARTIAL_TEXT, len(event.stable.encode()), text)

    def _rollback(self, session_id: int, event: Rollback) -> None:
        turn = self._turn(session_id, event)
        self.out.send(
            RecordKind.ROLLBACK, event.stable.encode(), session_id=session_id, turn_id=turn
        )

    def _speculative_end(self, session_id: int, event: SpeculativeEnd) -> None:
        # The words so far go with it: over a reply, they decide a barge-in pause's end.
        turn = self._turn(session_id, event)
        self.events.stamp(session_id, turn, Stamp.SPECULATIVE_END, text=event.text)
        self.out.send(
            RecordKind.SPECULATIVE_END,
            event.text.encode(),
            session_id=session_id,
            turn_id=turn,
            origin_ns=event.speech_end_ns,
        )

    def _resume(self, session_id: int, event: Resume) -> None:
        turn = self._turn(session_id, event)
        self.out.send(RecordKind.RESUME, session_id=session_id, turn_id=turn)

    def _hold(self, session_id: int, event: Hold) -> None:
        self.events.stamp(session_id, self._turn(session_id, event), Stamp.END_HELD)

    def _end_scored(self, session_id: int, event: EndScored) -> None:
        nan = float("nan")
        score = END_SCORE.pack(
            nan if event.audio_prob is None else event.audio_prob,
            nan if event.text_prob is None else event.text_prob,
            nan if event.closing_prob is None else event.closing_prob,
            event.end_prob,
            event.decision_ms,
        )
        turn = self._turn(session_id, event)
        self.events.stamp(session_id, turn, Stamp.END_SCORED, event.wait_ms, score)

    def _discard(self, session_id: int, event: Discard) -> None:
        # The speech start went out; the supervisor learns the turn will have no words.
        self.events.stamp(session_id, self._turn(session_id, event), Stamp.SPEECH_DISCARDED)

    def _agent_turn(self, session_id: int, event: AgentTurn) -> None:
        turn = self._turn(session_id, event)
        self.events.stamp(session_id, turn, Stamp.AGENT_TURN)  # before its reply's records
        self.out.send(
            RecordKind.CONTROL,
            CONTROL_BODY.pack(ControlOp.GREET, int(event.verbatim)),
            event.text.encode(),
            session_id=session_id,
            turn_id=turn,
        )

    def _final(self, session_id: int, event: Final) -> None:
        turn = self._turn(session_id, event)
        # The stamps go before the FINAL: the LLM commits on it, and the supervisor reads
        # this ring before it releases the turn's audio on that COMMIT, so a client hears
        # the transcript before the reply (pipeline/supervisor.py, LAST_WORDS).
        self.events.stamp(session_id, turn, Stamp.SPEECH_END, at_ns=event.speech_end_ns)
        self.events.stamp(
            session_id, turn, Stamp.ASR_FINAL, int(event.decode_ms * 1000), event.model
        )
        self.events.stamp(session_id, turn, Stamp.TRANSCRIPT, text=event.text)
        self.out.send(
            RecordKind.FINAL,
            FINAL_INFO.pack(event.decode_ms),
            event.text.encode(),
            session_id=session_id,
            turn_id=turn,
            origin_ns=event.speech_end_ns,
        )
