"""Sessions: route what the stages send back to the client that owns it.

Every record carries a session id; the router hands it to that session, which keeps
one `TurnTrace` per turn and tells its `Sink` (a file, a WebSocket, a SIP call) about
reply audio, transcripts, errors and finished turns.
"""

from __future__ import annotations

import functools
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

from voxrelay.ipc.records import AUDIO_FORMAT, Record, RecordKind, Stamp
from voxrelay.pipeline.barge_in import BargeInRule
from voxrelay.pipeline.commit_gate import CommitGate, Retraction
from voxrelay.pipeline.heard import Playbacks
from voxrelay.pipeline.idle import IdleState
from voxrelay.pipeline.stamps import SPECULATIVE_STAMPS, StampRecord, write_stamp
from voxrelay.pipeline.trace import TraceSink, TurnTrace

# Ended turn ids remembered so their late records (a stamp sent after the turn's last
# audio) cannot open a ghost trace; older ids are forgotten first.
MAX_ENDED_TURNS = 1024

# Stamps that only reach the client (captions) or the playback: no trace field.
_UNTRACED = frozenset(
    {Stamp.PARTIAL_TEXT, Stamp.REPLY_DELTA, Stamp.FRAGMENT, Stamp.SPEECH_DISCARDED}
)
# Finished turns a session keeps in memory (Session.finished).
MAX_FINISHED_TURNS = 1024
# What a speculative reply produces: held until its turn commits (pipeline.commit_gate).
_GATED_RECORDS = frozenset({RecordKind.AUDIO_OUT, RecordKind.AUDIO_END})


class Sink(Protocol):
    """Where one session's output goes. `on_text` kinds: "speech.started" (text "typed"
    for a turn the user typed), "transcript.partial", "transcript.final",
    "transcript.backchannel", "speech.held", "response.text.delta", "response.text",
    and for the reply audio already given: "response.audio.clear" (drop it),
    "response.audio.pause" (hold it) and "response.audio.resume" (play it on)."""

    def on_audio(self, turn_id: int, pcm16: bytes, sample_rate: int) -> None: ...

    def on_text(self, turn_id: int, kind: str, text: str) -> None: ...

    def on_error(self, turn_id: int, message: str) -> None: ...

    def on_audio_end(self, turn_id: int) -> None:
        """The turn's reply audio is all delivered (flush what a transport holds back)."""

    def on_turn_done(self, trace: TurnTrace) -> None:
        """The turn's row: once its reply has played, or at once if cut or failed."""

    def on_input_end(self, lost: bool) -> None:
        """An input's END_OF_INPUT came back out of the TTS, every turn before it done and
        its rows written (`lost` False); or a stage restarted and it may have died with
        the stage's work in flight (`lost` True)."""


