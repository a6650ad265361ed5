"""Cutting replies short: the barge-in of a live session, NEW_TURN with what was heard,
and a backchannel's dismissal. Which speech counts is the rule's (pipeline/barge_in.py);
this sends the controls and keeps the sessions' rows and clients in step.

Where the rule waits for words, speech over a reply pauses it at once
(`response.audio.pause`: the sink holds its audio) and the words decide: enough of them
cut it (`response.audio.clear`); a backchannel, too few words or no words at all (a
cough) resume it (`response.audio.resume`) where it stopped, as soon as the user stops
(the ASR's speculative end) or the ASR drops the sound. The user hears the reply stop as
fast as without the wait, and a "mm-hmm" costs a gap, not the reply."""

from __future__ import annotations

import time

from voxrelay.ipc.records import ControlOp
from voxrelay.pipeline.barge_in import BargeInRule
from voxrelay.pipeline.router import SessionRouter
from voxrelay.pipeline.session import Session
from voxrelay.pipeline.supervisor import Supervisor


class Interrupts:
    def __init__(self, supervisor: Supervisor, router: SessionRouter) -> None:
        self.supervisor = supervisor
        self.router = router

    def watch(self, session: Session) -> None:
        """The user speaks while an older turn's reply is pending or playing: cut it once
        the rule says the speech counts; a backchannel over it is dismissed."""
        rule = session.barge_in_rule = BargeInRule(self.supervisor.config.barge_in_min_words)

        def on_speech_start(session: Session, turn_id: int) -> None:
            if not session.replying(before_turn=turn_id):
                return
            if rule.speech_started(turn_id):
                self.barge_in(session, turn_id)
            else:
                session.pause_reply(turn_id)

        def on_transcript(session: Session, turn_id: int, text: str, final: bool) -> None:
            if session.replying(before_turn=turn_id) and rule.heard(turn_id, text, final):
                self.barge_in(session, turn_id)
            elif final:  # a backchannel, or too few words: the reply plays on
                session.resume_reply(turn_id)

        def on_speech_paused(session: Session, turn_id: int, text: str) -> None:
            # The user stopped: words enough cut the reply now; a backchannel or a
            # word too few lets it play on while the end of the turn is decided (a
            # "mm-hmm" costs the reply its length and ~150 ms, not the endpoint's wait).
            if session.replying(before_turn=turn_id) and rule.heard(turn_id, text, False):
                self.barge_in(session, turn_id)
            else:
                session.resume_reply(turn_id)

        def dismisses(session: Session, turn_id: int, text: str) -> bool:
            # Begun over a reply (the rule's pending turn) decides, not whether the reply
            # still plays: resumed at the user's stop, it may end before the turn does.
            if not rule.dismisses(turn_id, text):
                return False
            # The LLM drops the turn's reply wherever it has got to (llm/worker.py).
            self.supervisor.control(
                ControlOp.DISMISS, session_id=session.session_id, turn_id=turn_id, stages=("llm",)
            )
            return True

        def on_discard(session: Session, turn_id: int) -> None:
            rule.discarded(turn_id)
            session.resume_reply(turn_id)

        session.on_speech_start = on_speech_start
        session.on_transcript = on_transcript
        session.dismisses = dismisses
        session.on_discard = on_discard
        session.on_speech_paused = on_speech_paused

    def barge_in(self, session: Session, turn_id: int, speech: bool = True) -> None:
        """Cut the replies older than `turn_id` (new_turn) and tell the sink to stop them."""
        self.new_turn(session.session_id, turn_id, speech=speech)
        session.sink.on_text(turn_id, "response.audio.clear", "")

    def new_turn(self, session_id: int, turn_id: int, speech: bool = False) -> None:
        """Every stage drops the session's turns older than `turn_id`; the LLM's history
        keeps what was heard of each cut reply (HEARD). `speech`: the cut comes from the
        user speaking turn `turn_id`; where that speech began within `continue_turn_ms` of
        a cut turn's end, the user went on with that turn, and the LLM answers the two as
        one (HEARD's argument 1)."""
        self.supervisor.control(ControlOp.NEW_TURN, session_id=session_id, turn_id=turn_id)
        session = self.router.sessions.get(session_id)
        if session is None:
            return
        # What was heard is mapped to words by the TTS's FRAGMENT stamps, which come on its
        # events ring and may not all have been read yet. (The cut is decided on the ASR's
        # events: that ring is not the one drained here.)
        self.supervisor.drain_events(("tts",))
        now_ns = time.perf_counter_ns()
        continued = frozenset(
            turn for turn, _ in session.heard_before(turn_id, now_ns)
            if speech and self._continues(session, turn, turn_id)
        )  # fmt: skip
        # Behind NEW_TURN on the same ring: the LLM has aborted the reply by then.
        for cut_turn, heard in session.new_turn(turn_id, now_ns, continued):
            self.supervisor.control(
                ControlOp.HEARD,
                int(cut_turn in continued),
                session_id=session_id,
                turn_id=cut_turn,
                stages=("llm",),
                text=heard.encode(),
            )

    def _continues(self, session: Session, cut_turn: int, turn_id: int) -> bool:
        window = self.supervisor.config.continue_turn_ms
        gap = session.speech_gap_ms(cut_turn, turn_id)
        return bool(window) and gap is not None and 0 <= gap <= window
