"""Fixed binary record layouts exchanged between stage processes.

Every record is a 32-byte header followed by a kind-specific payload, padded to a
multiple of 8 bytes inside a ring. No JSON and no pickle on the data path: payloads
are small `struct` layouts, raw PCM16 samples or UTF-8 text.

Header (little-endian, 32 bytes)::

    u32 length      header + payload, before padding
    u16 kind        RecordKind
    u16 flags       RecordFlag bits
    u32 session_id  which client session the record belongs to
    u32 turn_id     epoch of the session's turn counter; stale turns are dropped
    i64 stamp_ns    time.perf_counter_ns() when the record crossed this boundary
    i64 origin_ns   kind-specific reference time (e.g. the end of the user's speech)
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum, IntFlag

HEADER = struct.Struct("<IHHIIqq")
HEADER_BYTES = HEADER.size
ALIGN = 8
assert HEADER_BYTES == 32


class RecordKind(IntEnum):
    PAD = 0  # ring filler up to the wrap point; never surfaced to callers
    AUDIO_IN = 1  # client audio -> ASR; payload AUDIO_FORMAT + samples
    END_OF_INPUT = 2  # the client's input ended: finalize any open utterance
    SPEECH_START = 3  # ASR heard speech begin (barge-in trigger)
    PARTIAL = 4  # ASR partial transcript; payload TEXT_PAIR (stable, unstable)
    SPECULATIVE_END = 5  # ASR's best transcript after a short silence; payload text
    RESUME = 6  # speech resumed after a speculative end: drop speculative work
    FINAL = 7  # committed transcript of a turn; payload FINAL_INFO + text
    TOKEN = 8  # one generated token; payload u32 token id + UTF-8 text delta
    REPLY_END = 9  # the LLM reply is complete; payload text = finish reason
    AUDIO_OUT = 10  # reply audio; payload AUDIO_FORMAT + PCM16 samples
    AUDIO_END = 11  # the reply audio of a turn is complete
    CONTROL = 12  # control struct: CONTROL_BODY
    STAMP = 13  # trace stamp from a stage to the supervisor; payload STAMP_BODY + text
    ERROR = 14  # a stage failed on a record; payload text
    HEARTBEAT = 15  # liveness ping through a channel without shared memory
    # The turn's transcript is final: its reply, started at a SPECULATIVE_END or now, may
    # be heard. LLM -> TTS -> supervisor, in order with the turn's audio; a sink holds a
    # turn's audio until this arrives. A RESUME on the same path drops what it held.
    COMMIT = 16
    # ASR -> LLM: words already sent as stable were revised by a later decode; payload
    # text = the stable prefix that still holds (the LLM rolls its open prompt back).
    ROLLBACK = 17


class RecordFlag(IntFlag):
    NONE = 0
    LAST = 1  # last record of its kind for this turn


class ControlOp(IntEnum):
    NEW_TURN = 1  # a turn counter rose: drop records and work of older turns
    SESSION_OPEN = 2  # LLM only: a session opened (its first prompt is computed ahead)
    SESSION_CLOSE = 3
    SHUTDOWN = 4
    SYSTEM_PROMPT = 5  # LLM only: the session's system prompt, UTF-8 after CONTROL_BODY
    VOICE_SPEED = 6  # TTS only: the session's voice speed; argument = speed x 1000
    # LLM only: what the user heard of turn_id's cut reply, UTF-8 after CONTROL_BODY;
    # argument 1: the user went on with that turn (the next one continues it)
    HEARD = 7
    # ASR only: the LLM's P(end of turn) for turn_id's pause, TURN_HINT after CONTROL_BODY
    TURN_HINT = 8
    # ASR only: the session's eagerness (UTF-8 after CONTROL_BODY); argument = fallback ms
    TURN_TAKING = 9
    # LLM only: turn_id's reply is the agent's own, with no user words before it (the
    # opening, or the agent speaking up later: AGENT_TURN); argument 1: the UTF-8 after
    # CONTROL_BODY is spoken as written; 0: the model writes it, with that UTF-8 (if any)
    # as this reply's instructions in place of the system prompt
    GREET = 10
    # ASR only: the session's first utterance is turn `argument` (the turns below it are
    # the agent's own: a greeting); sent before the session's first audio
    TURN_BASE = 11
    # ASR only, on the audio ring: the user typed a turn (UTF-8 after CONTROL_BODY); it is
    # numbered and answered as a spoken one would be, any utterance under way ending first
    TEXT_TURN = 12
    # ASR only, on the audio ring: the agent speaks now (Pipeline.say); argument and UTF-8
    # as GREET's. The ASR numbers it as the next turn and sends the LLM a GREET for it;
    # while the user is speaking it is dropped (their turn is answered)
    AGENT_TURN = 13
    # LLM only: turn_id's words were a backchannel said over a reply ("mm-hmm"): no reply
    # to it, and it stays out of the history
    DISMISS = 14


class Stamp(IntEnum):
    """Trace points a stage reports to the supervisor's trace sink."""

    SPEECH_START = 1
    SPEECH_END = 2
    ASR_FINAL = 3
    LLM_FIRST_TOKEN = 4
    LLM_DONE = 5
    TTS_FIRST_AUDIO = 6
    TTS_DONE = 7
    TRANSCRIPT = 8  # text: the final transcript
    REPLY_TEXT = 9  # text: the whole reply
    LLM_PREFILL = 10  # value: tokens prefilled
    PARTIAL_TEXT = 11  # text: the ASR's latest partial; value: byte length of its stable part
    REPLY_DELTA = 12  # text: one token's text, as the LLM samples it (live captions)
    FRAGMENT = 13  # text: one synthesized reply fragment; value: its samples (audio rate)
    SPECULATIVE_END = 20  # ASR sent its best transcript after a short silence; text: it
    LLM_START = 21  # the LLM opened the reply's request (at SPECULATIVE_END or FINAL)
    END_HELD = 22  # ASR: the words so far stop mid-sentence, so this pause ends the turn later
    # LLM: its P(end of turn) at the reply's prefill; value = probability x PROB_SCALE,
    # or -1 when its backend cannot read one (sent as the reply starts)
    TURN_END_PROB = 23
    # ASR: a pause's learned decision; value = wait ms, text = END_SCORE
    END_SCORED = 24
    AGENT_TURN = 25  # ASR: this turn is the agent's own (Pipeline.say), no user words
    SPEECH_DISCARDED = 26  # ASR: the VAD's speech held no words (noise, a cough): no turn


