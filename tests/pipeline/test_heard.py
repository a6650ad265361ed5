"""Played samples back to words: what the history keeps of a cut reply."""

from voxrelay.pipeline.heard import CUT_MARK, Playback, Playbacks, heard_text

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


S = 1_000_000_000  # ns


def test_a_pause_stops_the_replies_clock_and_a_resume_moves_their_timelines_by_it():
    playbacks = Playbacks()
    playbacks.audio(0, 22_050 * 4, 22_050, first_audio_ns=1 * S)  # 4 s, playing from 1 s
    playbacks[0].fragments = [("One two three four.", 22_050 * 4)]
    assert playbacks.pause(turn_id=1, now_ns=2 * S)
    assert playbacks.paused and playbacks.paused_for == 1 and playbacks.clock(9 * S) == 2 * S
    # However long the pause, what was heard is what played before it: 1 s of 4.
    assert playbacks.heard([0], now_ns=9 * S) == [(0, "One" + CUT_MARK)]
    # A second reply's first audio arrives during the pause: it starts at the resume.
    playbacks.audio(5, 22_050, 22_050, first_audio_ns=3 * S)
    assert playbacks.resume(now_ns=5 * S) and not playbacks.resume(6 * S)
    assert not playbacks.paused and playbacks.paused_for == -1
    assert playbacks[0].first_audio_ns == 4 * S and playbacks[0].end_ns() == 8 * S
    assert playbacks[5].first_audio_ns == 5 * S and playbacks.end_ns == 8 * S
    assert playbacks.heard([0], now_ns=6 * S) == [(0, "One two" + CUT_MARK)]


def test_a_reply_played_out_before_the_pause_keeps_its_timeline_and_a_cut_ends_the_pause():
    playbacks = Playbacks()
    playbacks.audio(0, 22_050, 22_050, first_audio_ns=1 * S)  # played from 1 s to 2 s
    playbacks.pause(turn_id=1, now_ns=3 * S)
    playbacks.resume(now_ns=4 * S)
    assert playbacks[0].first_audio_ns == 1 * S
    playbacks.audio(2, 22_050, 22_050, first_audio_ns=5 * S)
    playbacks.pause(turn_id=3, now_ns=5 * S)
    playbacks.cut_before(3)
    assert not playbacks.paused and playbacks.clock(7 * S) == 7 * S and 2 not in playbacks


def test_speech_that_starts_while_paused_takes_the_pause_over():
    playbacks = Playbacks()
    assert playbacks.pause(turn_id=1, now_ns=1 * S)
    assert not playbacks.pause(turn_id=2, now_ns=2 * S)  # no second pause event
    assert playbacks.paused_for == 2 and playbacks.clock(3 * S) == 1 * S
