"""A speaker who went on after a committed end of turn is waited for longer from then on
(asr/pause_habit.py): the rule, and a real stream on real speech."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from tests.asr.clipdata import feed_frames, of_type, read_clip, silence, trim, words
from voxrelay.asr.config import ASRConfig
from voxrelay.asr.events import EndScored, Final
from voxrelay.asr.pause_habit import KEPT_MS, MARGIN_MS, PauseHabit
from voxrelay.asr.stream import ASRStream


def test_a_speaker_who_went_on_is_waited_for_that_long_and_a_kept_turn_decays_it() -> None:
    habit = PauseHabit(max_ms=1000)
    assert habit.wait_ms(300, 2500) == 300  # nothing learned: the pause's own wait
    habit.speech_after_end(600)
    assert habit.went_on == 1 and habit.wait_ms(300, 2500) == 600 + MARGIN_MS
    assert habit.wait_ms(1800, 2500) == 1800  # a longer wait of its own stands
    habit.speech_after_end(450)  # a shorter gap does not lower it
    assert habit.wait_ms(300, 2500) == 600 + MARGIN_MS
    habit.speech_after_end(980)
    assert habit.wait_ms(300, 2500) == 1000  # never past max_ms
    assert habit.wait_ms(300, 800) == 800  # nor past the fallback
    habit.speech_after_end(1500)  # too late to be sure it went on, too soon to be sure not
    assert habit.wait_ms(300, 2500) == 1000 and habit.went_on == 3
    habit.speech_after_end(KEPT_MS)  # let the reply play: that end was right
    assert habit.wait_ms(300, 2500) == 500 and habit.went_on == 3


def test_off_learns_nothing() -> None:
    habit = PauseHabit(max_ms=0)
    habit.speech_after_end(500)
    assert habit.went_on == 0 and habit.wait_ms(300, 2500) == 300


# The learned end, tiny.en, partials off; the LLM's probability is given as confident.
LEARNED = ASRConfig(model="tiny.en", partial_interval_ms=0)
PAUSE_S = 0.4  # with the clips' own room tone, the VAD hears ~0.8 s


@pytest.fixture(scope="module")
def goes_on_twice(clips: Path) -> np.ndarray:
    """A whole command, PAUSE_S, the same again, PAUSE_S, a third time, then silence:
    one speaker holding the floor through two pauses that each follow a whole
    sentence."""
    command = trim(read_clip(clips / "goforward.raw"))
    pause = silence(PAUSE_S)
    return np.concatenate([command, pause, command, pause, command, silence(2.0)])


def test_after_the_speaker_went_on_the_same_pause_no_longer_ends_the_turn(
    goes_on_twice: np.ndarray, models
) -> None:
    events = feed_frames(ASRStream(LEARNED, models), goes_on_twice, text_prob=0.5)
    finals = [words(f.text) for f in of_type(events, Final)]
    # The first pause follows a whole command: committed at the floor. The speaker came
    # back after it, so the second, as long, waits past it: the last two are one turn.
    assert len(finals) == 2, finals
    assert finals[0] == "go forward 10 meters" and finals[1].count("forward") == 2, finals
    scored = of_type(events, EndScored)
    assert scored[0].wait_ms == 300, scored  # medium's floor: a confident end
    assert PAUSE_S * 1000 < scored[1].wait_ms <= LEARNED.turn_adapt_max_ms, scored


def test_without_it_every_such_pause_ends_the_turn(goes_on_twice: np.ndarray, models) -> None:
    config = replace(LEARNED, turn_adapt_max_ms=0)
    events = feed_frames(ASRStream(config, models), goes_on_twice, text_prob=0.5)
    assert len(of_type(events, Final)) == 3
