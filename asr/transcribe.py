"""Offline transcription of a file through the streaming path (`voxrelay transcribe`).

The file is fed in 20 ms frames as fast as the CPU allows, with arrival times synthesised
as if it were played in real time, so the result is exactly what a live session would
have produced as Finals.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from voxrelay.asr.audio_file import read_audio_file
from voxrelay.asr.config import ASRConfig
from voxrelay.asr.events import ASREvent, Final
from voxrelay.asr.models import ASRModels, load_asr
from voxrelay.asr.stream import ASRStream

FRAME_MS = 20


def transcribe_file(
    path: str | Path,
    config: ASRConfig,
    raw_s16le_16k: bool = False,
    models: ASRModels | None = None,
) -> str:
    """Transcribe an audio file (any rate, mono or stereo) or a raw s16le 16 kHz file.

    Returns the Final texts joined by spaces. `models` (from `load_asr`) avoids reloading
    them when transcribing many files.
    """
    audio = read_audio_file(Path(path), raw_s16le_16k)
    pcm, sample_rate, channels = audio.pcm16.tobytes(), audio.sample_rate, audio.channels
    # Partials change nothing in the Finals (each Final decodes its whole utterance), so
    # offline we skip them and only pay for the end-of-utterance decodes.
    config = dataclasses.replace(config, partial_interval_ms=0)
    stream = ASRStream(config, models if models is not None else load_asr(config))
    frame_bytes = sample_rate * FRAME_MS // 1000 * 2 * channels
    texts: list[str] = []
    arrival_ns = 0
    for offset in range(0, len(pcm), frame_bytes):
        frame = pcm[offset : offset + frame_bytes]
        arrival_ns += len(frame) // (2 * channels) * 1_000_000_000 // sample_rate
        texts += _final_texts(stream.feed(frame, sample_rate, channels, arrival_ns))
    texts += _final_texts(stream.flush(arrival_ns))
    return " ".join(texts)


def _final_texts(events: list[ASREvent]) -> list[str]:
    return [event.text for event in events if isinstance(event, Final)]
