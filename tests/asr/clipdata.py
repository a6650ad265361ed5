"""Clip helpers for the ASR tests: reading, ground-truth speech spans, frame feeding,
events by type, and a real clip with a pause put in mid-sentence."""

from __future__ import annotations

import re
import wave
from pathlib import Path

import numpy as np
from faster_whisper import WhisperModel

from voxrelay.asr.events import ASREvent, SpeculativeEnd
from voxrelay.asr.stream import ASRStream

SAMPLE_RATE = 16_000
T0_NS = 5_000_000_000  # synthetic clock origin; any value works, zero would hide bugs


def read_clip(path: Path) -> np.ndarray:
    """A test clip as 16 kHz mono float32 (.wav or raw s16le .raw)."""
    if path.suffix == ".raw":
        pcm = path.read_bytes()
    else:
        with wave.open(str(path), "rb") as wav:
            assert wav.getframerate() == SAMPLE_RATE and wav.getnchannels() == 1
            pcm = wav.readframes(wav.getnframes())
    return np.frombuffer(pcm, np.int16).astype(np.float32) / 32768


def voiced_span(audio: np.ndarray) -> tuple[int, int]:
    """(first, last) sample of the clip's speech by 10 ms energy, the ground truth we
    compare VAD timing against: frames within 20 dB of the loudest (the clips have room
    noise about 30 dB down)."""
    frames = audio[: audio.size // 160 * 160].reshape(-1, 160)
    energy_db = 10 * np.log10(np.mean(frames**2, axis=1) + 1e-12)
    loud = np.flatnonzero(energy_db > energy_db.max() - 20)
    return int(loud[0] * 160), int((loud[-1] + 1) * 160)


def trim(audio: np.ndarray, margin_s: float = 0.1) -> np.ndarray:
    """The clip's speech with a little of its own room tone on both sides."""
    first, last = voiced_span(audio)
    margin = int(margin_s * SAMPLE_RATE)
    return audio[max(first - margin, 0) : last + margin]


def silence(seconds: float) -> np.ndarray:
    return np.zeros(int(seconds * SAMPLE_RATE), np.float32)


def feed_frames(
    stream: ASRStream,
    audio: np.ndarray,
    sample_rate: int = SAMPLE_RATE,
    channels: int = 1,
    frame_ms: int = 20,
    text_prob: float | None = None,
    t0_ns: int = T0_NS,
) -> list[tuple[int, ASREvent]]:
    """Feed `audio` (float32 or int16, interleaved) as real-time frames with synthetic
    arrival times from `t0_ns`, then flush; returns (arrival_ns of the call that returned
    it, event). `text_prob`: the LLM's P(end of turn) each SpeculativeEnd gets at once (the
    learned end); None: none is given, and the pause waits out text_hint_wait_ms."""
    events, arrival_ns = _feed(stream, audio, sample_rate, channels, frame_ms, text_prob, t0_ns)
    return events + [(arrival_ns, e) for e in stream.flush(arrival_ns)]


def feed_frames_open(
    stream: ASRStream, audio: np.ndarray, t0_ns: int = T0_NS
) -> list[tuple[int, ASREvent]]:
    """`feed_frames` of 16 kHz mono without the flush: the stream stays open for more."""
    return _feed(stream, audio, SAMPLE_RATE, 1, 20, None, t0_ns)[0]


def _feed(
    stream: ASRStream,
    audio: np.ndarray,
    sample_rate: int,
    channels: int,
    frame_ms: int,
    text_prob: float | None,
    t0_ns: int,
) -> tuple[list[tuple[int, ASREvent]], int]:
    frame = sample_rate * frame_ms // 1000 * channels
    events: list[tuple[int, ASREvent]] = []
    arrival_ns = t0_ns
    for offset in range(0, audio.size, frame):
        chunk = audio[offset : offset + frame]
        arrival_ns += chunk.size // channels * 1_000_000_000 // sample_rate
        new = stream.feed(chunk, sample_rate, channels, arrival_ns)
        if text_prob is not None:
            for event in [e for e in new if isinstance(e, SpeculativeEnd)]:
                new += stream.hint(event.utterance_id, text_prob)
        events += [(arrival_ns, e) for e in new]
    return events, arrival_ns


def sample_ns(sample: int) -> int:
    """Arrival time of 16 kHz sample `sample` under feed_frames' synthetic clock."""
    return T0_NS + sample * 1_000_000_000 // SAMPLE_RATE


def words(text: str) -> str:
    return re.sub(r"[^\w\s]", "", text.lower()).strip()


def of_type(events: list, kind: type) -> list:
    return [e for _, e in events if isinstance(e, kind)]


PAUSE_S = 0.6


def pause_after(
    clips: Path, name: str, model: WhisperModel, word: str, nth: int = 0
) -> tuple[np.ndarray, int]:
    """Clip `name` (16 kHz float32, trimmed) with PAUSE_S of silence after the `nth`
    `word` Whisper hears in it, and the sample where the pause starts. The cut is the
    quietest 20 ms within 100 ms of where Whisper puts the word's end (tiny.en's word
    times are only that good)."""
    clip = trim(read_clip(clips / name))
    segments, _ = model.transcribe(clip, language="en", word_timestamps=True)
    spoken = [w for segment in segments for w in segment.words]
    at = [i for i, w in enumerate(spoken) if words(w.word) == word][nth]
    near = int(spoken[at].end * SAMPLE_RATE) - SAMPLE_RATE // 10
    frame = SAMPLE_RATE // 50
    energy = [
        float(np.mean(clip[start : start + frame] ** 2))
        for start in range(near, near + 10 * frame, frame // 2)
    ]
    cut = near + frame // 2 * int(np.argmin(energy)) + frame // 2
    return np.concatenate([clip[:cut], silence(PAUSE_S), clip[cut:]]), cut


def pause_after_second_of(clips: Path, model: WhisperModel) -> tuple[np.ndarray, int]:
    """cards/005 ("eight of spades, four of hearts, seven of clubs") with a pause after
    "four of"."""
    return pause_after(clips, "cards/005.wav", model, "of", 1)
