"""One run's settings from `voxrelay.toml`, the environment and the command line.

Precedence, highest first: flags > environment variables > the config file > defaults
(the command's own, such as warm standbys for the long-running commands, then each
dataclass's). A table is one frozen config dataclass and its keys are that class's
fields: a field added later is a key, an environment variable (`VOXRELAY_<TABLE>_<KEY>`)
and a `config show` line with no code here. A value's type is checked where it is read,
so the error names its file, variable or flag; the merged tables are then built into
their dataclasses, whose own checks run before any stage process starts. The stage
tables reach the stage processes as PipelineConfig's asr, llm and tts settings dicts.
The keys and their types: pipeline/settings_schema.py; the format: docs/config.md.
"""

from __future__ import annotations

import importlib.util
import os
import re
import tomllib
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from voxrelay.pipeline.config import PipelineConfig
from voxrelay.pipeline.models import ModelError, asset_path
from voxrelay.pipeline.settings_schema import (
    ASSET_KEYS,
    NO_DEFAULT,
    STAGES,
    TABLES,
    coerce,
    env_name,
    from_env,
    table_keys,
    to_toml,
)

COMMANDS: dict[str, tuple[str, ...]] = {
    "run": (*STAGES, "pipeline"),
    "serve": (*STAGES, "pipeline", "server"),
    "mic": (*STAGES, "pipeline", "mic"),
    "sip": (*STAGES, "pipeline", "sip"),
    "audiosocket": (*STAGES, "pipeline", "audiosocket"),
    "llm-serve": ("llm", "llm_serve"),
}
_STANDBY = {("pipeline", "warm_standby"): True}  # a crash costs ~0.3 s, not a cold start
# One conversation: the ASR's threads spin ~1 ms after their work (ASRConfig.openmp_spin).
ONE_USER_OPENMP_SPIN = 100_000
_ONE_USER = {("asr", "openmp_spin"): ONE_USER_OPENMP_SPIN}
# Where voxrelay itself plays the reply (a call's RTP, the mic's speaker), speech over it
# pauses it and a word cuts it: a cough or an "mm-hmm" costs a held breath, not the reply
# (docs/pipeline.md). `serve` keeps 0: a /v1/voice client that ignores the pause events
# would hear the reply on, and Realtime clients expect OpenAI's cut at speech start.
_HELD_BARGE_IN = {("pipeline", "barge_in_min_words"): 1}
COMMAND_DEFAULTS: dict[str, dict[tuple[str, str], Any]] = {
    "run": _ONE_USER, "mic": {**_STANDBY, **_ONE_USER, **_HELD_BARGE_IN},
    "serve": _STANDBY, "sip": {**_STANDBY, **_HELD_BARGE_IN},
    "audiosocket": {**_STANDBY, **_HELD_BARGE_IN,
                    ("audiosocket", "port"): 9092},  # sip DEFAULT_AUDIOSOCKET_PORT
}  # fmt: skip
SECRETS = {("server", "token")}
API_KEY_VARS = ("VOXRELAY_LLM_API_KEY", "OPENAI_API_KEY")  # first one set wins
ENV_ALIASES = {"VOXRELAY_TOKEN": ("server", "token")}  # older name; the generated one wins


@dataclass(frozen=True, slots=True)
class Setting:
    value: Any
    source: str  # "default", "default of `voxrelay serve`", a file, "$VARIABLE" or "--flag"


@dataclass(frozen=True, slots=True)
class FlagValue:
    flag: str  # as typed: "--port"
    table: str
    key: str
    value: Any


