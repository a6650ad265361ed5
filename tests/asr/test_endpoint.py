"""The endpointing state machine on synthetic VAD scores (32 ms windows, no models)."""

import pytest

from voxrelay.asr.config import ASRConfig
from voxrelay.asr.endpoint import Endpointer, EndpointEvent, EndpointKind, Phase

W = 512  # samples per window
K = EndpointKind
# 3 windows of speech to start, speculative end after 5 silent windows, end after 10.
CONFIG = ASRConfig(min_speech_ms=96, speculative_silence_ms=160, end_silence_ms=320)


def run(probs: list[float], config: ASRConfig = CONFIG) -> tuple[Endpointer, list[EndpointEvent]]:
    endpointer = Endpointer(config)
    events = [event for prob in probs for event in endpointer.push(prob)]
    return endpointer, events


def kinds(events: list[EndpointEvent]) -> list[EndpointKind]:
    return [e.kind for e in events]


def test_silence_gives_nothing() -> None:
    endpointer, events = run([0.0] * 100)
    assert events == [] and endpointer.phase is Phase.SILENCE


def test_blip_shorter_than_min_speech_is_ignored() -> None:
    _, events = run([0.0] * 5 + [0.9, 0.9] + [0.0] * 20)
    assert events == []


def test_start_at_first_voiced_window_after_min_speech() -> None:
    endpointer, events = run([0.0] * 4 + [0.9] * 3)
    assert events == [EndpointEvent(K.START, 4 * W)]
    assert endpointer.phase is Phase.SPEECH


def test_full_utterance_pause_speculative_end() -> None:
    _, events = run([0.0] * 4 + [0.9] * 10 + [0.0] * 12)
    speech_end = 14 * W
    assert events == [
        EndpointEvent(K.START, 4 * W),
        EndpointEvent(K.PAUSE, speech_end),
        EndpointEvent(K.SPECULATIVE_END, speech_end),
        EndpointEvent(K.END, speech_end),
    ]


def test_short_pause_before_speculative_end_just_continues() -> None:
    _, events = run([0.9] * 5 + [0.0] * 3 + [0.9] * 5 + [0.0] * 10)
    assert kinds(events) == [K.START, K.PAUSE, K.PAUSE, K.SPECULATIVE_END, K.END]
    assert events[-1].sample == 13 * W


def test_speech_after_speculative_end_resumes_then_ends_later() -> None:
    _, events = run([0.9] * 5 + [0.0] * 7 + [0.9] * 5 + [0.0] * 10)
    assert kinds(events) == [
        K.START,
        K.PAUSE,
        K.SPECULATIVE_END,
        K.RESUME,
        K.PAUSE,
        K.SPECULATIVE_END,
        K.END,
    ]
    assert events[3].sample == 12 * W
    assert events[-1].sample == 17 * W


def test_hold_moves_this_pauses_ends_later() -> None:
    endpointer = Endpointer(CONFIG)
    events = [e for prob in [0.9] * 5 + [0.0] * 5 for e in endpointer.push(prob)]
    assert kinds(events) == [K.START, K.PAUSE, K.SPECULATIVE_END]
    endpointer.hold(640)  # 20 windows: the speculative end comes again at 15, as 10 - 5
    assert endpointer.held and endpointer.phase is Phase.TRAILING
    later = [(i, e.kind) for i in range(5, 25) for e in endpointer.push(0.0)]
    assert later == [(14, K.SPECULATIVE_END), (19, K.END)]
    assert not endpointer.held  # the next pause starts from the config again
    again = [e for prob in [0.9] * 5 + [0.0] * 10 for e in endpointer.push(prob)]
    assert kinds(again) == [K.START, K.PAUSE, K.SPECULATIVE_END, K.END]


def test_extend_waits_longer_and_end_now_ends_the_pause() -> None:
    endpointer = Endpointer(CONFIG)
    events = [e for prob in [0.9] * 5 + [0.0] * 5 for e in endpointer.push(prob)]
    assert kinds(events) == [K.START, K.PAUSE, K.SPECULATIVE_END]
    assert endpointer.silence_ms == pytest.approx(5 * 32)
    endpointer.extend(960)  # 30 windows of silence in all: no END at 10
    later = [(i, e.kind) for i in range(5, 31) for e in endpointer.push(0.0)]
    assert later == [(29, K.END)]
    events = [e for prob in [0.9] * 5 + [0.0] * 6 for e in endpointer.push(prob)]
    assert kinds(events) == [K.START, K.PAUSE, K.SPECULATIVE_END]
    (end,) = endpointer.end_now()  # a learned decision: the turn is over
    assert end.kind is K.END and end.sample == endpointer.speech_end_sample
    assert endpointer.phase is Phase.SILENCE


