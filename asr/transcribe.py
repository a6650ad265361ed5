"""Offline transcription of a file through the streaming path (`voxrelay transcribe`).

The file is fed in 20 ms frames as fast as the CPU allows, with arrival times synthesised
as if it were played in real time, so the result is exactly what a live session would
have produced as Finals.
"""

from __future__ import annotations

import dataclasses
import wave
from pathlib import Path

from voxrelay.asr.config import ASRConfig
from voxrelay.asr.events import ASREvent, Final
from voxrelay.asr.models import ASRModels, load_asr
from voxrelay.asr.stream import ASRStream

FRAME_MS = 20
RAW_RATE = 16_000


def read_pcm16(path: str | Path, raw_s16le_16k: bool = False) -> tuple[bytes, int, int]:
    """(PCM16 bytes, sample rate, channels) from a WAV, or from a raw s16le 16 kHz mono file."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"no such audio file: {path}")
    if raw_s16le_16k:
        return path.read_bytes(), RAW_RATE, 1
    try:
        with wave.open(str(path), "rb") as wav:
            if wav.getsampwidth() != 2:
                raise ValueError(
                    f"{path} has {8 * wav.getsampwidth()}-bit samples; only 16-bit PCM WAV is "
                    "supported (convert with: sox in.wav -b 16 out.wav)"
                )
            return wav.readframes(wav.getnframes()), wav.getframerate(), wav.getnchannels()
    except wave.Error as error:
        raise ValueError(
            f"{path} is not a PCM WAV file ({error}); for raw s16le 16 kHz audio pass "
            "raw_s16le_16k=True (--raw on the CLI)"
        ) from error


def transcribe_file(
    path: str | Path,
    config: ASRConfig,
    raw_s16le_16k: bool = False,
    models: ASRModels | None = None,
) -> str:
    """Transcribe a WAV (any supported rate, mono or stereo) or raw s16le 16 kHz file.

    Returns the Final texts joined by spaces. `models` (from `load_asr`) avoids reloading
    them when transcribing many files.
    """
    pcm, sample_rate, channels = read_pcm16(path, raw_s16le_16k)
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
