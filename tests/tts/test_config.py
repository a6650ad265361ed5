from __future__ import annotations

from pathlib import Path

import pytest

from voxrelay.tts.config import TTSConfig


def test_defaults_are_valid_and_str_path_is_accepted(voice_dir: Path) -> None:
    config = TTSConfig(voice_dir=str(voice_dir))  # type: ignore[arg-type]
    assert config.voice_dir == voice_dir
    assert config.output_sample_rate is None


def test_missing_voice_says_how_to_fetch(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="voxrelay models fetch joe"):
        TTSConfig(voice_dir=tmp_path)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("output_sample_rate", 11025, "output_sample_rate=11025 is not supported"),
        ("speed", 3.0, "speed=3.0"),
        ("first_fragment_min_words", 9, "first_fragment_min_words <= first_fragment_max_words"),
        ("min_fragment_words", 0, "1 <= min_fragment_words"),
        ("fade_ms", -1.0, "fade_ms"),
        ("sentence_pause_ms", 5000.0, "sentence_pause_ms"),
        ("noise_w_scale", -0.1, "noise_w_scale"),
        ("num_threads", 0, "num_threads"),
    ],
)
def test_invalid_values_name_the_field(
    voice_dir: Path, field: str, value: object, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        TTSConfig(voice_dir=voice_dir, **{field: value})  # type: ignore[arg-type]
