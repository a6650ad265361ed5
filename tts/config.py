"""Configuration of the TTS stage (one frozen config, validated on construction)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# Rates the rest of the pipeline can carry: telephony (8k), ASR-native (16k), the
# voice's own 22.05k, and the usual device/WebRTC rates.
ALLOWED_SAMPLE_RATES = (8000, 16000, 22050, 24000, 44100, 48000)


@dataclass(frozen=True, slots=True)
class TTSConfig:
    """Settings for `Voice` and `Chunker`.

    voice_dir holds `voice.onnx` and `voice.onnx.json` (Piper format), e.g.
    `pipeline.models.asset_path("joe")`.
    """

    voice_dir: Path
    # None keeps the voice's native rate (22050 Hz for joe-medium); no resampling.
    output_sample_rate: int | None = None
    # 1.0 = the voice's trained tempo; 1.2 = 20% faster (Piper length_scale / speed).
    speed: float = 1.0
    # Piper's generator and duration noise; None keeps the voice's trained values.
    # 0.0 for both makes synthesis deterministic (same text, same samples): tests.
    noise_scale: float | None = None
    noise_w_scale: float | None = None
    # First fragment: released at the first clause boundary once it has this many
    # words, or after first_fragment_max_words words with no boundary at all. 2 words
    # start audio ~100 ms sooner than 3 end to end; both cut mid-clause (docs/tts.md).
    first_fragment_min_words: int = 1
    first_fragment_max_words: int = 2
    # Later fragments: shorter ones merge with the next (short fragments sound choppy),
    # and a run of text with no boundary is cut at a word after this many words.
    min_fragment_words: int = 6
    max_fragment_words: int = 40
    # Fade at every fragment edge so joints never click.
    fade_ms: float = 5.0
    # Silence appended after a sentence end (. ? !) and after a clause end (, ; : dash).
    sentence_pause_ms: float = 250.0
    clause_pause_ms: float = 120.0
    # One fixed gain for every fragment (Piper's per-sentence peak normalisation is off,
    # so loudness does not jump between short and long fragments).
    gain_db: float = 4.0
    # onnxruntime intra-op threads; Piper medium runs ~7x real time on one core.
    num_threads: int = 1
    # Vocoder frames (256 samples, ~12 ms each) in a sentence's first audio chunk; later
    # chunks double (tts/vocoder.py). 0 runs Piper's model whole, one chunk per sentence.
    first_chunk_frames: int = 16
    # With nothing queued, start the first fragment's first chunk before the delta that
    # confirms its cut arrives (tts/worker.py); dropped if the text goes on.
    synthesize_ahead: bool = True

    def __post_init__(self) -> None:
        # Accept a str from TOML/CLI settings; the frozen field is set once, here.
        voice_dir = Path(self.voice_dir)
        object.__setattr__(self, "voice_dir", voice_dir)
        for name in ("voice.onnx", "voice.onnx.json"):
            if not (voice_dir / name).is_file():
                raise ValueError(
                    f"voice_dir {voice_dir} has no {name}; run `voxrelay models fetch joe` "
                    "and pass pipeline.models.asset_path('joe')"
                )
        rate = self.output_sample_rate
        if rate is not None and rate not in ALLOWED_SAMPLE_RATES:
            raise ValueError(
                f"output_sample_rate={rate} is not supported; use None (native) or one of "
                f"{', '.join(map(str, ALLOWED_SAMPLE_RATES))}"
            )
        if not 0.5 <= self.speed <= 2.0:
            raise ValueError(f"speed={self.speed} is outside 0.5..2.0 (1.0 = normal tempo)")
        for label, noise in (
            ("noise_scale", self.noise_scale),
            ("noise_w_scale", self.noise_w_scale),
        ):
            if noise is not None and not 0.0 <= noise <= 2.0:
                raise ValueError(f"{label}={noise} is outside 0..2 (None = the voice's default)")
        if not 1 <= self.first_fragment_min_words <= self.first_fragment_max_words:
            raise ValueError(
                "need 1 <= first_fragment_min_words <= first_fragment_max_words, got "
                f"{self.first_fragment_min_words} and {self.first_fragment_max_words}"
            )
        if not 1 <= self.min_fragment_words <= self.max_fragment_words:
            raise ValueError(
                "need 1 <= min_fragment_words <= max_fragment_words, got "
                f"{self.min_fragment_words} and {self.max_fragment_words}"
            )
        if not 0.0 <= self.fade_ms <= 50.0:
            raise ValueError(f"fade_ms={self.fade_ms} is outside 0..50 ms")
        if not 0.0 <= self.sentence_pause_ms <= 2000.0:
            raise ValueError(f"sentence_pause_ms={self.sentence_pause_ms} is outside 0..2000 ms")
        if not 0.0 <= self.clause_pause_ms <= 2000.0:
            raise ValueError(f"clause_pause_ms={self.clause_pause_ms} is outside 0..2000 ms")
        if not -24.0 <= self.gain_db <= 24.0:
            raise ValueError(f"gain_db={self.gain_db} is outside -24..24 dB")
        if not 0 <= self.first_chunk_frames <= 512:
            raise ValueError(
                f"first_chunk_frames={self.first_chunk_frames} is outside 0..512 (0 = no chunking)"
            )
        if self.num_threads < 1:
            raise ValueError(f"num_threads={self.num_threads} must be at least 1")
