"""A stand-in for `Pipeline` in SIP tests that need no models: it records what a call
sends and lets a test play reply audio into the call's sink."""

from dataclasses import dataclass, field


@dataclass
class FakeSession:
    session_id: int
    sink: object


@dataclass
class FakePipeline:
    sessions: dict = field(default_factory=dict)
    audio: dict = field(default_factory=dict)  # session id -> bytearray of 8 kHz PCM16
    closed: list = field(default_factory=list)

    def open_session(self, sink, transport):
        session = FakeSession(len(self.sessions) + 1, sink)
        self.sessions[session.session_id] = session
        self.audio[session.session_id] = bytearray()
        return session

    def send_audio(self, session_id, pcm16, sample_rate, channels=1):
        assert sample_rate == 8000
        self.audio[session_id] += pcm16
        return 0

    def close_session(self, session_id):
        self.closed.append(session_id)
