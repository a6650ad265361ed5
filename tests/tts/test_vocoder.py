"""The vocoder in chunks (tts/vocoder.py): the same audio as the whole model, sooner."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from piper import PiperVoice
from piper.config import PiperConfig

from voxrelay.tts.audio import LEAD_KEEP_MS, SILENCE_LEVEL, TAIL_KEEP_MS, SentenceShaper
from voxrelay.tts.config import TTSConfig
from voxrelay.tts.vocoder import MIN_LAST_CHUNK_FRAMES, SplitVoiceModel, chunk_bounds, onnx_session
from voxrelay.tts.voice import Voice

TEXT = "Sure, the ten of clubs is yours. He was a young man who had a lot of potential."


@pytest.mark.parametrize("frames", [1, 16, 40, 41, 47, 48, 49, 100, 220, 1000])
@pytest.mark.parametrize("first", [0, 8, 16])
def test_chunk_bounds_cover_the_frames_in_growing_chunks(frames: int, first: int) -> None:
    bounds = chunk_bounds(frames, first)
    assert bounds[0][0] == 0 and bounds[-1][1] == frames
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:], strict=False))
    if len(bounds) > 1:
        sizes = [stop - start for start, stop in bounds]
        assert sizes[0] == first
        assert all(b == 2 * a for a, b in zip(sizes[:-2], sizes[1:-1], strict=True))
        assert sizes[-1] >= MIN_LAST_CHUNK_FRAMES
    else:
        assert first == 0 or frames <= first + MIN_LAST_CHUNK_FRAMES


def test_chunked_vocoder_equals_piper_run_whole(voice_dir) -> None:  # type: ignore[no-untyped-def]
    piper_config = PiperConfig.from_dict(json.loads((voice_dir / "voice.onnx.json").read_text()))
    whole = PiperVoice(session=onnx_session(voice_dir / "voice.onnx", 1), config=piper_config)
    split = SplitVoiceModel(voice_dir / "voice.onnx", num_threads=1)
    ids = whole.phonemes_to_ids(whole.phonemize(TEXT)[1])
    feeds = {
        "input": np.array([ids], dtype=np.int64),
        "input_lengths": np.array([len(ids)], dtype=np.int64),
        "scales": np.array([0.0, 1.0, 0.0], dtype=np.float32),  # no noise: deterministic
    }
    reference = whole.session.run(None, feeds)[0].reshape(-1)
    latents = split.latents(feeds)
    assert latents.shape[2] * 256 == reference.size
    for first in (8, 16):
        pieces = list(split.audio(latents, first))
        assert len(pieces) >= 3 and [last for _, last in pieces] == [False] * (len(pieces) - 1) + [
            True
        ]
        assert pieces[0][0].size == first * 256
        chunked = np.concatenate([piece for piece, _ in pieces])
        # The vocoder sees 10 frames either side of each chunk: its whole receptive field.
        np.testing.assert_allclose(chunked, reference, rtol=0, atol=1e-5)


def _shaped_whole(audio: np.ndarray, rate: int, fade: int, pause: int) -> np.ndarray:
    """The reference: the whole sentence trimmed to its margins, faded at both edges."""
    voiced = np.flatnonzero(np.abs(audio) > SILENCE_LEVEL)
    start = max(0, int(voiced[0]) - int(LEAD_KEEP_MS * rate / 1000))
    stop = min(len(audio), int(voiced[-1]) + 1 + int(TAIL_KEEP_MS * rate / 1000))
    out = audio[start:stop].astype(np.float32)
    ramp = 0.5 - 0.5 * np.cos(np.linspace(0.0, np.pi, fade, dtype=np.float32))
    out[:fade] *= ramp
    out[-fade:] *= ramp[::-1]
    return np.concatenate([out, np.zeros(pause, dtype=np.float32)])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_shaper_in_pieces_equals_shaping_the_whole_sentence(seed: int) -> None:
    rng = np.random.default_rng(seed)
    rate, gain, fade = 22050, 1.5, 110
    # 40 ms of room tone, ~1 s of "speech", 150 ms of room tone: Piper's shape.
    audio = np.concatenate(
        [
            rng.normal(0, 0.0005, 882),
            rng.normal(0, 0.2, 22050) * np.hanning(22050),
            rng.normal(0, 0.0005, 3300),
        ]
    ).astype(np.float32)
    expected = _shaped_whole(audio * gain, rate, fade, 500)
    whole = SentenceShaper(rate, gain, fade).push(audio, last=True, pause_samples=500)
    np.testing.assert_allclose(whole, expected, rtol=0, atol=1e-6)
    cuts = np.sort(rng.choice(np.arange(256, audio.size - 6000), size=4, replace=False))
    # The first cut lands in the leading room tone: the shaper must hold it.
    cuts = np.concatenate([[400], cuts, [audio.size - 5500]])
    pieces = np.split(audio, cuts)
    shaper = SentenceShaper(rate, gain, fade)
    out = [
        shaper.push(piece, last=i == len(pieces) - 1, pause_samples=500)
        for i, piece in enumerate(pieces)
    ]
    assert out[0].size == 0  # only room tone so far
    np.testing.assert_allclose(np.concatenate(out), expected, rtol=0, atol=1e-6)


def test_voice_in_chunks_gives_the_same_samples_sooner(config: TTSConfig) -> None:
    quiet = dataclasses.replace(
        config, noise_scale=0.0, noise_w_scale=0.0, output_sample_rate=16000
    )
    chunked_voice = Voice(quiet)
    whole_voice = Voice(dataclasses.replace(quiet, first_chunk_frames=0))
    chunked = list(chunked_voice.synthesize(TEXT, final=True))
    whole = list(whole_voice.synthesize(TEXT, final=True))
    assert len(whole) == 2  # one chunk per sentence
    assert len(chunked) >= 4  # the first sentence in pieces
    # The first piece is at most the first 16 frames (~186 ms) less the trimmed silence.
    assert chunked[0].pcm.size <= 16 * 256 * 16000 / 22050 + 64
    assert [c.is_last for c in chunked] == [False] * (len(chunked) - 1) + [True]
    a = np.concatenate([c.pcm for c in chunked]).astype(np.int32)
    b = np.concatenate([c.pcm for c in whole]).astype(np.int32)
    assert a.size == b.size
    assert np.abs(a - b).max() <= 2  # float rounding, then int16


def test_first_chunk_frames_is_validated(voice_dir) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="first_chunk_frames=-1"):
        TTSConfig(voice_dir=voice_dir, first_chunk_frames=-1)
