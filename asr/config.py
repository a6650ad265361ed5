"""ASR stage configuration: one frozen dataclass, validated on construction."""

from __future__ import annotations

from dataclasses import dataclass, replace

MODELS = ("auto", "tiny.en", "base")
# "auto": base while the process serves one session, tiny.en once several share the CPU
# (docs/asr.md, "One model for one session, a lighter one for many"). (alone, shared)
AUTO_MODELS = ("base", "tiny.en")
COMPUTE_TYPES = ("int8", "int8_float32", "float32")
TEXT_DECODERS = ("native", "ctranslate2")
# Whisper's audio encoder: CTranslate2's (compute_type), or ours in PyTorch bfloat16
# (asr/encoder.py): on a CPU with AMX, at the same WER, the SpeculativeEnd ~20% sooner
# with passive threads and a pause decode 35-47% shorter with the ASR's short OpenMP
# spin; but the transcripts' small changes moved the natural set's turn-end waits, so
# it is not the default (docs/asr.md, "Session 28").
ENCODERS = ("ctranslate2", "bfloat16")
TURN_DETECTION = ("learned", "silence")
TURN_AUDIO_MODELS = ("none", "smart-turn")
EAGERNESS = ("low", "medium", "high")
# Whisper's encoder sees at most 30 s; the decoded audio is the utterance plus both pads.
WHISPER_WINDOW_S = 30.0


