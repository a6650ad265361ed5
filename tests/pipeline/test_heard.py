"""Played samples back to words: what the history keeps of a cut reply."""

from voxrelay.pipeline.heard import CUT_MARK, Playback, heard_text

FRAGMENTS = [("Well,", 10_000), ("the capital of France is Paris.", 60_000), ("It is big.", 20_000)]


def test_fully_played_fragments_count_whole_and_the_playing_one_by_its_share():
    assert heard_text(FRAGMENTS, 10_000) == "Well" + CUT_MARK
    # 30 of 60 thousand samples: the words ending within the first half of its characters.
    assert heard_text(FRAGMENTS, 40_000) == "Well, the capital of" + CUT_MARK
    assert heard_text(FRAGMENTS, 70_000) == f"Well, the capital of France is Paris. {CUT_MARK}"
    assert heard_text(FRAGMENTS, 75_000) == "Well, the capital of France is Paris. It" + CUT_MARK


def test_nothing_played_is_just_the_cut_mark():
    assert heard_text(FRAGMENTS, 0) == CUT_MARK
    assert heard_text([], 5_000) == CUT_MARK
    assert heard_text(FRAGMENTS, 4_000) == CUT_MARK  # "Well," is not over yet


def test_played_is_bounded_by_delivery_by_real_time_and_by_what_was_sent():
    playback = Playback()
    playback.on_audio(22_050 * 4, 22_050, now_ns=1_000_000_000)  # 4 s arrived at once
    assert playback.played_samples(now_ns=2_000_000_000) == 22_050  # 1 s since the first
    assert playback.played_samples(now_ns=9_000_000_000) == 22_050 * 4
    assert playback.played_samples(now_ns=9_000_000_000, sent_samples=500) == 500
    assert playback.played_samples(now_ns=500) == 0
    playback.fragments = [("One two.", 22_050 * 4)]
    assert not playback.fully_played(now_ns=9_000_000_000)  # AUDIO_END not seen yet
    playback.complete = True
    assert playback.fully_played(now_ns=9_000_000_000)
    assert playback.end_ns() == 5_000_000_000