class Settings:
    """The merged tables of one command: every key set somewhere above the dataclass
    defaults, with where it came from."""

    def __init__(self, command: str, tables: dict[str, dict[str, Setting]], file: str | None):
        self.command = command
        self.tables = tables
        self.file = file

    def values(self, table: str) -> dict[str, Any]:
        """The table's set keys, sub-tables as nested dicts (a stage's settings dict)."""
        nested: dict[str, Any] = {}
        for key, setting in self.tables[table].items():
            head, _, sub = key.partition(".")
            if sub:
                nested.setdefault(head, {})[sub] = setting.value
            else:
                nested[key] = setting.value
        return nested

    def build(self, table: str, checking: bool = False) -> Any:
        """The table's dataclass; ValueError names the keys and where they came from.
        `checking`: only the check before the stages start (a default asset may be absent)."""
        values = self.values(table)
        try:
            if table in ASSET_KEYS:  # as the stage worker does (llm_config, tts/worker.py)
                key, default, field, inside = ASSET_KEYS[table]
                name = values.pop(key, default)
                if field not in values:
                    values[field] = str(asset_path(name) / inside)
            cls = TABLES[table]()
            hints = typing.get_type_hints(cls)
            for name, value in values.items():
                if isinstance(value, dict):  # a sub-table: its own dataclass
                    values[name] = hints[name](**value)
                elif hints[name] is Path:
                    values[name] = Path(value)
            return cls(**values)
        except ModelError as exc:
            if checking and ASSET_KEYS[table][0] not in self.tables[table]:  # asset tables only
                return None  # a default model not fetched yet: its stage says so at start
            raise ValueError(self._blame(table, str(exc))) from None
        except (ValueError, TypeError) as exc:
            raise ValueError(self._blame(table, str(exc))) from None

    def _blame(self, table: str, message: str) -> str:
        """Where the keys a failed check names came from (all of the table's if none)."""
        words = set(re.findall(r"\w+", message))
        named = [(k, s) for k, s in self.tables[table].items() if k.split(".")[-1] in words]
        found = named or list(self.tables[table].items())
        where = "; ".join(f"{s.source}: [{table}] {k} = {s.value!r}" for k, s in found)
        return f"{where or f'[{table}]'}: {message}"

    def pipeline_config(self) -> PipelineConfig:
        asr, llm, tts = (self.values(stage) for stage in STAGES)
        try:
            return PipelineConfig(**self.values("pipeline"), asr=asr, llm=llm, tts=tts)
        except (ValueError, TypeError) as exc:
            raise ValueError(self._blame("pipeline", str(exc))) from None

    def describe(self, environ: Mapping[str, str]) -> str:
        """Every key of every table as TOML, each with its source; secrets masked."""
        lines = [f"# voxrelay {self.command}: flags > environment > "
                 f"{self.file or '(no config file)'} > defaults"]  # fmt: skip
        for table in COMMANDS[self.command]:
            lines.append(f"\n[{table}]")
            for key, (_, default) in table_keys(table).items():
                setting = self.tables[table].get(key, Setting(default, "default"))
                if (table, key) in SECRETS and setting.value is not None:
                    setting = Setting("***", setting.source)
                if setting.value is NO_DEFAULT:
                    lines.append(f"# {key}: from {ASSET_KEYS[table][0]} ({setting.source})")
                elif setting.value is None:
                    lines.append(f"# {key} is not set ({setting.source})")
                else:
                    lines.append(f"{key} = {to_toml(setting.value)}  # {setting.source}")
            if table == "llm":
                name = self.values("llm").get("openai", {}).get("api_key_env", "OPENAI_API_KEY")
                state = "set (value masked)" if environ.get(name) else "not set"
                lines.append(f"# API key of the openai backend: ${name}, {state}")
        return "\n".join(lines) + "\n"


def read_file(path: str, tables: Sequence[str]) -> dict[tuple[str, str], Setting]:
    try:
        data = tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ValueError(f"{path}: no such config file") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{path}: not a readable TOML file: {exc}") from None
    found: dict[tuple[str, str], Setting] = {}
    for table, body in data.items():
        if not isinstance(body, dict):
            owners = [f"[{t}]" for t in tables if table in table_keys(t)] or ["its table"]
            raise ValueError(f"{path}: key {table!r} is outside any table: put it under "
                             f"{' or '.join(owners)}")  # fmt: skip
        if table not in TABLES:
            raise ValueError(f"{path}: unknown table [{table}] (known: {', '.join(TABLES)})")
        if table in tables:  # the other tables are checked by the commands that use them
            _read_table(path, table, body, "", table_keys(table), found)
    return found


Found = dict[tuple[str, str], Setting]  # (table, key) -> setting, one layer


def _read_table(
    path: str, table: str, body: dict[str, Any], prefix: str, keys: dict[str, Any], found: Found
) -> None:
    here = f"[{table}{'.' + prefix.rstrip('.') if prefix else ''}]"
    for name, value in body.items():
        key = prefix + name
        if isinstance(value, dict) and any(k.startswith(key + ".") for k in keys):
            _read_table(path, table, value, key + ".", keys, found)
            continue
        if key not in keys:
            known = [k.removeprefix(prefix) for k in keys if k.startswith(prefix)]
            raise ValueError(f"{path}: {here} unknown key {name!r} (known: {', '.join(known)})")
        try:
            found[(table, key)] = Setting(coerce(value, keys[key][0]), path)
        except TypeError as exc:
            raise ValueError(f"{path}: {here} {name}: {exc}") from None