@dataclass(frozen=True, slots=True)
class ASRConfig:
    """Settings for one ASR stage; durations are rounded up to whole 32 ms VAD windows."""

    model: str = "auto"
    compute_type: str = "int8"
    cpu_threads: int = 2
    beam_size: int = 1
    # Whisper's text decoder: "native" (asr/textdecoder.py: greedy, checks the last
    # decode's text as a draft in one pass) or "ctranslate2" (its generate; beam search).
    text_decoder: str = "native"
    # Whisper's audio encoder (ENCODERS): "bfloat16" needs the native text decoder and
    # pays off only on a CPU with AMX (asr/encoder.py).
    encoder: str = "ctranslate2"
    vad_threshold: float = 0.5
    # Voiced audio before a SpeechStart. It is also the floor of barge-in latency (speech
    # start -> clear at the sink must stay under 100 ms), so it is two VAD windows; coughs
    # are longer than either value: `barge_in_min_words` is the guard against them.
    min_speech_ms: int = 64
    speculative_silence_ms: int = 150
    end_silence_ms: int = 300
    # How a pause ends the turn (asr/turn_end.py): "learned" scores every pause as it
    # reaches speculative_silence_ms (the words' rules, Whisper's P(the sentence closes),
    # the LLM's own P(end of turn)) and ends it at once, after a while, or at the
    # fallback; "silence" ends every pause after end_silence_ms (the words' rules still
    # hold).
    turn_detection: str = "learned"
    # A separate audio model in the learned fusion: "none", or "smart-turn" (Smart Turn
    # v3.2 on the last 8 s, ~40 ms of CPU a pause). Off by default: with Whisper's
    # closing probability in, the fit gives it no weight and the replayed sets gain
    # ~10 ms of wait from it (docs/asr.md, "Session 18").
    turn_audio_model: str = "none"
    # How soon a "learned" pause commits: "high" answers sooner and cuts more speakers
    # off, "low" waits longer (asr/turn_end.py EAGERNESS).
    eagerness: str = "medium"
    # The longest a pause waits: the end of turn when the words so far clearly stop
    # mid-sentence ("book a ..."), and the cap of every learned wait. Holding is off when
    # 0 or not above end_silence_ms, and when speculative_silence_ms is not below
    # end_silence_ms (no transcript to read in time).
    turn_fallback_ms: int = 2500
    # A speaker who comes back within this long of a committed turn's speech end went on
    # mid-turn: no later pause of the session ends the turn sooner than that gap + 100
    # ms, at most this (asr/pause_habit.py; learned end of turn only). 0 = off.
    turn_adapt_max_ms: int = 1000
    # The LLM's P(end of turn) is awaited this much more silence after the SpeculativeEnd
    # (it comes with the reply's first token, ~40-90 ms from the native engine here);
    # past it the pause ends as the silence rule ends it (a backend that says it has
    # none gets asr/turn_end.py WEIGHTS_NO_TEXT instead). The silence is counted as the
    # VAD reads it, and it reads the audio that piled up during the SpeculativeEnd's
    # decode (~250 ms) at once, so this leaves the LLM ~250 ms of wall time: a remote
    # backend gets 1000 ms (pipeline/config.py REMOTE_TEXT_HINT_WAIT_MS). A backend
    # that has no probability to give says so at once.
    text_hint_wait_ms: int = 500
    # 0 disables partial transcripts (offline transcription does not need them).
    partial_interval_ms: int = 600
    max_utterance_s: float = 20.0
    # Audio kept before the detected speech start and after its end, so soft onsets and
    # trailing consonants that the VAD misses still reach Whisper.
    speech_pad_ms: int = 300
    # Encoder input is the audio plus 2 s of silence, padded to at least this long, not to
    # the full 30 s window: the encoder (most of a decode) costs ~linear in its input, so
    # 8 s is ~2.5x cheaper than 30 s at equal WER on our clips (docs/asr.md). A decode
    # that looks like a repetition loop is redone with the full window. 30 = always full.
    encoder_context_s: float = 8.0
    # Share of the ASR process's time that partial decodes of all its sessions together
    # may use (asr/budget.py); end-of-turn decodes are never held back.
    partial_cpu_share: float = 0.5
    # Pin the encoder's and the text decoder's threads to different CPUs at each decode
    # (asr/threads.py): after an idle spell Linux left them sharing one here.
    spread_threads: bool = True
    # OpenMP spin rounds after each parallel region in the ASR process (read by the stage
    # process before its runtimes load; 0: passive, the default). A decode is a burst
    # of hundreds of back-to-back regions, and passive, each one wakes the sleeping
    # second thread: with 100_000 (~1 ms) the pause decode came ~90 ms sooner for one
    # conversation, but with four at once the ASR then decodes nearly all the time and
    # its spinning pool holds the cores the LLM and TTS need (docs/asr.md, "Session
    # 28"). `voxrelay run` and `mic`, one conversation each, turn it on.
    openmp_spin: int = 0

    def __post_init__(self) -> None:
        if self.model not in MODELS:
            raise ValueError(f"ASRConfig.model must be one of {MODELS}, got {self.model!r}")
        if self.compute_type not in COMPUTE_TYPES:
            raise ValueError(
                f"ASRConfig.compute_type must be one of {COMPUTE_TYPES}, got {self.compute_type!r}"
            )
        if self.cpu_threads < 1:
            raise ValueError(f"ASRConfig.cpu_threads must be >= 1, got {self.cpu_threads}")
        if not 1 <= self.beam_size <= 10:
            raise ValueError(f"ASRConfig.beam_size must be in 1..10, got {self.beam_size}")
        if self.text_decoder not in TEXT_DECODERS:
            raise ValueError(
                f"ASRConfig.text_decoder must be one of {TEXT_DECODERS}, got {self.text_decoder!r}"
            )
        if self.text_decoder == "native" and self.beam_size > 1:
            raise ValueError(
                "ASRConfig.beam_size > 1 needs text_decoder='ctranslate2' "
                "(the native decoder is greedy)"
            )
        if not 0 <= self.openmp_spin <= 10_000_000:
            raise ValueError(
                "ASRConfig.openmp_spin must be in 0..10000000 spin rounds (0 = passive), "
                f"got {self.openmp_spin}"
            )
        if self.encoder not in ENCODERS:
            raise ValueError(f"ASRConfig.encoder must be one of {ENCODERS}, got {self.encoder!r}")
        if self.encoder == "bfloat16" and self.text_decoder != "native":
            raise ValueError(
                "ASRConfig.encoder='bfloat16' needs text_decoder='native' "
                "(CTranslate2's decoder reads its own encoder's output)"
            )
        if not 0.05 < self.vad_threshold < 0.95:
            raise ValueError(
                f"ASRConfig.vad_threshold must be in (0.05, 0.95), got {self.vad_threshold}"
            )
        for name in (
            "min_speech_ms",
            "speculative_silence_ms",
            "end_silence_ms",
            "turn_fallback_ms",
            "turn_adapt_max_ms",
            "text_hint_wait_ms",
            "speech_pad_ms",
        ):
            value = getattr(self, name)
            if not 0 <= value <= 10_000:
                raise ValueError(f"ASRConfig.{name} must be in 0..10000 ms, got {value}")
        if self.turn_detection not in TURN_DETECTION:
            raise ValueError(
                f"ASRConfig.turn_detection must be one of {TURN_DETECTION}, "
                f"got {self.turn_detection!r}"
            )
        if self.turn_audio_model not in TURN_AUDIO_MODELS:
            raise ValueError(
                f"ASRConfig.turn_audio_model must be one of {TURN_AUDIO_MODELS}, "
                f"got {self.turn_audio_model!r}"
            )
        if self.eagerness not in EAGERNESS:
            raise ValueError(
                f"ASRConfig.eagerness must be one of {EAGERNESS}, got {self.eagerness!r}"
            )
        if self.end_silence_ms < 32:
            raise ValueError(
                "ASRConfig.end_silence_ms must be >= 32 (one VAD window), "
                f"got {self.end_silence_ms}"
            )
        if self.speculative_silence_ms > self.end_silence_ms:
            raise ValueError(
                "ASRConfig.speculative_silence_ms must not exceed end_silence_ms "
                f"({self.speculative_silence_ms} > {self.end_silence_ms})"
            )
        if self.partial_interval_ms != 0 and not 100 <= self.partial_interval_ms <= 10_000:
            raise ValueError(
                "ASRConfig.partial_interval_ms must be 0 (off) or in 100..10000, "
                f"got {self.partial_interval_ms}"
            )
        longest = WHISPER_WINDOW_S - 2 * self.speech_pad_ms / 1000
        if not 1.0 <= self.max_utterance_s <= longest:
            raise ValueError(
                f"ASRConfig.max_utterance_s must be in 1..{longest:g} s (Whisper's 30 s window "
                f"minus both speech pads), got {self.max_utterance_s}"
            )
        if not 0.05 <= self.partial_cpu_share <= 1.0:
            raise ValueError(
                f"ASRConfig.partial_cpu_share must be in 0.05..1, got {self.partial_cpu_share}"
            )
        if not 1.0 <= self.encoder_context_s <= WHISPER_WINDOW_S:
            raise ValueError(
                f"ASRConfig.encoder_context_s must be in 1..30 s, got {self.encoder_context_s}"
            )

    @property
    def whisper_models(self) -> tuple[str, ...]:
        """The Whisper models this config decodes with: (alone, shared) for "auto"."""
        return AUTO_MODELS if self.model == "auto" else (self.model,)

    def alone(self) -> ASRConfig:
        """This config for a chain that serves one session: "auto" made its model for one."""
        return replace(self, model=self.whisper_models[0])

    @property
    def learns_end(self) -> bool:
        """Whether pauses are scored (asr/turn_end.py) instead of ended by silence alone."""
        return self.turn_detection == "learned" and self.holds_unfinished

    @property
    def holds_unfinished(self) -> bool:
        """Whether a pause after unfinished words ends the turn later (asr/turn_end.py)."""
        return (
            self.turn_fallback_ms > self.end_silence_ms
            and self.speculative_silence_ms < self.end_silence_ms
        )
