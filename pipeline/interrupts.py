"""Cutting replies short: the barge-in of a live session, NEW_TURN with what was heard,
and a backchannel's dismissal. Which speech counts is the rule's (pipeline/barge_in.py);
this sends the controls and keeps the sessions' rows and clients in step."""

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
        rule = BargeInRule(self.supervisor.config.barge_in_min_words)

        def on_speech_start(session: Session, turn_id: int) -> None:
            if session.replying(before_turn=turn_id) and rule.speech_started(turn_id):
                self.barge_in(session, turn_id)

        def on_transcript(session: Session, turn_id: int, text: str, final: bool) -> None:
            if session.replying(before_turn=turn_id) and rule.heard(turn_id, text, final):
                self.barge_in(session, turn_id)

        def dismisses(session: Session, turn_id: int, text: str) -> bool:
            if not (session.replying(before_turn=turn_id) and rule.dismisses(turn_id, text)):
                return False
            # The LLM drops the turn's reply wherever it has got to (llm/worker.py).
            self.supervisor.control(
                ControlOp.DISMISS, session_id=session.session_id, turn_id=turn_id, stages=("llm",)
            )
            return True

        session.on_speech_start = on_speech_start
        session.on_transcript = on_transcript
        session.dismisses = dismisses

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
