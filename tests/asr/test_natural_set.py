"""The lecture set's pieces: the recording cut only at its own pauses, every piece
short enough for one utterance, every pause mid-turn."""

from pathlib import Path

import numpy as np

from tests.asr.clipdata import SAMPLE_RATE, read_clip
from tests.asr.natural import LECTURE_PIECE_S, lecture_turns


def test_the_lecture_is_cut_at_its_pauses_into_pieces_one_utterance_long(
    natural_dir: Path, models
) -> None:
    turns = lecture_turns(natural_dir, models.vad)
    whole = read_clip(natural_dir / "lecture.wav")
    np.testing.assert_array_equal(np.concatenate([t.audio for t in turns]), whole)
    assert all(t.audio.size <= LECTURE_PIECE_S * SAMPLE_RATE for t in turns)
    assert not any(t.true_end for t in turns)  # he holds the floor past every piece
    lengths = [(b - a) / SAMPLE_RATE for t in turns for a, b in t.pauses]
    assert len(lengths) >= 8 and min(lengths) >= 0.2, lengths
    # Each cut falls inside a pause: a piece starts and ends in silence, not in a word.
    for turn in turns[1:]:
        assert np.sqrt(np.mean(turn.audio[:160] ** 2)) < 0.02, turn.name


def test_the_request_set_is_the_same_audio_on_every_run(models) -> None:
    """Piper's noise is off: the set's figures move only with the detector, not with
    the draw of a voice's noise (its mid-turn pauses, at commas, stay labelled)."""
    from tests.asr.spoken_requests import REQUESTS, request_turns

    first, second = request_turns(models.vad), request_turns(models.vad)
    assert len(first) == len(REQUESTS)
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a.audio, b.audio)
        assert a.pauses == b.pauses and a.speech_end == b.speech_end
    assert sum(len(turn.pauses) for turn in first) >= 3
