"""A stand-in for `Pipeline` in SIP tests that need no models: it records what a call
sends and lets a test play reply audio into the call's sink. Sessions are real
`Session`s (no stage behind them), so the trace rows they write are the real ones."""

from dataclasses import dataclass, field

from voxrelay.pipeline.session import Session
from voxrelay.pipeline.trace import TraceSink


@dataclass
class FakePipeline:
    sessions: dict = field(default_factory=dict)
    audio: dict = field(default_factory=dict)  # session id -> bytearray of 8 kHz PCM16
    closed: list = field(default_factory=list)
    rows: list = field(default_factory=list)  # trace rows written, as the JSONL has them

    def open_session(self, sink, transport):
        traces = TraceSink(None)
        traces.observers.append(self.rows.append)
        session = Session(len(self.sessions) + 1, sink, traces, transport, "streaming")
        self.sessions[session.session_id] = session
        self.audio[session.session_id] = bytearray()
        return session

    def send_audio(self, session_id, pcm16, sample_rate, channels=1):
        assert sample_rate == 8000
        self.audio[session_id] += pcm16
        return 0

    def close_session(self, session_id):
        self.closed.append(session_id)
