"""The decoder's loop check, and the short encoder window on a real clip."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.asr.clipdata import read_clip, silence, trim
from tests.asr.natural import natural_turns
from voxrelay.asr.config import ASRConfig
from voxrelay.asr.decoder import (
    WhisperDecoder,
    _collapse_stuck,
    _looped,
    _starts_over,
    _stuck_run,
)


def test_restart_loops_are_recognised() -> None:
    assert _starts_over("Go forward 10 meters. Go forward 10 meters. Go forward")
    assert _starts_over("ten of clubs ten of clubs")
    assert not _starts_over("ten of clubs")
    assert not _starts_over("five five")
    # A repeated phrase that is not the opening is ordinary speech.
    assert not _starts_over("I said the red one, the red one, please")


def test_stuck_loops_are_recognised_and_kept_once() -> None:
    # Seen on a 1.5 s reply heard over SIP: the decode stuck on its last word.
    stuck = "a helpful voice, assistant, assistant, assistant, assistant"
    assert _stuck_run(stuck.replace(",", "").split()) == (3, 1, 4)
    assert _collapse_stuck(stuck) == "a helpful voice, assistant"
    assert _collapse_stuck("ten of clubs ten of clubs ten of clubs ten of clubs.") == (
        "ten of clubs."
    )
    # Three copies are ordinary speech; so are repeats with words between them.
    assert _stuck_run(["no", "no", "no"]) is None
    assert _collapse_stuck("no, no, no, I said") == "no, no, no, I said"
    assert _collapse_stuck("one two one three one four one") == "one two one three one four one"


def test_short_window_decodes_a_real_clip_without_retry(clips: Path, models) -> None:
    whisper = models.whisper["tiny.en"]
    decoder = WhisperDecoder(whisper, ASRConfig(model="tiny.en"))
    audio = np.concatenate([trim(read_clip(clips / "goforward.raw")), silence(0.2)])
    transcript = decoder.decode(audio)
    assert transcript.text.lower().startswith("go forward")
    # audio + 2 s of trailing silence, at least encoder_context_s: far below 3000 frames.
    assert transcript.encoder_frames == 800 and not transcript.retried_full


def test_a_loop_is_retried_in_a_longer_window_before_the_full_one(clips: Path, models) -> None:
    """base, greedy, reads the spoken number "33-4692" (its first 2.98 s, as the decode at
    the pause after it sees them) as the number over and over in 8 s; 12 s read it right,
    at a quarter of the full 30 s window's encoder cost (docs/asr.md, session 15)."""
    decoder = WhisperDecoder(models.whisper["base"], ASRConfig(model="base"))
    audio = np.concatenate([trim(read_clip(clips / "numbers.raw")), silence(1.0)])[:47_680]
    looped, hit_budget, _ = decoder._run(audio, 800, 32, [])
    transcript = decoder.decode(audio)
    assert transcript.text.rstrip(".") == "33-4692", transcript
    assert not transcript.retried_full
    if not _looped(looped, hit_budget):  # the decoder's own test for a retry
        # The loop depends on the CPU's kernels: on an AVX-512 Xeon the 8 s window reads
        # the number right (seen in session 19), on the EPYC boxes it loops.
        assert transcript.encoder_frames == 800
        pytest.skip(f"base reads the number right in 8 s on this CPU ({looped!r})")
    assert hit_budget and _stuck_run(looped.split()) is not None, looped
    assert transcript.encoder_frames == 1200


def test_whisper_hears_a_turn_close_where_the_speaker_ends_not_where_they_pause(
    models, natural_dir: Path, clips: Path
) -> None:
    """Whisper's P(the sentence closes) after the last word (asr/textdecoder.py), on the
    natural set's real pauses: AUC 0.91 decoded like this, 0.85 through the stream
    (docs/asr.md, "Session 17"), against ~0.59 for the LLM's P(<|im_end|>) and for
    Smart Turn."""
    decoder = WhisperDecoder(models.whisper["base"], ASRConfig(model="base"))
    ends, mids = [], []
    for turn in natural_turns(natural_dir, clips, models.vad):
        for first, _ in turn.pauses:
            transcript = decoder.decode(turn.audio[:first])
            if not transcript.text:
                # Nothing written, nothing to close: the stream sends no SpeculativeEnd then.
                assert transcript.closing_prob is None
                continue
            assert transcript.closing_prob is not None and 0 < transcript.closing_prob < 1
            mids.append(transcript.closing_prob)
        if turn.true_end:
            ends.append(decoder.decode(turn.audio[: turn.speech_end]).closing_prob)
    assert len(mids) >= 10 and len(ends) >= 15
    pairs = [(end > mid) + 0.5 * (end == mid) for end in ends for mid in mids]
    assert sum(pairs) / len(pairs) > 0.75  # AUC


def test_ctranslate2s_decoder_reads_no_closing_probability(clips: Path, models) -> None:
    decoder = WhisperDecoder(
        models.whisper["tiny.en"], ASRConfig(model="tiny.en", text_decoder="ctranslate2")
    )
    audio = np.concatenate([trim(read_clip(clips / "goforward.raw")), silence(0.2)])
    transcript = decoder.decode(audio)
    assert transcript.text and transcript.closing_prob is None
