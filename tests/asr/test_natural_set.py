"""The lecture set's pieces: the recording cut only at its own pauses, every piece
short enough for one utterance, every pause mid-turn; the unscripted talks and the
speech phenomena recordings, one turn each; the runs of unvoiced windows that label the
natural and splice sets' pauses; the digital silence the bench streams after each true
end, against the recordings' own room."""

from pathlib import Path

import numpy as np

from tests.asr.clipdata import SAMPLE_RATE, read_clip, trim, voiced_span
from tests.asr.natural import (
    LECTURE_PIECE_S,
    UNSCRIPTED,
    lecture_turns,
    phenomena_recordings,
    phenomena_turns,
    quietest_near,
    unscripted_turns,
    unvoiced_run,
    voiced_windows,
)
from voxrelay.asr.vad import WINDOW_SAMPLES


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


def test_each_unscripted_talk_is_one_turn_whose_last_piece_holds_the_true_end(
    natural_dir: Path, models
) -> None:
    turns = unscripted_turns(natural_dir, models.vad)
    for name in UNSCRIPTED:
        pieces = [t for t in turns if t.name.startswith(f"unscripted/{name}/")]
        whole = read_clip(natural_dir / f"unscripted/{name}.wav")
        np.testing.assert_array_equal(np.concatenate([t.audio for t in pieces]), whole)
        assert [t.true_end for t in pieces] == [False] * (len(pieces) - 1) + [True]
        assert all(t.audio.size <= LECTURE_PIECE_S * SAMPLE_RATE for t in pieces)
        # One talk is one session: what the stream learns of his pauses carries over.
        assert {t.session for t in pieces} == {f"unscripted/{name}"}
        # He stops where the recording's speech stops: "... alright thanks", then silence.
        assert pieces[-1].audio.size - pieces[-1].speech_end > 0.2 * SAMPLE_RATE, name
    lengths = [(b - a) / SAMPLE_RATE for t in turns for a, b in t.pauses]
    assert len(lengths) >= 15 and min(lengths) >= 0.2, lengths


def test_each_phenomena_recording_is_one_turn_with_its_own_pauses_and_a_true_end(
    natural_dir: Path, models
) -> None:
    turns = phenomena_turns(natural_dir, models.vad)
    assert len(turns) == 49 and all(t.true_end for t in turns)
    assert len({t.name for t in turns}) == 49 and not any(t.session for t in turns)
    for turn in turns:  # he stops where the recording's speech stops (a few at its end)
        assert 0 < turn.speech_end <= turn.audio.size + WINDOW_SAMPLES, turn.name
        assert all(0 < a < b <= turn.speech_end for a, b in turn.pauses), turn.name
    lengths = [(b - a) / SAMPLE_RATE for t in turns for a, b in t.pauses]
    assert len(lengths) >= 50 and min(lengths) >= 0.2, lengths
    # A word broken up by silences ("Mon... tree-all... forced... align... er") pauses
    # inside the turn; a plain sentence ("This is a long stop.") does not.
    by_name = {t.name: t for t in turns}
    assert len(by_name["phenomena/mfa_internalsil"].pauses) >= 3
    assert not by_name["phenomena/mfa_longstop"].pauses


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


def test_an_unvoiced_run_is_found_around_a_sample_and_a_voiced_window_has_none() -> None:
    from voxrelay.asr.vad import WINDOW_SAMPLES as W

    voiced = [True, False, False, True, False]
    assert unvoiced_run(voiced, W + 5) == (W, 3 * W)
    assert unvoiced_run(voiced, 3 * W) == (3 * W, 3 * W)
    assert unvoiced_run(voiced, 4 * W) == (4 * W, 5 * W)  # up to the recording's end
    assert unvoiced_run(voiced, 9 * W) == (4 * W, 5 * W)  # past it: the last window


def test_silence_put_into_real_speech_is_heard_as_one_pause_that_holds_it(
    clips_dir: Path, models
) -> None:
    """The splice set's labels (bench/turn_end.py): Silero hears the put-in silence, and
    the run it hears around it is that silence give or take the boundary's own."""
    clip = trim(read_clip(clips_dir / "goforward.raw"))
    at = quietest_near(clip, clip.size // 2)
    added = int(0.8 * SAMPLE_RATE)
    spliced = np.concatenate([clip[:at], np.zeros(added, np.float32), clip[at:]])
    first, last = unvoiced_run(voiced_windows(spliced, models.vad), at + added // 2)
    assert first <= at + 0.1 * SAMPLE_RATE and last >= at + added - 0.1 * SAMPLE_RATE
    assert (last - first) / SAMPLE_RATE < 0.8 + 0.5, (first, last)


def test_silero_hears_a_speaker_stop_in_his_own_room_where_it_does_in_digital_silence(
    natural_dir: Path, models
) -> None:
    """bench/turn_sets.py streams digital zeros after every true end. Real recordings
    that go on in their room after the speaker stops show that this does not move the end
    of speech the endpointer hears: the same recording with everything from 100 ms past
    its last loud frame replaced by zeros ends within a window of it (session 35: 40 of
    47; a breath or a sound in the room after the words holds a few longer, never the
    zeros). Where a turn's audio is trimmed to 100 ms around its words, noise shaped like
    its own quietest 250 ms is no stand-in for the room: that stretch holds speech, and
    Silero stayed voiced 5-12 windows into it (docs/asr.md, session 35)."""

    def last_voiced_end(audio: np.ndarray) -> int:
        voiced = np.flatnonzero(voiced_windows(audio, models.vad))
        return int(voiced[-1] + 1) * WINDOW_SAMPLES

    moved = []
    for name, audio in phenomena_recordings(natural_dir):
        cut = voiced_span(audio)[1] + SAMPLE_RATE // 10
        if audio.size - cut < 0.4 * SAMPLE_RATE:  # too little of its room to hear
            continue
        zeros = np.concatenate([audio[:cut], np.zeros(audio.size - cut, np.float32)])
        moved.append(((last_voiced_end(audio) - last_voiced_end(zeros)) / SAMPLE_RATE, name))
    assert len(moved) >= 40
    assert min(moved)[0] >= 0, min(moved)  # zeros never hold a voice longer than the room
    same = sum(m <= WINDOW_SAMPLES / SAMPLE_RATE for m, _ in moved)  # within one window
    assert same >= 0.8 * len(moved), sorted(moved)[-10:]