def test_speech_after_a_hold_resumes_quietly_and_the_next_pause_is_normal() -> None:
    endpointer = Endpointer(CONFIG)
    for prob in [0.9] * 5 + [0.0] * 5:
        endpointer.push(prob)
    endpointer.hold(640)
    events = [e for prob in [0.0] * 6 + [0.9] * 5 + [0.0] * 10 for e in endpointer.push(prob)]
    # No RESUME: no SpeculativeEnd went out for the held pause.
    assert kinds(events) == [K.PAUSE, K.SPECULATIVE_END, K.END]
    assert events[-1].sample == 21 * W


def test_hysteresis_keeps_speech_through_middling_scores() -> None:
    # 0.4 is below the 0.5 threshold but above 0.5 - 0.15: still speech once speaking.
    _, events = run([0.9] * 5 + [0.4] * 20 + [0.0] * 10)
    assert kinds(events) == [K.START, K.PAUSE, K.SPECULATIVE_END, K.END]
    assert events[-1].sample == 25 * W
    # ...but it does not start speech from silence.
    _, events = run([0.4] * 30)
    assert events == []


def test_two_utterances_get_two_starts_and_ends() -> None:
    _, events = run(([0.9] * 5 + [0.0] * 15) * 2)
    assert kinds(events).count(K.START) == 2 and kinds(events).count(K.END) == 2


def test_finish_closes_open_utterance_at_end_of_audio() -> None:
    endpointer, _ = run([0.9] * 8)
    assert endpointer.finish(end_sample=8 * W - 100) == [EndpointEvent(K.END, 8 * W - 100)]
    assert endpointer.phase is Phase.SILENCE
    assert endpointer.finish(end_sample=9 * W) == []


def test_finish_in_trailing_silence_uses_the_speech_end() -> None:
    endpointer, _ = run([0.9] * 8 + [0.0] * 3)
    assert endpointer.finish(end_sample=11 * W) == [EndpointEvent(K.END, 8 * W)]


def test_max_utterance_cuts_at_the_quietest_window() -> None:
    config = ASRConfig(max_utterance_s=2.0)  # 2 s = 62.5 windows
    probs = [0.9] * 40 + [0.6] + [0.9] * 40
    _, events = run(probs, config)
    cut = 40 * W + W // 2
    assert events[1:3] == [
        EndpointEvent(K.END, cut, forced=True),
        EndpointEvent(K.START, cut, forced=True),
    ]


def test_long_monologue_is_cut_repeatedly_without_gaps() -> None:
    config = ASRConfig(max_utterance_s=1.0)
    _, events = run([0.9] * 200, config)
    cuts = [e for e in events if e.forced]
    assert len(cuts) >= 6
    # Every forced END is immediately followed by a START at the same sample.
    for end, start in zip(cuts[::2], cuts[1::2], strict=True):
        assert (end.kind, start.kind, end.sample) == (K.END, K.START, start.sample)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"model": "large"},
        {"vad_threshold": 1.5},
        {"speculative_silence_ms": 500, "end_silence_ms": 300},
        {"end_silence_ms": 0},
        {"turn_fallback_ms": 60_000},
        {"turn_detection": "semantic"},
        {"eagerness": "eager"},
        {"max_utterance_s": 40},
        {"partial_interval_ms": 20},
        {"cpu_threads": 0},
        {"compute_type": "int4"},
    ],
)
def test_config_rejects_bad_values(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="ASRConfig"):
        ASRConfig(**kwargs)  # type: ignore[arg-type]


def test_unfinished_hold_needs_a_speculative_end_before_the_end() -> None:
    assert ASRConfig().holds_unfinished
    assert not ASRConfig(turn_fallback_ms=0).holds_unfinished
    assert ASRConfig().learns_end and not ASRConfig(turn_detection="silence").learns_end
    assert not ASRConfig(end_silence_ms=2600).holds_unfinished  # not later than the end
    assert not ASRConfig(speculative_silence_ms=300, end_silence_ms=300).holds_unfinished