class SampleFormat(IntEnum):
    PCM16 = 0
    FLOAT32 = 1


AUDIO_FORMAT = struct.Struct("<IHH")  # sample_rate, channels, SampleFormat
FINAL_INFO = struct.Struct("<f")  # ASR decode time in ms
TOKEN_ID = struct.Struct("<I")
CONTROL_BODY = struct.Struct("<II")  # ControlOp, argument
STAMP_BODY = struct.Struct("<Hq")  # Stamp, value
TEXT_PAIR = struct.Struct("<I")  # byte length of the first string; the second follows
TURN_HINT = struct.Struct("<d")  # P(end of turn)
# audio P, text P, Whisper's closing P (NaN: none), fused P, decision CPU ms (a learned
# end of turn's pause)
END_SCORE = struct.Struct("<ddddd")
PROB_SCALE = 1_000_000_000_000  # a probability in a stamp's integer value, to 1e-12


@dataclass(frozen=True, slots=True)
class Record:
    """A record copied out of a channel."""

    kind: RecordKind
    flags: int
    session_id: int
    turn_id: int
    stamp_ns: int
    origin_ns: int
    payload: bytes

    def text(self, offset: int = 0) -> str:
        return self.payload[offset:].decode("utf-8", errors="replace")


def padded(length: int) -> int:
    return (length + ALIGN - 1) & ~(ALIGN - 1)


def pack_header(
    length: int, kind: int, flags: int, session_id: int, turn_id: int, stamp_ns: int, origin_ns: int
) -> bytes:
    return HEADER.pack(length, kind, flags, session_id, turn_id, stamp_ns, origin_ns)


def parse_header(raw: bytes | memoryview) -> tuple[int, int, int, int, int, int, int]:
    return HEADER.unpack_from(raw)


def decode(raw: bytes | memoryview) -> Record:
    """Decode a whole record (header + payload); raises ValueError on malformed input."""
    if len(raw) < HEADER_BYTES:
        raise ValueError(
            f"record of {len(raw)} bytes is shorter than its {HEADER_BYTES}-byte header"
        )
    length, kind, flags, session_id, turn_id, stamp_ns, origin_ns = HEADER.unpack_from(raw)
    if length < HEADER_BYTES or length > len(raw):
        raise ValueError(f"record length field {length} does not fit the {len(raw)} bytes received")
    try:
        record_kind = RecordKind(kind)
    except ValueError:
        raise ValueError(f"unknown record kind {kind}") from None
    return Record(
        record_kind,
        flags,
        session_id,
        turn_id,
        stamp_ns,
        origin_ns,
        bytes(raw[HEADER_BYTES:length]),
    )


def encode(
    kind: RecordKind,
    payload: bytes = b"",
    *,
    session_id: int = 0,
    turn_id: int = 0,
    stamp_ns: int = 0,
    origin_ns: int = 0,
    flags: int = 0,
) -> bytes:
    """Whole record as bytes, for channels that carry messages rather than a byte ring."""
    length = HEADER_BYTES + len(payload)
    return pack_header(length, kind, flags, session_id, turn_id, stamp_ns, origin_ns) + payload


def text_pair(first: str, second: str) -> bytes:
    a = first.encode()
    return TEXT_PAIR.pack(len(a)) + a + second.encode()


def split_text_pair(payload: bytes) -> tuple[str, str]:
    if len(payload) < TEXT_PAIR.size:
        raise ValueError(f"text pair payload of {len(payload)} bytes has no length field")
    (first_len,) = TEXT_PAIR.unpack_from(payload)
    start = TEXT_PAIR.size
    if start + first_len > len(payload):
        raise ValueError("text pair length exceeds its payload")
    first = payload[start : start + first_len].decode("utf-8", errors="replace")
    return first, payload[start + first_len :].decode("utf-8", errors="replace")
