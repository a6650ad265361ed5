"""A conversation on the pipeline for Python callers: input in, events out.

A `VoiceSession` is a `Sink` of the session router (as a WebSocket client or a SIP call
is): the supervisor calls its methods synchronously on the event loop, so it queues
events and hands them out, in arrival order, to an async iterator.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator
from types import MappingProxyType

import numpy as np
import soxr

from voxrelay.asr.audio import SUPPORTED_RATES
from voxrelay.pipeline.api_events import (
    TEXT_EVENTS,
    TEXTLESS,
    Event,
    InputEnded,
    Interrupted,
    ReplyAudio,
    ReplyAudioDone,
    TurnDone,
    TurnError,
)
from voxrelay.pipeline.audio_io import OutputResampler
from voxrelay.pipeline.run import FRAME_MS, Pipeline
from voxrelay.pipeline.trace import TurnTrace

ASR_RATE = 16_000  # input at a rate the ASR does not take is resampled to this here
MAX_INPUT_RATE = 384_000
# Reply audio waiting for a reader that does not read; beyond it chunks are dropped.
MAX_QUEUED_AUDIO_S = 300.0


def to_pcm16(audio: object, channels: int | None = None) -> tuple[bytes, int]:
    """(little-endian PCM16, interleaved; channel count) of one chunk of input: PCM16
    bytes (`channels` of them interleaved, default 1), or a numpy array, (samples,) or
    (samples, channels), of int16 or of floats in [-1, 1]."""
    if isinstance(audio, bytes | bytearray | memoryview):
        count = 1 if channels is None else channels
        if count < 1:
            raise ValueError(f"channels must be >= 1, got {count}")
        if len(audio) % (2 * count):
            raise ValueError(
                f"PCM16 input of {len(audio)} bytes is not whole {count}-channel frames of "
                "2-byte samples; nothing was fed"
            )
        return bytes(audio), count
    if not isinstance(audio, np.ndarray):
        raise TypeError(f"audio must be PCM16 bytes or a numpy array, got {type(audio).__name__}")
    if audio.ndim not in (1, 2):
        raise ValueError(f"audio arrays are (samples,) or (samples, channels), got {audio.shape}")
    frames = audio[:, None] if audio.ndim == 1 else audio  # (samples, channels)
    if channels is not None and channels != frames.shape[1]:
        raise ValueError(f"channels={channels} but the array is shaped {audio.shape}")
    if frames.dtype == np.int16:
        return frames.astype("<i2").tobytes(), frames.shape[1]
    if frames.dtype not in (np.float32, np.float64):
        raise TypeError(f"audio arrays must be int16 or float32/float64, got {frames.dtype}")
    if not np.isfinite(frames).all():
        raise ValueError("audio array holds NaN or infinite samples; nothing was fed")
    pcm = np.round(np.clip(frames, -1.0, 1.0) * 32767).astype("<i2")
    return pcm.tobytes(), frames.shape[1]


def check_rate(sample_rate: object) -> None:
    if isinstance(sample_rate, bool) or not isinstance(sample_rate, int):
        raise TypeError(f"sample_rate must be an int (Hz), got {sample_rate!r}")
    if not 1000 <= sample_rate <= MAX_INPUT_RATE:
        raise ValueError(f"sample_rate must be 1000..{MAX_INPUT_RATE} Hz, got {sample_rate}")


class VoiceSession:
    """One conversation on a `VoicePipeline`: feed it audio, iterate its events.

    `async for event in session` yields `Event`s until the session closes. Its methods
    must be called on the pipeline's event loop; open one with `VoicePipeline.session`.
    """

    def __init__(self, pipeline: Pipeline, output_sample_rate: int | None) -> None:
        self._pipeline = pipeline
        self.output_sample_rate = output_sample_rate
        self._resamplers: dict[int, OutputResampler] = {}
        self._queue: deque[Event] = deque()
        self._queued_audio_bytes = 0
        self._wake = asyncio.Event()
        self._format: tuple[int, int] | None = None  # (rate, channels) of the open input
        self._input_resampler: soxr.ResampleStream | None = None
        self._ends_pending = 0
        self._last_final_turn = -1
        self.closed = False
        self.dropped_input_bytes = 0  # the input ring was full (the ASR fell behind)
        self.dropped_audio_bytes = 0  # reply audio beyond MAX_QUEUED_AUDIO_S unread
        self.session_id = pipeline.open_session(self, "api").session_id

    def feed(self, audio: object, sample_rate: int = 16_000, channels: int | None = None) -> int:
        """Sends one chunk of input (see `to_pcm16`) without blocking; returns the bytes
        dropped because the ASR's input ring was full. The rate and channel count stay
        the same until `end_input()`."""
        if self.closed:
            raise ValueError("this session is closed; open a new one with pipeline.session()")
        check_rate(sample_rate)
        pcm, count = to_pcm16(audio, channels)
        if self._format is None:
            if count > 2 or sample_rate not in SUPPORTED_RATES:
                # The ASR takes mono or stereo at common rates; anything else is made 16 kHz
                # mono here (a soxr stream per input, so chunk edges add no clicks).
                self._input_resampler = soxr.ResampleStream(sample_rate, ASR_RATE, 1, "int16")
            self._format = (sample_rate, count)
        elif self._format != (sample_rate, count):
            raise ValueError(
                f"the input format changed from {self._format[0]} Hz x {self._format[1]} to "
                f"{sample_rate} Hz x {count} mid-input; call end_input() first"
            )
        if self._input_resampler is None:
            return self._send(pcm, sample_rate, count)
        mono = np.frombuffer(pcm, dtype="<i2").reshape(-1, count).mean(axis=1).astype("<i2")
        return self._send(self._input_resampler.resample_chunk(mono).tobytes(), ASR_RATE, 1)

    async def stream(
        self,
        audio: object,
        sample_rate: int = 16_000,
        channels: int | None = None,
        *,
        realtime: bool = True,
    ) -> int:
        """Feeds a whole recording in 20 ms frames, at a microphone's pace with `realtime`
        (else as fast as the loop allows); returns the bytes dropped."""
        check_rate(sample_rate)
        pcm, count = to_pcm16(audio, channels)
        step = sample_rate * FRAME_MS // 1000 * count * 2
        start, dropped = time.perf_counter(), 0
        for index, offset in enumerate(range(0, len(pcm), step)):
            # Paced against the start, not frame to frame, so drift cannot build up.
            delay = start + index * FRAME_MS / 1000 - time.perf_counter()
            await asyncio.sleep(delay if realtime and delay > 0 else 0)
            dropped += self.feed(pcm[offset : offset + step], sample_rate, count)
        return dropped

    def end_input(self) -> None:
        """The speech ends here: the open utterance is finalized at once, and an
        `InputEnded` event follows once every turn of this input is done."""
        if self.closed:
            raise ValueError("this session is closed")
        if self._input_resampler is not None:
            tail = self._input_resampler.resample_chunk(np.zeros(0, "<i2"), last=True)
            self._send(tail.tobytes(), ASR_RATE, 1)
        self._format, self._input_resampler = None, None
        self._ends_pending += 1
        self._pipeline.end_input(self.session_id)

    def interrupt(self) -> None:
        """Cuts the reply being spoken (as a barge-in would); the utterance the user may
        be speaking now is kept."""
        if not self.closed:
            floor = self._last_final_turn + 1
            self._clear(floor)  # first: the cut turn's TurnDone follows its Interrupted
            self._pipeline.new_turn(self.session_id, floor)

    def greet(self, text: str | None = None, instructions: str | None = None) -> None:
        """The agent speaks first: `text` as written, or (None) an opening the LLM writes
        from the instructions (or from `instructions` given here, for this reply only).
        Only before the first audio is fed (ValueError after); `greeting` in the settings
        does this for every session."""
        if text is not None and not isinstance(text, str):
            raise TypeError(f"text must be a string or None, got {type(text).__name__}")
        self._pipeline.greet(self.session_id, text, instructions)

    def say(self, text: str | None = None, instructions: str | None = None) -> None:
        """The agent speaks up now, with no user words before it: `text` as written, or
        words the LLM writes from the conversation (`instructions`: for this reply only,
        in place of the session's). Before any input this is `greet`. ValueError while a
        reply is coming or playing; dropped if the user has begun speaking."""
        self._pipeline.say(self.session_id, text, instructions)

    def send_text(self, text: str) -> None:
        """A turn the user typed: answered as a spoken turn is (a reply being spoken is
        cut, as by speech over it); it comes after the audio fed before it. ValueError if
        empty or over MAX_USER_TEXT_CHARS."""
        self._pipeline.send_text(self.session_id, text)

    def set_instructions(self, instructions: str) -> None:
        """The LLM's system prompt for this session's next replies."""
        if not isinstance(instructions, str):
            raise TypeError(f"instructions must be a string, got {type(instructions).__name__}")
        self._pipeline.set_system_prompt(self.session_id, instructions)

    def set_voice_speed(self, speed: float) -> None:
        """Replies speak at `speed` (0.5..2.0, 1.0 normal) from the next fragment on."""
        self._pipeline.set_voice_speed(self.session_id, speed)

    def set_turn_taking(self, eagerness: str | None, fallback_ms: int | None = None) -> None:
        """How soon a pause ends the user's turn: eagerness "low", "medium" or "high", and
        the longest wait, `fallback_ms` (None keeps the ASR's setting; docs/asr.md)."""
        self._pipeline.set_turn_taking(self.session_id, eagerness, fallback_ms)

    def set_barge_in_min_words(self, words: int | None) -> int:
        """Speech over a reply pauses it (`ReplyPaused`: hold its audio) and cuts it only
        once it holds `words` words, a backchannel's not counted; 0 cuts at once, None is
        the pipeline's `barge_in_min_words`. Returns the session's value now."""
        return self._pipeline.set_barge_in_min_words(self.session_id, words)

    def close(self) -> None:
        """Frees the session in every stage; the event iterator ends after what is queued."""
        if not self.closed:
            self.closed = True
            self._pipeline.close_session(self.session_id)
            self._wake.set()

    async def __aenter__(self) -> VoiceSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def __aiter__(self) -> AsyncIterator[Event]:
        return self._events()

    async def _events(self) -> AsyncIterator[Event]:
        while True:
            while self._queue:
                event = self._queue.popleft()
                if isinstance(event, ReplyAudio):
                    self._queued_audio_bytes -= len(event.pcm16)
                yield event
            if self.closed:
                return
            self._wake.clear()
            await self._wake.wait()

    def _send(self, pcm: bytes, sample_rate: int, channels: int) -> int:
        dropped = self._pipeline.send_audio(self.session_id, pcm, sample_rate, channels)
        self.dropped_input_bytes += dropped
        return dropped

    def _push(self, event: Event) -> None:
        self._queue.append(event)
        self._wake.set()

    def _clear(self, floor: int) -> None:
        kept = [e for e in self._queue if not (isinstance(e, ReplyAudio) and e.turn < floor)]
        self._queue = deque(kept)
        self._queued_audio_bytes = sum(len(e.pcm16) for e in kept if isinstance(e, ReplyAudio))
        for turn in [t for t in self._resamplers if t < floor]:
            del self._resamplers[turn]
        self._push(Interrupted(floor))

    # Sink: called by the session router on the loop, synchronously; never awaits.

    def on_audio(self, turn_id: int, pcm16: bytes, sample_rate: int) -> None:
        rate = self.output_sample_rate or sample_rate
        if turn_id not in self._resamplers:
            self._resamplers[turn_id] = OutputResampler(sample_rate, rate)
        self._push_audio(turn_id, self._resamplers[turn_id].convert(pcm16), rate)

    def _push_audio(self, turn_id: int, pcm16: bytes, rate: int) -> None:
        if self._queued_audio_bytes + len(pcm16) > MAX_QUEUED_AUDIO_S * rate * 2:
            self.dropped_audio_bytes += len(pcm16)
        elif pcm16:
            self._queued_audio_bytes += len(pcm16)
            self._push(ReplyAudio(turn_id, pcm16, rate))

    def on_text(self, turn_id: int, kind: str, text: str) -> None:
        if kind == "response.audio.clear":  # the pipeline's barge-in rule cut a reply
            self._clear(turn_id)
            return
        if kind == "transcript.final":
            self._last_final_turn = max(self._last_final_turn, turn_id)
        make = TEXT_EVENTS.get(kind)
        if make is not None and (text or kind in TEXTLESS):
            self._push(make(turn_id, text))  # (the LLM's last delta may be empty)

    def on_error(self, turn_id: int, message: str) -> None:
        self._push(TurnError(turn_id, message))

    def on_audio_end(self, turn_id: int) -> None:
        resampler = self._resamplers.pop(turn_id, None)
        if resampler is not None:  # the resampler's tail belongs to the turn's audio
            self._push_audio(turn_id, resampler.convert(b"", last=True), resampler.out_rate)
            self._push(ReplyAudioDone(turn_id))

    def on_turn_done(self, trace: TurnTrace) -> None:
        self.on_audio_end(trace.turn_id)  # a cut or failed turn: whatever is left of it
        row = trace.to_dict()
        event = TurnDone(
            trace.turn_id,
            row["transcript"],
            row["reply_text"],
            row["ttfa_ms"],
            MappingProxyType(row),
        )
        self._push(event)

    def on_input_end(self, lost: bool) -> None:
        """END_OF_INPUT came back out of the TTS, or died with a restarted stage."""
        for _ in range(self._ends_pending if lost else min(1, self._ends_pending)):
            self._ends_pending -= 1
            self._push(InputEnded())
