"""The command-line flags that set settings keys, and the settings of one command.

Each such flag defaults to None, so a flag not given leaves its key to the environment,
the config file or the default (pipeline/settings.py); only what the user typed is a
flag layer. The shared stage flags (`--llm-backend`, `--voice`, ...) go on every command
that starts stages.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from voxrelay.asr.config import MODELS as ASR_MODELS
from voxrelay.llm.config import BACKENDS
from voxrelay.pipeline.settings import FlagValue, Settings, load_settings

# Flags that set a settings key: (argparse dest, table, key); "--dest-name" in messages.
FlagSpec = tuple[str, str, str]
STAGE_FLAGS: tuple[FlagSpec, ...] = (
    ("llm_backend", "llm", "backend"),
    ("llm_url", "llm", "openai.base_url"),
    ("asr_model", "asr", "model"),
    ("turn_eagerness", "asr", "eagerness"),
    ("turn_fallback_ms", "asr", "turn_fallback_ms"),
    ("turn_adapt_max_ms", "asr", "turn_adapt_max_ms"),
    ("greeting", "pipeline", "greeting"),
    ("idle_prompt_s", "pipeline", "idle_prompt_s"),
)
STANDBY_FLAG: FlagSpec = ("warm_standby", "pipeline", "warm_standby")
BARGE_IN_FLAG: FlagSpec = ("barge_in_min_words", "pipeline", "barge_in_min_words")
SERVE_FLAGS: tuple[FlagSpec, ...] = (
    ("host", "server", "host"),
    ("port", "server", "port"),
    ("token", "server", "token"),
    ("allow_origin", "server", "allow_origins"),
    ("max_sessions", "server", "max_sessions"),
    ("max_message_bytes", "server", "max_message_bytes"),
    ("idle_timeout", "server", "idle_timeout_s"),
    ("max_turn_audio", "server", "max_turn_audio_s"),
    ("transport", "pipeline", "transport"),
    BARGE_IN_FLAG,
    STANDBY_FLAG,
)
MIC_FLAGS: tuple[FlagSpec, ...] = (
    ("input_device", "mic", "input_device"),
    ("output_device", "mic", "output_device"),
    ("full_duplex", "mic", "full_duplex"),
    BARGE_IN_FLAG,
    STANDBY_FLAG,
)
LLM_SERVE_FLAGS: tuple[FlagSpec, ...] = (
    ("host", "llm_serve", "host"),
    ("port", "llm_serve", "port"),
    ("served_model_name", "llm_serve", "served_model_name"),
    ("model_path", "llm", "model_path"),
    ("threads", "llm", "num_threads"),
    ("decode_dtype", "llm", "decode_dtype"),
    ("temperature", "llm", "temperature"),
    ("max_num_seqs", "llm", "max_num_seqs"),
)


def settings_from_args(
    command: str,
    args: argparse.Namespace,
    specs: tuple[FlagSpec, ...],
    extra: list[FlagValue] | None = None,
) -> Settings:
    """Flags > environment > config file > defaults for `voxrelay COMMAND` (pipeline/settings.py);
    a bad key or value is a ValueError here, before any stage process starts."""
    given = vars(args)
    flags = [
        FlagValue("--" + dest.replace("_", "-"), table, key, given[dest])
        for dest, table, key in specs
        if given.get(dest) is not None
    ]
    voice = given.get("voice")
    if voice is not None:  # a directory with voice.onnx, else a bundled voice's name
        flags.append(
            FlagValue("--voice", "tts", "voice_dir" if Path(voice).is_dir() else "voice", voice)
        )
    return load_settings(
        command,
        [*flags, *(extra or [])],
        config=given.get("config"),
        llm_model=given.get("llm_model"),
    )


def phone_flags(args: argparse.Namespace, table: str, default_port: int) -> list[FlagValue]:
    """`--listen HOST:PORT` and `--dtmf DIGIT=ACTION` as the settings keys they set."""
    from voxrelay.pipeline.sip.config import parse_listen

    flags = []
    if args.listen is not None:
        host, port = parse_listen(args.listen, default_port)
        flags += [FlagValue("--listen", table, "host", host)]
        flags += [FlagValue("--listen", table, "port", port)]
    if args.dtmf is not None:
        actions = []
        for item in args.dtmf:
            digit, sep, action = item.partition("=")
            if not sep:
                raise ValueError(
                    f"--dtmf {item!r}: use DIGIT=ACTION, e.g. '#=hangup' or '0=transfer'"
                )
            actions.append((digit, action))
        flags.append(FlagValue("--dtmf", table, "dtmf_actions", actions))
    return flags


def phone_specs(table: str) -> tuple[FlagSpec, ...]:
    return (
        *STAGE_FLAGS,
        ("allow", table, "allow"),
        ("max_calls", table, "max_calls"),
        ("transfer_to", table, "transfer_uri"),
        BARGE_IN_FLAG,
        STANDBY_FLAG,
    )


def add_settings_flags(parser: argparse.ArgumentParser, stages: bool = True) -> None:
    group = parser.add_argument_group("settings (flags > environment > config file > defaults)")
    group.add_argument(
        "--config", metavar="FILE", help="voxrelay.toml to read (default: $VOXRELAY_CONFIG)"
    )
    if not stages:
        return
    group.add_argument("--llm-backend", choices=BACKENDS, help="default: native")
    group.add_argument(
        "--llm-url", metavar="URL", help="OpenAI-compatible server, e.g. http://HOST:8000/v1"
    )
    group.add_argument(
        "--llm-model",
        metavar="MODEL",
        help="the backend's model: served name (openai), HF id or path (vllm), GGUF (native)",
    )
    group.add_argument("--asr-model", choices=ASR_MODELS, help="default: auto")
    group.add_argument("--voice", metavar="NAME|DIR", help="bundled voice or Piper voice folder")
    group.add_argument("--turn-eagerness", choices=("low", "medium", "high"))
    group.add_argument(
        "--turn-fallback-ms", type=int, metavar="MS", help="silence that ends a turn regardless"
    )
    group.add_argument(
        "--turn-adapt-max-ms",
        type=int,
        metavar="MS",
        help="after the speaker goes on within MS of a committed turn, wait that long (0: off)",
    )
    group.add_argument(
        "--greeting",
        metavar="TEXT",
        help="spoken when a session opens, before the user speaks (default: none)",
    )
    group.add_argument(
        "--idle-prompt-s",
        type=float,
        metavar="S",
        help="after S seconds of quiet the agent asks whether the user is still there "
        "(then says goodbye; a call hangs up); default 0: never",
    )
