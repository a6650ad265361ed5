"""transcribe_file on real clips, and the WER of tiny.en through the streaming path."""

from __future__ import annotations

import re
import wave
from pathlib import Path

import numpy as np
import pytest
import soxr

from tests.asr.clipdata import read_clip
from voxrelay.asr.config import ASRConfig
from voxrelay.asr.transcribe import transcribe_file

WER_LIMIT = 0.15
_UNITS = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
]
_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
# Whisper writes "Mr." and "10"; the references say "mister" and "ten".
_ABBREVIATIONS = {"mr": "mister", "mrs": "missus", "dr": "doctor", "st": "saint"}


def number_words(n: int) -> str:
    if n < 20:
        return _UNITS[n]
    if n < 100:
        return _TENS[n // 10] + ("" if n % 10 == 0 else " " + _UNITS[n % 10])
    if n < 1000:
        rest = "" if n % 100 == 0 else " " + number_words(n % 100)
        return _UNITS[n // 100] + " hundred" + rest
    return " ".join(_UNITS[int(d)] for d in str(n))  # digit by digit, as spoken codes are


def normalize(text: str) -> str:
    """Lower case, no punctuation, hyphens split, numbers and abbreviations spelled out."""
    text = re.sub(r"[^\w\s']", " ", text.lower().replace("-", " "))
    spelled = [
        number_words(int(w)) if w.isdigit() else _ABBREVIATIONS.get(w, w) for w in text.split()
    ]
    return " ".join(spelled)


def test_normalize() -> None:
    assert normalize("Go forward 10 meters.") == "go forward ten meters"
    assert normalize("And Mr. John, 42-odd") == "and mister john forty two odd"


def references(clips: Path) -> list[tuple[Path, bool, str]]:
    """(file, is_raw, reference) for the librivox, cards and goforward clips."""
    items: list[tuple[Path, bool, str]] = []
    line = re.compile(r"<s>(.*)</s>\s*\((?:.*-)?(\w+)\)")
    for folder, listing in (("librivox", "transcription"), ("cards", "cards.transcription")):
        for match in line.finditer((clips / folder / listing).read_text()):
            items.append((clips / folder / f"{match[2]}.wav", False, match[1].strip()))
    items.append((clips / "goforward.raw", True, "go forward ten meters"))
    return items


@pytest.mark.slow
def test_tiny_en_wer_through_the_stream(clips: Path, models) -> None:
    import jiwer

    items = references(clips)
    assert len(items) == 11
    truth = [normalize(ref) for _, _, ref in items]
    hypotheses = [
        normalize(
            transcribe_file(path, ASRConfig(model="tiny.en"), raw_s16le_16k=raw, models=models)
        )
        for path, raw, _ in items
    ]
    wer = jiwer.wer(truth, hypotheses)
    print(f"tiny.en WER over {len(items)} clips: {wer:.3f}")
    assert wer <= WER_LIMIT, list(zip(truth, hypotheses, strict=True))


def test_stereo_44k_wav(clips: Path, models, tmp_path: Path) -> None:
    audio = soxr.resample(read_clip(clips / "goforward.raw"), 16_000, 44_100)
    pcm = (np.clip(np.repeat(audio, 2), -1, 1) * 32767).astype("<i2")
    path = tmp_path / "stereo.wav"
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(2)
        wav.setsampwidth(2)
        wav.setframerate(44_100)
        wav.writeframes(pcm.tobytes())
    text = transcribe_file(path, ASRConfig(model="tiny.en"), models=models)
    assert normalize(text) == "go forward ten meters"


def test_a_raw_file_is_read_by_its_name(clips: Path, models, tmp_path: Path) -> None:
    # `voxrelay run` reads a `.raw` name as s16le 16 kHz; so does transcribe, unflagged
    with pytest.raises(ValueError, match="missing.raw does not exist"):
        transcribe_file(tmp_path / "missing.raw", ASRConfig(model="tiny.en"))
    text = transcribe_file(clips / "goforward.raw", ASRConfig(model="tiny.en"), models=models)
    assert normalize(text) == "go forward ten meters"
