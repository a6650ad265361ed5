"""The partial-decode budget shared by the streams of one ASR process."""

from voxrelay.asr.budget import DecodeBudget

MS = 1_000_000


def test_partials_stop_once_decodes_fill_the_share_of_the_window() -> None:
    budget = DecodeBudget(share=0.5, window_s=2.0)  # at most 1 s of decoding per 2 s
    assert budget.allows_partial(now_ns=0)
    budget.record(0, 600 * MS)  # a final decode of one session
    assert budget.allows_partial(now_ns=700 * MS)
    budget.record(700 * MS, 1100 * MS)  # a partial of another: 1 s busy in the window
    assert not budget.allows_partial(now_ns=1200 * MS)
    # The window slides: at 2.3 s, 300 ms of the first decode and the 400 ms of the
    # second lie inside the last 2 s: 700 ms < 1 s.
    assert budget.allows_partial(now_ns=2300 * MS)


def test_old_decodes_are_forgotten() -> None:
    budget = DecodeBudget(share=0.25, window_s=1.0)
    budget.record(0, 300 * MS)
    assert not budget.allows_partial(now_ns=300 * MS)
    assert budget.allows_partial(now_ns=1400 * MS)
    assert not budget._decodes  # nothing older than the window is kept