class Session:
    def __init__(
        self,
        session_id: int,
        sink: Sink,
        traces: TraceSink,
        transport: str,
        mode: str,
        models: tuple[str, str, str] = ("", "", ""),
    ) -> None:
        self.session_id = session_id
        self._models = models  # (asr model, llm model, tts voice) named in every trace
        self.sink = sink
        self._traces = traces
        self._transport = transport
        self._mode = mode
        self.turns: dict[int, TurnTrace] = {}
        # The latest finished turns (a one-clip run reads them all); a call or a browser
        # session can last thousands of turns, and every row is in the trace sink anyway.
        self.finished: deque[TurnTrace] = deque(maxlen=MAX_FINISHED_TURNS)
        self._ended: set[int] = set()  # finished or failed turns: leftovers are dropped
        self.min_turn = 0  # records of older turns are dropped (set by an interrupt)
        # Called with (session, turn) when the user starts speaking: barge-in detection.
        self.on_speech_start: Callable[[Session, int], None] | None = None
        # Called with (session, turn, text, final) for every partial and final transcript
        # (a dismissed backchannel's too, after the dismissal).
        self.on_transcript: Callable[[Session, int, str, bool], None] | None = None
        # Called with (session, turn, final text) first: True dismisses the turn, a
        # backchannel over a reply (it gets no reply, and cuts none).
        self.dismisses: Callable[[Session, int, str], bool] | None = None
        # Called with (session, turn, words so far) when the user stops speaking, before
        # the end of the turn is decided (the ASR's speculative end).
        self.on_speech_paused: Callable[[Session, int, str], None] | None = None
        # Called with (session, turn) when the turn's speech held no words (noise).
        self.on_discard: Callable[[Session, int], None] | None = None
        self.barge_in_rule: BargeInRule | None = None  # the watch's (pipeline/interrupts.py)
        self.input_sent = False  # the user's audio or typed text has gone to the ASR
        self.opened_ns = time.perf_counter_ns()
        self.user_active_ns = 0  # when the user was last heard (speech, partial, final)
        self.idle = IdleState()  # the agent's prompts when the user goes quiet
        # Called with (session, goodbye said) when the agent gives up on a quiet user
        # (pipeline/idle.py): a phone call hangs up.
        self.on_idle_end: Callable[[Session, bool], None] | None = None
        self.playbacks = Playbacks()  # the reply audio by turn, until surely played
        # The sink can hold reply audio ("response.audio.pause") while the words decide.
        self.pauses_replies = True
        # Turns whose reply audio has all arrived but still plays (at 1x from the first
        # sample): their row is written once it has played, or at a barge-in that cuts it.
        self._playing: dict[int, TurnTrace] = {}
        self.gate = CommitGate()
        self._retracted: dict[int, Retraction] = {}  # turn -> its latest RESUME
        self._dispatch: dict[RecordKind, Callable[[Record], None]] = {
            RecordKind.COMMIT: self._on_commit,
            RecordKind.RESUME: self._on_resume,
            RecordKind.AUDIO_OUT: self._on_audio,
            RecordKind.AUDIO_END: self._on_audio_end,
            RecordKind.STAMP: self._on_stamp,
            RecordKind.ERROR: self._on_error,
        }
        # What a stamp does for the client, after `write_stamp` has filled the row.
        self._stamp_effects: dict[Stamp, Callable[[StampRecord], None]] = {
            Stamp.PARTIAL_TEXT: self._on_partial,
            Stamp.REPLY_DELTA: self._on_reply_delta,
            Stamp.FRAGMENT: self._on_fragment,
            Stamp.SPEECH_START: self._on_speech_start,
            Stamp.TRANSCRIPT: self._on_transcript,
            Stamp.REPLY_TEXT: self._on_reply_text,
            Stamp.END_HELD: self._on_end_held,
            Stamp.SPEECH_DISCARDED: self._on_discarded,
            Stamp.SPECULATIVE_END: self._on_speculative_end,
        }

    @property
    def before_first_audio(self) -> bool:
        """No audio or typed text of the user's has gone to the ASR and no turn has begun: the agent
        may still speak first (Pipeline.greet)."""
        return not (self.input_sent or self.turns or self.finished)

    def trace(self, turn_id: int) -> TurnTrace:
        if turn_id not in self.turns:
            asr, llm, tts = self._models
            self.turns[turn_id] = TurnTrace(
                self.session_id,
                turn_id,
                self._transport,
                self._mode,
                asr_model=asr,
                llm_model=llm,
                tts_voice=tts,
            )
        return self.turns[turn_id]

    def deliver(self, record: Record) -> None:
        handler = self._dispatch.get(record.kind)
        if (
            handler is not None
            and record.turn_id not in self._ended
            and record.turn_id >= self.min_turn
        ):
            if record.kind in _GATED_RECORDS and not self.gate.admits(record.turn_id):
                self.gate.hold(record.turn_id, functools.partial(handler, record))
                return
            handler(record)

    def _on_commit(self, record: Record) -> None:
        for release in self.gate.commit(record.turn_id):
            release()

    def _on_resume(self, record: Record) -> None:
        # origin_ns 0: a RESUME from a stage that does not stamp the retraction.
        retraction = Retraction(record.origin_ns or record.stamp_ns, record.stamp_ns)
        self._retracted[record.turn_id] = retraction
        self.gate.retract(record.turn_id, retraction.llm_ns)
        self.playbacks.drop(record.turn_id)  # its fragments were never played
        trace = self.turns.get(record.turn_id)
        if trace is not None:
            for stamp in SPECULATIVE_STAMPS:
                if stamp in trace.stamps and retraction.covers(stamp, trace.stamps[stamp]):
                    del trace.stamps[stamp]
            trace.speculative_retracts += 1

    def new_turn(
        self, turn_id: int, at_ns: int | None = None, continued: frozenset[int] = frozenset()
    ) -> list[tuple[int, str]]:
        """Barge-in: end every turn older than `turn_id` and drop its leftovers.

        A turn that had a reply under way is written to the trace sink marked as barged
        in, with the audio it had sent so far and what of it was heard (and `continued`
        if it is in `continued`: the user went on with it); one that never reached the
        LLM is dropped. Returns (turn, heard text) for every reply the cut left partly
        unheard (`heard_before`), for the LLM's dialogue history.
        """
        at_ns = at_ns or time.perf_counter_ns()
        for turn in continued:
            trace = self.turns.get(turn) or self._playing.get(turn)
            if trace is not None:
                trace.continued = True
        heard = self.heard_before(turn_id, at_ns)
        self.min_turn = max(self.min_turn, turn_id)
        self.gate.forget_before(self.min_turn)
        self.playbacks.cut_before(self.min_turn)
        cut = dict(heard)
        for stale in [t for t in self.turns if t < self.min_turn]:
            trace = self.turns.pop(stale)
            if _answers(trace):
                trace.reply_text = trace.reply_text or "".join(trace.reply_deltas).strip()
                trace.barge_in_ns = at_ns
                trace.heard_text = cut.get(stale, "")
                self._finish(trace)
        for stale in [t for t in self._playing if t < self.min_turn]:
            trace = self._playing.pop(stale)
            if stale in cut:  # still playing: the cut is heard
                trace.barge_in_ns = at_ns
                trace.heard_text = cut[stale]
            self._write(trace)
        return heard

    def settle(self, now_ns: int | None = None) -> None:
        """Writes the rows of turns whose reply has finished playing by `now_ns`."""
        now_ns = self.playbacks.clock(now_ns or time.perf_counter_ns())
        for turn, trace in list(self._playing.items()):
            playback = self.playbacks.get(turn)
            if playback is None or playback.end_ns() <= now_ns:
                del self._playing[turn]
                self._write(trace)

    def flush(self) -> None:
        """Writes every row still waiting for its audio to play (input ended, closing)."""
        for turn in sorted(self._playing):
            self._write(self._playing.pop(turn))

    def speech_gap_ms(self, turn_id: int, later_turn: int) -> float | None:
        """The silence from the end of `turn_id`'s speech to the start of `later_turn`'s,
        as the ASR stamped them (None while either is unknown)."""
        earlier = self.turns.get(turn_id) or self._playing.get(turn_id)
        later = self.turns.get(later_turn)
        if earlier is None or later is None:
            return None
        end, start = earlier.stamps.get(Stamp.SPEECH_END), later.stamps.get(Stamp.SPEECH_START)
        if not end or not start:
            return None
        return (start - end) / 1e6

    def heard_before(self, turn_id: int, now_ns: int) -> list[tuple[int, str]]:
        """(turn, heard text) for every reply older than `turn_id` that a cut at `now_ns`
        leaves unheard in part: still generating, or its audio still playing."""
        cut = {t for t, trace in self.turns.items() if t < turn_id and _answers(trace)}
        return self.playbacks.heard(cut | self.playbacks.turns_before(turn_id), now_ns)

    def replying(self, before_turn: int = 1 << 62) -> bool:
        """True while a committed turn older than `before_turn` (by default any) still has
        a reply coming, or reply audio already sent is still playing (by real-time
        arithmetic: the sink plays what it gets at 1x from the first sample on) or held
        by a barge-in pause."""
        if self.playbacks.paused or time.perf_counter_ns() < self.playbacks.end_ns:
            return True
        return any(t < before_turn and _answers(trace) for t, trace in self.turns.items())

    def pause_reply(self, turn_id: int) -> None:
        """`turn_id`'s speech may cut the reply: the sink holds its audio meanwhile."""
        if self.pauses_replies and self.playbacks.pause(turn_id, time.perf_counter_ns()):
            self.sink.on_text(turn_id, "response.audio.pause", "")

    def resume_reply(self, turn_id: int) -> None:
        """`turn_id`'s speech cut nothing: the reply it paused (if any) plays on."""
        if self.playbacks.paused_for == turn_id and self.playbacks.resume(time.perf_counter_ns()):
            self.sink.on_text(turn_id, "response.audio.resume", "")

    def last_reply_turn(self) -> int:
        """The latest turn with a reply coming or still playing (-1: none)."""
        coming = [t for t, trace in self.turns.items() if _answers(trace)]
        playing = [*self._playing, *self.playbacks]
        return max([*coming, *playing], default=-1)

    def _on_audio(self, record: Record) -> None:
        trace = self.trace(record.turn_id)
        rate, _channels, _fmt = AUDIO_FORMAT.unpack_from(record.payload)
        pcm = record.payload[AUDIO_FORMAT.size :]
        if not trace.first_audio_out_ns:
            trace.first_audio_out_ns = time.perf_counter_ns()
        trace.audio_out_samples += len(pcm) // 2
        trace.audio_out_rate = rate
        self.playbacks.audio(record.turn_id, len(pcm) // 2, rate, trace.first_audio_out_ns)
        self.sink.on_audio(record.turn_id, pcm, rate)

    def _on_audio_end(self, record: Record) -> None:
        now = time.perf_counter_ns()
        self.playbacks.complete(record.turn_id, now)
        trace = self.turns.pop(record.turn_id, None)
        if trace is None or trace.error:
            return
        # TTS stamps TTS_DONE on its events ring after this record: it would arrive after
        # the turn is written. This record left TTS at the same moment.
        trace.mark(Stamp.TTS_DONE, record.stamp_ns)
        self.sink.on_audio_end(record.turn_id)
        still_playing = self.playbacks.get(record.turn_id)
        if still_playing is not None and still_playing.end_ns() > self.playbacks.clock(now):
            self._end(record.turn_id)  # done here; its row waits for the audio to play
            self._playing[record.turn_id] = trace
            return
        self._finish(trace)

    def _end(self, turn_id: int) -> None:
        self.gate.forget(turn_id)
        self._retracted.pop(turn_id, None)
        self._ended.add(turn_id)
        if len(self._ended) > MAX_ENDED_TURNS:
            self._ended.discard(min(self._ended))

    def finish(self, trace: TurnTrace) -> None:
        """Writes a turn's row now, though no stage record ended it (a call's last key
        presses: `pipeline/sip/dtmf.py`; a dismissed backchannel)."""
        self.turns.pop(trace.turn_id, None)
        self._finish(trace)

    def _finish(self, trace: TurnTrace) -> None:
        self._end(trace.turn_id)
        self._write(trace)

    def _write(self, trace: TurnTrace) -> None:
        self._traces.write(trace)
        self.finished.append(trace)
        self.sink.on_turn_done(trace)

    def _on_stamp(self, record: Record) -> None:
        stamp = StampRecord.read(record)
        retraction = self._retracted.get(stamp.turn_id)
        if retraction is not None and retraction.covers(stamp.stamp, stamp.stamped_ns):
            return  # a retracted attempt's: its audio was dropped unheard
        if stamp.stamp not in _UNTRACED:
            # the row first: the barge-in rule reads the speech start from it
            write_stamp(self.trace(stamp.turn_id), stamp)
        effect = self._stamp_effects.get(stamp.stamp)
        if effect is not None:
            effect(stamp)

    def _on_partial(self, stamp: StampRecord) -> None:
        self.user_active_ns = time.perf_counter_ns()
        self.sink.on_text(stamp.turn_id, "transcript.partial", stamp.text)
        if self.on_transcript is not None:
            self.on_transcript(self, stamp.turn_id, stamp.text, False)

    def _on_reply_delta(self, stamp: StampRecord) -> None:
        self._when_committed(stamp, functools.partial(self._delta_out, stamp))

    def _delta_out(self, stamp: StampRecord) -> None:
        trace = self.turns.get(stamp.turn_id)
        if trace is not None:
            trace.reply_deltas.append(stamp.text)
        self.sink.on_text(stamp.turn_id, "response.text.delta", stamp.text)

    def _on_fragment(self, stamp: StampRecord) -> None:
        self.playbacks.of(stamp.turn_id).fragments.append((stamp.text, stamp.value))

    def _on_speech_start(self, stamp: StampRecord) -> None:
        self.user_active_ns = time.perf_counter_ns()
        # Text "typed": the turn was typed (Pipeline.send_text), not spoken.
        self.sink.on_text(stamp.turn_id, "speech.started", stamp.text)
        if self.on_speech_start is not None:
            self.on_speech_start(self, stamp.turn_id)

    def _on_transcript(self, stamp: StampRecord) -> None:
        self.user_active_ns = time.perf_counter_ns()
        if self.dismisses is not None and self.dismisses(self, stamp.turn_id, stamp.text):
            self.sink.on_text(stamp.turn_id, "transcript.backchannel", stamp.text)
            self._dismiss(stamp.turn_id)
        else:
            self.sink.on_text(stamp.turn_id, "transcript.final", stamp.text)
        if self.on_transcript is not None:
            self.on_transcript(self, stamp.turn_id, stamp.text, True)

    def _on_speculative_end(self, stamp: StampRecord) -> None:
        if self.on_speech_paused is not None:
            self.on_speech_paused(self, stamp.turn_id, stamp.text)

    def _on_discarded(self, stamp: StampRecord) -> None:
        """The speech held no words: no turn, and no row (its start was only noise)."""
        trace = self.turns.get(stamp.turn_id)
        if trace is not None and not _answers(trace):
            del self.turns[stamp.turn_id]
        if self.on_discard is not None:
            self.on_discard(self, stamp.turn_id)

    def _dismiss(self, turn_id: int) -> None:
        """The turn's row now, marked a backchannel; whatever the stages made of it (a
        reply begun before the LLM heard of the dismissal) is dropped as it comes."""
        trace = self.trace(turn_id)
        trace.backchannel = True
        self.playbacks.drop(turn_id)
        self.finish(trace)

    def _on_reply_text(self, stamp: StampRecord) -> None:
        # A reply that ended while speculative (the learned end of turn waited longer
        # than its generation) stamps its text at the commit, before the COMMIT: its
        # held deltas go out first, then the whole text.
        reply = functools.partial(self.sink.on_text, stamp.turn_id, "response.text", stamp.text)
        self._when_committed(stamp, reply)

    def _when_committed(self, stamp: StampRecord, deliver: Callable[[], None]) -> None:
        """The reply's text to the client now if its turn is committed, else held until
        the commit (a speculative reply's text is not heard before it)."""
        if self.gate.admits(stamp.turn_id):
            deliver()
        else:
            self.gate.hold(stamp.turn_id, deliver, stamp.stamped_ns)

    def _on_end_held(self, stamp: StampRecord) -> None:
        self.sink.on_text(stamp.turn_id, "speech.held", "")

    def _on_error(self, record: Record) -> None:
        self.fail(record.turn_id, record.text())

    def fail(self, turn_id: int, message: str) -> None:
        self.resume_reply(turn_id)  # the failed turn's words will never decide
        trace = self.trace(turn_id)
        if not trace.error:
            self._end(turn_id)
            self.playbacks.drop(turn_id)
            trace.error = message
            self.sink.on_error(turn_id, message)
            self.turns.pop(turn_id, None)
            self._finish(trace)

    def fail_open_turns(self, message: str) -> list[int]:
        failed = list(self.turns)
        for turn_id in failed:
            self.fail(turn_id, message)
        return failed


def _answers(trace: TurnTrace) -> bool:
    """Whether the turn has a reply coming: the user's words are final, or it is the
    agent's opening."""
    return bool(trace.transcript) or trace.opening
