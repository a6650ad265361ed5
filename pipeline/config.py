"""Pipeline configuration: one frozen dataclass, validated on construction."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from voxrelay.asr.config import ASRConfig

# How long the ASR waits for a remote backend's end-of-turn probability (ASRConfig's
# `text_hint_wait_ms`, 500 ms for the engine in-process): `llm-serve` over HTTP beside
# the stages gave it ~230 ms after the reply started, and the ASR's wait, counted in
# silence as the VAD reads it, leaves ~250 ms of wall time after a ~250 ms decode
# (docs/llm.md, "The end-of-turn probe over HTTP").
REMOTE_TEXT_HINT_WAIT_MS = 1000

TRANSPORTS = ("shm", "zmq")
MODES = ("streaming", "sequential", "naive")  # the pipeline, then its two yardsticks
# The agent's greeting (Pipeline.greet) is this turn of its session; the user's turns
# are numbered after it.
OPENING_TURN = 0
MAX_GREETING_CHARS = 1000  # ~1 min of speech: a greeting, not a recording


MAX_INSTRUCTIONS_BYTES = 16_384  # a session's system prompt, or one reply's instructions


def check_instructions(value: object) -> str:
    """A system prompt or a reply's instructions as given: TypeError if not a string,
    ValueError if over MAX_INSTRUCTIONS_BYTES (the same message for both)."""
    rule = f"instructions must be a string of at most {MAX_INSTRUCTIONS_BYTES} bytes"
    if not isinstance(value, str):
        raise TypeError(rule)
    if len(value.encode()) > MAX_INSTRUCTIONS_BYTES:
        raise ValueError(rule)
    return value


def check_greeting(text: str, what: str = "greeting") -> str:
    """Words the agent speaks as written (stripped); ValueError if empty or too long."""
    if not isinstance(text, str):
        raise TypeError(f"{what} must be a string, got {type(text).__name__}")
    text = text.strip()
    if not text:
        raise ValueError(f"{what} is empty: give the words to speak, or leave it unset")
    if len(text) > MAX_GREETING_CHARS:
        raise ValueError(
            f"{what} is {len(text)} characters; at most {MAX_GREETING_CHARS} are spoken"
        )
    return text


def agent_words(text: str | None, instructions: str | None) -> tuple[bool, str]:
    """What the agent says in a turn of its own (Pipeline.greet, Pipeline.say): (True,
    `text`) spoken as written, or (False, `instructions`) for words the model writes with
    them in place of the system prompt ("": from the system prompt). ValueError for both
    at once, empty or overlong text, or overlong instructions."""
    if text is not None and instructions is not None:
        raise ValueError("give the words to speak or instructions to write them, not both")
    if text is not None:
        return True, check_greeting(text, "the agent's text")
    if instructions is None:
        return False, ""
    return False, check_instructions(instructions).strip()


# A turn the user types (Pipeline.send_text): about what a long spoken turn holds, and a
# small part of the LLM's prompt budget (the history is trimmed around it).
MAX_USER_TEXT_CHARS = 2000


def check_user_text(text: str) -> str:
    """A typed turn as the LLM will read it (stripped); ValueError if empty or too long."""
    if not isinstance(text, str):
        raise TypeError(f"the user's text must be a string, got {type(text).__name__}")
    text = text.strip()
    if not text:
        raise ValueError("the user's text is empty: nothing to answer")
    if len(text) > MAX_USER_TEXT_CHARS:
        raise ValueError(
            f"the user's text is {len(text)} characters; at most {MAX_USER_TEXT_CHARS} "
            "make one turn"
        )
    return text


@dataclass(frozen=True, slots=True)
class PipelineConfig:
    """How the supervisor wires and watches the three stage processes.

    `transport` applies to the stage-to-stage links (ASR->LLM, LLM->TTS); the links to
    the supervisor are always shared memory because the supervisor spawns the stages on
    its own host. Stage settings are plain dicts handed to each stage's own config class,
    so each stage validates its own fields.
    """

    transport: str = "shm"
    audio_ring_bytes: int = 1 << 22  # 4 MiB: ~2 min of 16 kHz PCM16 input
    token_ring_bytes: int = 1 << 20
    control_ring_bytes: int = 1 << 16
    start_timeout_s: float = 120.0
    heartbeat_timeout_s: float = 1.5
    max_restarts: int = 5
    # The user speaking over a reply cuts it (the ASR's SpeechStart, after its
    # min_speech_ms of voiced audio, decides what counts as speaking).
    barge_in: bool = True
    # > 0: the speech must also reach this many words in an ASR partial (or the final
    # transcript) before it cuts the reply, so a "mhm" or a cough does not (0 = off).
    barge_in_min_words: int = 0
    # A barge-in by speech that starts within this much silence after the cut turn's
    # speech ended is the user going on with that turn, not a new one (the end of turn
    # came too soon): the LLM answers both as one user turn, and the reply they cut leaves
    # no trace in the history. 0 = off: every barge-in starts a new turn. Natural mid-turn
    # pauses run 0.2-1.7 s (docs/asr.md, "The natural-pause set").
    continue_turn_ms: int = 1500
    # One spare process per stage, models loaded, blocked until a stage dies: recovery
    # in milliseconds instead of a cold start (seconds). Costs one model copy per stage.
    warm_standby: bool = False
    # Standbys load at this nice increment so their model load does not slow live turns;
    # applied only where a promoted standby may return to normal priority (pipeline/standby.py).
    standby_nice: int = 19
    # Spoken when a session opens, before the user says a word (a call answered, a
    # browser connected): "Thanks for calling, how can I help?". "" = the agent waits.
    greeting: str = ""
    # The user says nothing this long after the agent has finished speaking: the agent
    # speaks up with `idle_prompt` (pipeline/idle.py). 0 = never.
    idle_prompt_s: float = 0.0
    idle_prompt: str = "Are you still there?"
    # After this many prompts in a row with no word from the user, the agent says
    # `idle_goodbye` ("" = nothing) and gives up: a phone call is hung up once it has
    # played; other sessions stay open, and prompt again once the user speaks.
    idle_prompts: int = 2
    idle_goodbye: str = "I'll let you go now. Goodbye."
    asr: dict[str, Any] = field(default_factory=dict)
    llm: dict[str, Any] = field(default_factory=dict)
    tts: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.transport not in TRANSPORTS:
            raise ValueError(f"transport must be one of {TRANSPORTS}, got {self.transport!r}")
        for name in ("audio_ring_bytes", "token_ring_bytes", "control_ring_bytes"):
            size = getattr(self, name)
            if size < 4096 or size & (size - 1):
                raise ValueError(f"{name} must be a power of two >= 4096, got {size}")
        if self.heartbeat_timeout_s <= 0 or self.start_timeout_s <= 0:
            raise ValueError("timeouts must be positive")
        if self.max_restarts < 0:
            raise ValueError("max_restarts must be >= 0")
        if not 0 <= self.standby_nice <= 19:
            raise ValueError(f"standby_nice must be in 0..19, got {self.standby_nice}")
        if not 0 <= self.continue_turn_ms <= 10_000:
            raise ValueError(
                f"continue_turn_ms must be in 0..10000 (0 = off), got {self.continue_turn_ms}"
            )
        if self.greeting:
            check_greeting(self.greeting)
        if self.idle_prompt_s and not 1.0 <= self.idle_prompt_s <= 600.0:
            raise ValueError(
                f"idle_prompt_s must be 0 (off) or in 1..600 s, got {self.idle_prompt_s}"
            )
        check_greeting(self.idle_prompt, "idle_prompt")
        if self.idle_goodbye:
            check_greeting(self.idle_goodbye, "idle_goodbye")
        if not 1 <= self.idle_prompts <= 10:
            raise ValueError(f"idle_prompts must be in 1..10, got {self.idle_prompts}")
        if not 0 <= self.barge_in_min_words <= 20:
            raise ValueError(
                f"barge_in_min_words must be in 0..20 (0 = off), got {self.barge_in_min_words}"
            )

    def stage_configs(self) -> dict[str, dict[str, Any]]:
        """Each stage's settings as its worker gets them. With a remote LLM backend the
        ASR waits REMOTE_TEXT_HINT_WAIT_MS for the LLM's P(end of turn) unless
        `text_hint_wait_ms` is set: the probe crosses HTTP (llm/async_backend.py)."""
        asr = dict(self.asr)
        if self.llm.get("backend", "native") != "native":
            asr.setdefault("text_hint_wait_ms", REMOTE_TEXT_HINT_WAIT_MS)
        return {"asr": asr, "llm": self.llm, "tts": self.tts}

    def model_names(self) -> tuple[str, str, str]:
        """(ASR model, LLM model, TTS voice) as the stage workers pick them: their setting
        here, else the default asset each worker loads (asr/, llm/, tts/ worker.py)."""
        return (
            str(self.asr.get("model", ASRConfig().model)),
            str(self.llm.get("model", "smollm2")),
            str(self.tts.get("voice", "joe")),
        )