def read_env(environ: Mapping[str, str], tables: Sequence[str]) -> dict[tuple[str, str], Setting]:
    found: dict[tuple[str, str], Setting] = {}
    by_name = {env_name(t, k): (t, k) for t in tables for k in table_keys(t)}
    prefixes = sorted(TABLES, key=len, reverse=True)  # VOXRELAY_LLM_SERVE_ is llm_serve's
    for var, raw in sorted(environ.items()):
        if not raw:
            continue  # `VAR= voxrelay ...` unsets it, as in the shell
        where = by_name.get(var) or ENV_ALIASES.get(var)
        if where is None:
            table = next((t for t in prefixes if var.startswith(env_name(t, ""))), None)
            if table in tables and var not in API_KEY_VARS:
                known = ", ".join(k for t, k in by_name.values() if t == table)
                raise ValueError(f"${var}: [{table}] has no such key (known: {known})")
            continue
        if where[0] not in tables or (var in ENV_ALIASES and where in found):
            continue
        try:
            found[where] = Setting(from_env(raw, table_keys(where[0])[where[1]][0]), f"${var}")
        except TypeError as exc:
            raise ValueError(f"${var}: {exc}") from None
    return found


def load_settings(command: str, flags: Sequence[FlagValue] = (), *, config: str | None = None,
                  environ: Mapping[str, str] | None = None, llm_model: str | None = None,
                  ) -> Settings:  # fmt: skip
    """The merged settings of `voxrelay COMMAND`, every table built once to check it.
    `config`: the --config path (else $VOXRELAY_CONFIG, else no file); `llm_model`: the
    --llm-model value, the model of whichever backend the other layers chose."""
    environ = os.environ if environ is None else environ
    tables = COMMANDS[command]
    merged = {key: Setting(value, f"default of `voxrelay {command}`")
              for key, value in COMMAND_DEFAULTS.get(command, {}).items()}  # fmt: skip
    path = config or environ.get("VOXRELAY_CONFIG") or None
    if path is not None:
        merged |= read_file(path, tables)
    merged |= read_env(environ, tables)
    for flag in flags:
        if flag.table not in tables:
            raise ValueError(f"{flag.flag}: `voxrelay {command}` has no [{flag.table}] settings")
        keys = table_keys(flag.table)
        if flag.key not in keys:
            known = ", ".join(keys)
            raise ValueError(
                f"{flag.flag}: [{flag.table}] unknown key {flag.key!r} (known: {known})"
            )
        try:
            merged[(flag.table, flag.key)] = Setting(
                coerce(flag.value, keys[flag.key][0]), flag.flag
            )
        except TypeError as exc:
            raise ValueError(f"{flag.flag}: {exc}") from None
    if "llm" in tables:
        _llm_flags(merged, environ, llm_model, stages="pipeline" in tables)
    settings = Settings(command, {t: {} for t in tables}, path)
    for (table, key), setting in merged.items():
        settings.tables[table][key] = setting
    for table in tables:
        if table != "pipeline":
            settings.build(table, checking=True)
    if "pipeline" in tables:
        settings.pipeline_config()
    return settings


def _llm_flags(merged: dict[tuple[str, str], Setting], environ: Mapping[str, str],
               llm_model: str | None, stages: bool) -> None:  # fmt: skip
    backend = merged.get(("llm", "backend"), Setting("native", "default"))
    url = merged.get(("llm", "openai.base_url"))
    if url is not None and url.source == "--llm-url" and backend.value != "openai":
        raise ValueError(
            f"--llm-url is for the openai backend, but [llm] backend is {backend.value!r} "
            f"({backend.source}): add --llm-backend openai"
        )
    if llm_model is not None:
        key = {"openai": "openai.model", "vllm": "vllm.model"}.get(backend.value, "model_path")
        merged[("llm", key)] = Setting(llm_model, "--llm-model")
    if ("llm", "openai.api_key_env") not in merged and environ.get(API_KEY_VARS[0]):
        # The stage process reads the key from its environment: no value in any config.
        merged[("llm", "openai.api_key_env")] = Setting(API_KEY_VARS[0], f"${API_KEY_VARS[0]} set")
    if stages and backend.value == "vllm" and importlib.util.find_spec("vllm") is None:
        raise ValueError(f"[llm] backend 'vllm' ({backend.source}) needs vLLM, which is not "
                         "installed: pip install 'voxrelay[vllm]' on a CUDA machine")  # fmt: skip
