"""SessionRouter: each record the stages send back goes to the session that owns it."""

from __future__ import annotations

import itertools

from voxrelay.ipc.records import Record
from voxrelay.pipeline.session import Session, Sink
from voxrelay.pipeline.trace import TraceSink


class SessionRouter:
    def __init__(
        self,
        traces: TraceSink,
        transport: str = "file",
        mode: str = "streaming",
        models: tuple[str, str, str] = ("", "", ""),
    ) -> None:
        self.sessions: dict[int, Session] = {}
        self._models = models
        self._ids = itertools.count(1)
        self._traces = traces
        self._transport = transport
        self._mode = mode
        self.unrouted = 0

    def open(self, sink: Sink, transport: str | None = None) -> Session:
        session = Session(
            next(self._ids),
            sink,
            self._traces,
            transport or self._transport,
            self._mode,
            self._models,
        )
        self.sessions[session.session_id] = session
        return session

    def close(self, session_id: int) -> None:
        session = self.sessions.pop(session_id, None)
        if session is not None:
            session.flush()

    def on_record(self, stage: str, record: Record) -> None:
        session = self.sessions.get(record.session_id)
        if session is None:
            self.unrouted += 1
            return
        session.deliver(record)

    def on_stage_restart(self, stage: str, why: str) -> list[tuple[int, int]]:
        """Fail every open turn; returns the (session, turn) pairs that failed."""
        failed: list[tuple[int, int]] = []
        for session in self.sessions.values():
            message = f"{why}; the turn was lost, the next one will work"
            failed += [(session.session_id, t) for t in session.fail_open_turns(message)]
        return failed
