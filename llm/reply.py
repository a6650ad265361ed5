"""One reply as the LLM stage sends it: its text to the TTS token by token, its trace
stamps, and the records that end, commit or retract it (llm/worker.py decides when)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from voxrelay.ipc.channel import Sender
from voxrelay.ipc.records import TOKEN_ID, RecordKind, Stamp
from voxrelay.llm.sentences import SentenceLimit
from voxrelay.pipeline.worker import Events


@dataclass(slots=True)
class Reply:
    session_id: int
    turn_id: int
    origin_ns: int
    user_text: str  # "": the agent's opening (ControlOp.GREET), no user words before it
    early_tokens: int = 0  # prompt tokens prefilled while the user was still speaking
    prompt_tokens: int = 0
    parts: list[str] = field(default_factory=list)
    committed: bool = True  # False while started from a SPECULATIVE_END, until FINAL
    finish_reason: str = ""  # set when generation ended, maybe before the commit
    probed: bool = False  # its request went out with an end-of-turn probe
    limit: SentenceLimit = field(default_factory=lambda: SentenceLimit(0))

    @property
    def text(self) -> str:
        return "".join(self.parts).strip()


class ReplyOut:
    """A reply's records: the data path to the TTS (`out`) and the events ring to the
    supervisor (`events`)."""

    def __init__(self, out: Sender, events: Events) -> None:
        self.out = out
        self.events = events

    def text(self, reply: Reply, token_id: int, text: str) -> None:
        reply.parts.append(text)
        self._send(RecordKind.TOKEN, reply, TOKEN_ID.pack(token_id), text.encode())
        # Live reply text for the client, after the token is on its way to TTS.
        self.events.stamp(reply.session_id, reply.turn_id, Stamp.REPLY_DELTA, text=text)

    def end(self, reply: Reply) -> None:
        """REPLY_END with the finish reason: the TTS may finish the audio now; the sink
        holds it while the reply is speculative."""
        self._send(RecordKind.REPLY_END, reply, reply.finish_reason.encode())

    def done(self, reply: Reply) -> None:
        """The stamps of a committed reply that has ended, written before the record that
        lets its turn end on the data path (REPLY_END, or the COMMIT that releases a
        reply TTS already finished): the supervisor reads the events rings before it
        delivers such a record (pipeline.supervisor.LAST_WORDS)."""
        self.events.stamp(reply.session_id, reply.turn_id, Stamp.LLM_DONE)
        self.events.stamp(reply.session_id, reply.turn_id, Stamp.REPLY_TEXT, text=reply.text)

    def commit(self, reply: Reply, behind_data: bool) -> None:
        """COMMIT on the events ring straight to the supervisor; `behind_data` (the turn
        had a reply retracted): on the data path, behind that reply's audio and RESUME,
        which it must not overtake."""
        if behind_data:
            self._send(RecordKind.COMMIT, reply)
        else:
            self.events.commit(reply.session_id, reply.turn_id, reply.origin_ns)

    def retract(self, session_id: int, turn_id: int) -> None:
        """RESUME: the TTS drops what is left of the turn's reply, the sink what it holds."""
        # The retraction's moment rides as the origin stamp: the session tells this
        # attempt's stamps from the next one's by it (pipeline/commit_gate.py).
        self.out.send(
            RecordKind.RESUME,
            session_id=session_id,
            turn_id=turn_id,
            origin_ns=time.perf_counter_ns(),
        )

    def _send(self, kind: RecordKind, reply: Reply, *parts: bytes) -> None:
        self.out.send(
            kind,
            *parts,
            session_id=reply.session_id,
            turn_id=reply.turn_id,
            origin_ns=reply.origin_ns,
        )
