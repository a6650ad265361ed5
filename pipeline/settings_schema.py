"""The keys of `voxrelay.toml`: one table per frozen config dataclass, read from its fields.

A table's keys are its dataclass's fields (`dataclasses.fields` and the resolved type
hints), so a field added later is a key with no code here; a field whose type is itself
a dataclass is a sub-table whose keys are dotted (`openai.base_url` in `[llm]`, or
`base_url` in `[llm.openai]`). Values are checked against the field's type here; their
ranges are the dataclass's own `__post_init__` business.
"""

from __future__ import annotations

import dataclasses
import tomllib
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

from voxrelay.asr.config import ASRConfig
from voxrelay.llm.config import LLMConfig
from voxrelay.pipeline.config import PipelineConfig
from voxrelay.tts.config import TTSConfig


def _server() -> type[Any]:
    from voxrelay.pipeline.ws import ServerConfig

    return ServerConfig


def _mic() -> type[Any]:
    from voxrelay.pipeline.mic import MicConfig

    return MicConfig


def _sip() -> type[Any]:
    from voxrelay.pipeline.sip.config import SipConfig

    return SipConfig


def _llm_serve() -> type[Any]:
    from voxrelay.llm.serve import ServeConfig  # imports torch: only llm-serve uses it

    return typing.cast(type[Any], ServeConfig)


# Table -> its dataclass; the heavier modules import only for the commands that use them.
TABLES: dict[str, Callable[[], type[Any]]] = {
    "asr": lambda: ASRConfig, "llm": lambda: LLMConfig, "tts": lambda: TTSConfig,
    "pipeline": lambda: PipelineConfig,
    "server": _server, "mic": _mic, "sip": _sip, "audiosocket": _sip, "llm_serve": _llm_serve,
}  # fmt: skip
STAGES = ("asr", "llm", "tts")
# Asset keys the stage workers read besides their dataclass fields: the bundled model a
# required path field comes from (llm/dialogue.py llm_config, tts/worker.py), as
# (key, default asset, field, path inside the asset's folder).
ASSET_KEYS = {
    "llm": ("model", "smollm2", "model_path", "model.gguf"),
    "tts": ("voice", "joe", "voice_dir", ""),
}
NO_DEFAULT = object()  # a required field: filled from its asset key
Key = tuple[Any, Any]  # (type, default or NO_DEFAULT)


def table_keys(table: str) -> dict[str, Key]:
    """Key -> (type, default or NO_DEFAULT) of one table, sub-table keys dotted."""
    keys: dict[str, Key] = {}
    if table in ASSET_KEYS:
        keys[ASSET_KEYS[table][0]] = (str, ASSET_KEYS[table][1])
    _add_fields(TABLES[table](), "", keys)
    return keys


def _add_fields(cls: type[Any], prefix: str, keys: dict[str, Key]) -> None:
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        kind = hints[field.name]
        if typing.get_origin(kind) is dict:
            continue  # PipelineConfig's stage settings: the stage tables fill them
        if dataclasses.is_dataclass(kind):
            _add_fields(typing.cast(type[Any], kind), f"{prefix}{field.name}.", keys)
            continue
        default = field.default
        if field.default_factory is not dataclasses.MISSING:
            default = field.default_factory()
        missing = default is dataclasses.MISSING
        keys[prefix + field.name] = (kind, NO_DEFAULT if missing else default)


def _members(kind: Any) -> tuple[Any, ...]:
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        return tuple(m for m in typing.get_args(kind) if m is not type(None))
    return (kind,)


def describe_type(kind: Any) -> str:
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string",
             Path: "a path (string)"}  # fmt: skip
    words = []
    for member in _members(kind):
        args = typing.get_args(member)
        if typing.get_origin(member) is tuple and args[-1] is Ellipsis:
            words.append(f"an array of {describe_type(args[0])}")
        elif typing.get_origin(member) is tuple:
            words.append(f"an array [{', '.join(describe_type(arg) for arg in args)}]")
        else:
            words.append(names.get(member, getattr(member, "__name__", str(member))))
    return " or ".join(words)


def coerce(value: Any, kind: Any) -> Any:
    """`value` (as TOML, an env var or argparse gave it) checked against the field type;
    TypeError when it does not fit. Paths stay strings: stage settings travel as JSON."""
    for member in _members(kind):
        args = typing.get_args(member)
        if typing.get_origin(member) is tuple and isinstance(value, list | tuple):
            inner = args[:1] * len(value) if args[-1] is Ellipsis else args
            if len(inner) == len(value):
                try:
                    return tuple(coerce(item, k) for item, k in zip(value, inner, strict=True))
                except TypeError:
                    continue
        elif member is bool and isinstance(value, bool):
            return value
        elif member in (int, float) and isinstance(value, int) and not isinstance(value, bool):
            return member(value)
        elif (member is float and isinstance(value, float)) or (
            member in (str, Path) and isinstance(value, str)
        ):
            return value
    raise TypeError(f"expected {describe_type(kind)}, got {value!r}")


def from_env(raw: str, kind: Any) -> Any:
    """An environment variable's text: itself for a string key, else a TOML value
    (`4`, `0.5`, `true`, `["a", "b"]`); a key that takes either tries TOML first."""
    members = _members(kind)
    if members in ((str,), (Path,)):
        return raw
    try:
        return coerce(tomllib.loads(f"value = {raw}")["value"], kind)
    except (tomllib.TOMLDecodeError, TypeError):
        if str in members:
            return raw
        raise TypeError(f"expected {describe_type(kind)} as a TOML value, got {raw!r}") from None


def to_toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple | list):
        return "[" + ", ".join(to_toml(item) for item in value) + "]"
    if isinstance(value, str | Path):
        return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(value)


def env_name(table: str, key: str) -> str:
    return f"VOXRELAY_{table}_{key.replace('.', '_')}".upper()
