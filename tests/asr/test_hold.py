"""A pause after unfinished words does not end the turn (asr/turn_end.py), on real speech:
three cards read out, cut after "eight of spades, four of", 600 ms of silence (twice the
end of turn), then the rest."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from tests.asr.clipdata import (
    PAUSE_S,
    SAMPLE_RATE,
    feed_frames,
    of_type,
    pause_after,
    pause_after_second_of,
    read_clip,
    sample_ns,
    silence,
    trim,
    words,
)
from voxrelay.asr.config import ASRConfig
from voxrelay.asr.events import Final, Hold, Resume, SpeculativeEnd
from voxrelay.asr.stream import ASRStream

# The words' rule alone (the learned end holds the same pauses, and scores the others).
HOLDING = ASRConfig(model="tiny.en", partial_interval_ms=0, turn_detection="silence")
FIXED = replace(HOLDING, turn_fallback_ms=0)


@pytest.fixture(scope="module")
def cards_with_pause(clips: Path, models) -> tuple[np.ndarray, int]:
    audio, cut = pause_after_second_of(clips, models.whisper["tiny.en"])
    return np.concatenate([audio, silence(1.5)]), cut


def test_pause_after_unfinished_words_is_held(cards_with_pause, models) -> None:
    audio, cut = cards_with_pause
    events = feed_frames(ASRStream(HOLDING, models), audio)
    finals = [words(f.text) for f in of_type(events, Final)]
    assert len(finals) == 1 and finals[0].endswith("of hearts"), finals
    assert len(of_type(events, Hold)) == 1
    # Held, not speculated: no reply was started for "... four of", so none is taken back.
    speculated = [words(e.text) for e in of_type(events, SpeculativeEnd)]
    assert len(of_type(events, Resume)) == len(speculated) - 1  # the pause after "spades"
    assert speculated[-1] == finals[0]
    # The Final came about end_silence_ms after the real end, not the held time.
    final_at, final = next((at, e) for at, e in events if isinstance(e, Final))
    assert final.speech_end_ns > sample_ns(cut + int(PAUSE_S * SAMPLE_RATE))
    assert final_at - final.speech_end_ns < (HOLDING.end_silence_ms + 150) * 1_000_000


def test_without_the_hold_the_same_pause_ends_the_turn(cards_with_pause, models) -> None:
    audio, _ = cards_with_pause
    events = feed_frames(ASRStream(FIXED, models), audio)
    finals = [words(f.text) for f in of_type(events, Final)]
    # Cut in two at the pause ("... four of" or, on an AVX2 box, "... four of a").
    assert len(finals) == 2 and "spades" in finals[0] and "spades" not in finals[1], finals
    assert of_type(events, Hold) == []


def test_pause_after_a_whole_turn_is_not_held(clips: Path, models) -> None:
    first = trim(read_clip(clips / "cards" / "001.wav"))
    second = trim(read_clip(clips / "cards" / "003.wav"))
    audio = np.concatenate([first, silence(PAUSE_S), second, silence(1.5)])
    events = feed_frames(ASRStream(HOLDING, models), audio)
    assert len(of_type(events, Final)) == 2
    assert of_type(events, Hold) == []


def test_pause_in_a_long_open_sentence_is_held(clips: Path, models) -> None:
    """ "And Mr. John Dashwood had then leisure to consider ... how much there might be
    prudently in his power to do for them": the words before the pause end on a verb no
    list names, but nine words without a closing mark are a sentence Whisper did not hear
    end (asr/turn_end.py, OPEN_WORDS)."""
    audio, _ = pause_after(clips, "librivox/0870.wav", models.whisper["tiny.en"], "consider")
    audio = np.concatenate([audio, silence(1.5)])
    held = feed_frames(ASRStream(HOLDING, models), audio)
    finals = [words(f.text) for f in of_type(held, Final)]
    assert len(finals) == 1 and finals[0].endswith("for them"), finals
    assert len(of_type(held, Hold)) == 1
    fixed = [words(f.text) for f in of_type(feed_frames(ASRStream(FIXED, models), audio), Final)]
    assert len(fixed) == 2 and fixed[0].endswith("consider") and "them" in fixed[1], fixed
