"""voxrelay.toml, VOXRELAY_* variables and flags: precedence, errors that name the key and
where it came from, and the example file (pipeline/settings.py, docs/config.md)."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from voxrelay.pipeline import settings_schema
from voxrelay.pipeline.cli import build_parser
from voxrelay.pipeline.cli_flags import (
    MIC_FLAGS,
    SERVE_FLAGS,
    STAGE_FLAGS,
    phone_flags,
    phone_specs,
    settings_from_args,
)
from voxrelay.pipeline.settings import COMMANDS, FlagValue, load_settings
from voxrelay.pipeline.ws import ServerConfig

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "voxrelay.example.toml"


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "voxrelay.toml"
    path.write_text(text)
    return str(path)


def serve_args(*argv: str):
    return build_parser().parse_args(["serve", *argv])


def test_flags_beat_environment_beat_file_beat_defaults(tmp_path):
    path = write(tmp_path, "[server]\nport = 9001\nmax_sessions = 3\n[asr]\ncpu_threads = 1\n")
    environ = {"VOXRELAY_SERVER_PORT": "9002", "VOXRELAY_ASR_CPU_THREADS": "4"}
    flag = FlagValue("--port", "server", "port", 9003)
    assert load_settings("serve", [flag], config=path, environ=environ).build("server").port == 9003
    settings = load_settings("serve", config=path, environ=environ)
    server = settings.build("server")
    assert (server.port, server.max_sessions, server.idle_timeout_s) == (9002, 3, 300.0)
    assert settings.tables["server"]["port"].source == "$VOXRELAY_SERVER_PORT"
    assert settings.tables["server"]["max_sessions"].source == path
    assert settings.pipeline_config().asr == {"cpu_threads": 4}
    assert load_settings("serve", config=path, environ={}).build("server").port == 9001
    assert load_settings("serve", environ={}).build("server").port == ServerConfig().port


def test_config_path_from_the_environment_and_command_defaults(tmp_path):
    path = write(tmp_path, "[pipeline]\nbarge_in_min_words = 2\n")
    settings = load_settings("serve", environ={"VOXRELAY_CONFIG": path})
    config = settings.pipeline_config()
    assert config.barge_in_min_words == 2
    # Long-running commands keep warm standbys unless told otherwise; `run` does not.
    assert config.warm_standby
    assert not load_settings("run", environ={}).pipeline_config().warm_standby
    assert load_settings("audiosocket", environ={}).build("audiosocket").port == 9092
    flag = FlagValue("--no-warm-standby", "pipeline", "warm_standby", False)
    assert not load_settings("serve", [flag], environ={}).pipeline_config().warm_standby
    # Where voxrelay plays the reply itself, speech over it pauses it until a word is
    # heard; a server's clients may not hold audio, so `serve` and `run` cut at once.
    words = {command: load_settings(command, environ={}).pipeline_config().barge_in_min_words
             for command in ("run", "serve", "mic", "sip", "audiosocket")}  # fmt: skip
    assert words == {"run": 0, "serve": 0, "mic": 1, "sip": 1, "audiosocket": 1}
    shown = load_settings("sip", environ={}).describe({})
    assert "default of `voxrelay sip`" in next(s for s in shown.splitlines() if "barge_in_min" in s)


def test_the_cli_flags_map_to_their_keys_and_unset_flags_do_not_override(tmp_path):
    path = write(tmp_path, '[llm]\nbackend = "openai"\n[server]\nport = 9100\n')
    url = "http://10.1.2.3:8000/v1"
    args = serve_args("--config", path, "--llm-url", url, "--asr-model", "tiny.en",
                      "--llm-model", "qwen2.5", "--turn-eagerness", "high", "--turn-fallback-ms",
                      "1800", "--turn-adapt-max-ms", "0",
                      "--allow-origin", "https://a.example")  # fmt: skip
    settings = settings_from_args("serve", args, (*STAGE_FLAGS, *SERVE_FLAGS))
    config = settings.pipeline_config()
    assert config.llm == {"backend": "openai", "openai": {"base_url": url, "model": "qwen2.5"}}
    assert config.asr == {
        "model": "tiny.en", "eagerness": "high", "turn_fallback_ms": 1800, "turn_adapt_max_ms": 0
    }  # fmt: skip
    server = settings.build("server")
    assert server.port == 9100 and server.allow_origins == ("https://a.example",)
    json.dumps(config.asr | config.llm | config.tts)  # the stages get them as JSON
    # --llm-model names the model of whichever backend the layers chose.
    native = settings_from_args("serve", serve_args("--llm-model", "/models/x.gguf"), STAGE_FLAGS)
    assert native.pipeline_config().llm == {"model_path": "/models/x.gguf"}


def test_phone_and_mic_flags_set_their_tables(tmp_path):
    path = write(tmp_path, "[sip]\nmax_calls = 4\njitter_packets = 3\n")
    argv = ["sip", "--config", path, "--listen", "127.0.0.1:5070", "--dtmf", "5=hangup",
            "--allow", "10.0.0.0/8", "--max-calls", "2", "--barge-in-min-words", "0"]  # fmt: skip
    args = build_parser().parse_args(argv)
    sip = settings_from_args("sip", args, phone_specs("sip"), phone_flags(args, "sip", 5060))
    sip_config = sip.build("sip")
    assert (sip_config.host, sip_config.port, sip_config.max_calls) == ("127.0.0.1", 5070, 2)
    assert sip_config.dtmf_actions == (("5", "hangup"),) and sip_config.jitter_packets == 3
    assert sip_config.allow == ("10.0.0.0/8",)
    assert sip.pipeline_config().barge_in_min_words == 0  # the flag over the command's 1
    args = build_parser().parse_args(["audiosocket", "--listen", "127.0.0.2"])
    extra = phone_flags(args, "audiosocket", 9092)
    audiosocket = settings_from_args("audiosocket", args, phone_specs("audiosocket"), extra)
    assert audiosocket.build("audiosocket").port == 9092  # HOST alone: the command's port
    with pytest.raises(ValueError, match="--dtmf '5': use DIGIT=ACTION"):
        phone_flags(build_parser().parse_args(["sip", "--dtmf", "5"]), "sip", 5060)
    argv = ["mic", "--full-duplex", "--input-device", "3", "--barge-in-min-words", "2"]
    args = build_parser().parse_args(argv)
    args.input_device = 3  # what device_arg makes of "3" in _cmd_mic
    mic_settings = settings_from_args("mic", args, MIC_FLAGS)
    mic = mic_settings.build("mic")
    assert mic.full_duplex and mic.input_device == 3 and mic.output_device is None
    assert mic_settings.pipeline_config().barge_in_min_words == 2


def test_the_api_key_is_read_by_the_stage_from_its_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("VOXRELAY_LLM_API_KEY", "sk-do-not-print")
    monkeypatch.setenv("VOXRELAY_TOKEN", "tok-do-not-print")
    settings = load_settings("serve", [FlagValue("--llm-backend", "llm", "backend", "openai")])
    assert settings.pipeline_config().llm["openai"] == {"api_key_env": "VOXRELAY_LLM_API_KEY"}
    assert settings.build("server").token == "tok-do-not-print"
    shown = settings.describe(os.environ)
    assert "do-not-print" not in shown and 'token = "***"' in shown
    assert "$VOXRELAY_LLM_API_KEY, set (value masked)" in shown
    # Without it, the openai backend's default: $OPENAI_API_KEY.
    monkeypatch.delenv("VOXRELAY_LLM_API_KEY")
    assert "openai" not in load_settings("serve").pipeline_config().llm


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[llm]\nbacknd = "openai"\n', "voxrelay.toml: [llm] unknown key 'backnd' (known: model, "),
        ("[llm.openai]\nbase_ur = 'x'\n", "[llm.openai] unknown key 'base_ur' (known: base_url, "),
        ("[lmm]\nbackend = 'openai'\n", "voxrelay.toml: unknown table [lmm] (known: asr, llm, "),
        ("[asr]\ncpu_threads = 'four'\n", "voxrelay.toml: [asr] cpu_threads: expected an integer"),
        ("[server]\nallow_origins = 'x'\n", "[server] allow_origins: expected an array of a str"),
        ('[asr]\nmodel = "huge"\n', "voxrelay.toml: [asr] model = 'huge': ASRConfig.model must"),
        ("[server]\nport = 70000\n", "voxrelay.toml: [server] port = 70000: port must be 0..65535"),
        ("backend = 'openai'\n", "voxrelay.toml: key 'backend' is outside any table: put it"),
        ("[asr\n", "voxrelay.toml: not a readable TOML file"),
    ],
)
def test_a_bad_file_names_the_file_the_table_and_the_key(tmp_path, text, message):
    with pytest.raises(ValueError) as error:
        load_settings("serve", config=write(tmp_path, text), environ={})
    assert message in str(error.value)
    assert str(error.value).startswith(str(tmp_path))


def test_bad_environment_variables_and_flags_name_themselves(tmp_path):
    cases = [
        ({"VOXRELAY_ASR_CPU_THREAD": "3"}, [], "$VOXRELAY_ASR_CPU_THREAD: [asr] has no such key"),
        ({"VOXRELAY_SERVER_PORT": "abc"}, [], "$VOXRELAY_SERVER_PORT: expected an integer"),
        ({}, [FlagValue("--port", "server", "port", 99999)], "--port: [server] port = 99999"),
        ({}, [FlagValue("--x", "asr", "eagernes", "high")], "--x: [asr] unknown key 'eagernes'"),
        ({}, [FlagValue("--x", "mic", "full_duplex", True)], "--x: `voxrelay serve` has no [mic]"),
        ({"VOXRELAY_CONFIG": str(tmp_path / "none.toml")}, [], "none.toml: no such config file"),
    ]
    for environ, flags, message in cases:
        with pytest.raises(ValueError) as error:
            load_settings("serve", flags, environ=environ)
        assert message in str(error.value)
    with pytest.raises(ValueError, match="--llm-url is for the openai backend.*'native'"):
        settings_from_args("serve", serve_args("--llm-url", "http://h:1/v1"), STAGE_FLAGS)
    if importlib.util.find_spec("vllm") is None:
        with pytest.raises(ValueError, match=r"needs vLLM, which is not installed.*\[vllm\]"):
            settings_from_args("serve", serve_args("--llm-backend", "vllm"), STAGE_FLAGS)


def test_environment_values_are_typed_like_toml_and_empty_ones_are_unset():
    environ = {
        "VOXRELAY_SERVER_ALLOW_ORIGINS": '["https://a.example", "https://b.example"]',
        "VOXRELAY_SERVER_IDLE_TIMEOUT_S": "12",  # an integer where a number goes: 12.0
        "VOXRELAY_PIPELINE_BARGE_IN": "false",
        "VOXRELAY_LLM_OPENAI_BASE_URL": "http://10.0.0.9:8000/v1",  # a string stays itself
        "VOXRELAY_LLM_BACKEND": "openai",
        "VOXRELAY_SERVER_MAX_SESSIONS": "",
        "VOXRELAY_HOME": "/elsewhere",  # not a table's prefix: not a setting
    }
    settings = load_settings("serve", environ=environ)
    server = settings.build("server")
    assert server.allow_origins == ("https://a.example", "https://b.example")
    assert server.idle_timeout_s == 12.0 and server.max_sessions == 16
    assert settings.pipeline_config().barge_in is False
    assert settings.pipeline_config().llm["openai"]["base_url"] == "http://10.0.0.9:8000/v1"


def test_a_field_added_to_a_config_dataclass_is_a_key_with_no_other_code(tmp_path, monkeypatch):
    @dataclasses.dataclass(frozen=True, slots=True)
    class LaterServerConfig(ServerConfig):
        greeting: str = "hello"
        greeting_delay_ms: int = 0

    monkeypatch.setitem(settings_schema.TABLES, "server", lambda: LaterServerConfig)
    path = write(tmp_path, '[server]\ngreeting = "welcome"\n')
    environ = {"VOXRELAY_SERVER_GREETING_DELAY_MS": "250"}
    settings = load_settings("serve", config=path, environ=environ)
    server = settings.build("server")
    assert (server.greeting, server.greeting_delay_ms) == ("welcome", 250)
    assert 'greeting = "welcome"  # ' in settings.describe({})
    with pytest.raises(ValueError, match="greeting_delay_ms: expected an integer"):
        load_settings("serve", config=write(tmp_path, "[server]\ngreeting_delay_ms = 'x'\n"))


def test_every_field_of_every_table_is_a_key():
    for table in settings_schema.TABLES:
        if table == "llm_serve":
            continue  # imports torch; its three fields are checked through llm-serve's tests
        keys = settings_schema.table_keys(table)
        cls = settings_schema.TABLES[table]()
        for field in dataclasses.fields(cls):
            nested = [key for key in keys if key.startswith(field.name + ".")]
            assert field.name in keys or nested or field.name in ("asr", "llm", "tts"), field


@pytest.mark.parametrize("command", list(COMMANDS))
def test_the_example_file_loads_for_every_command(command):
    text = EXAMPLE.read_text()
    data = tomllib.loads(text)
    settings = load_settings(command, config=str(EXAMPLE), environ={})
    for table in COMMANDS[command]:
        for key, setting in settings.tables[table].items():
            if setting.source == str(EXAMPLE):
                head, _, sub = key.partition(".")
                value = data[table][head][sub] if sub else data[table][key]
                if isinstance(value, list):  # arrays are tuples in the frozen configs
                    value = tuple(tuple(v) if isinstance(v, list) else v for v in value)
                assert setting.value == value, (table, key)
    # `config show` prints TOML that reads back to the same merged settings.
    shown = tomllib.loads(settings.describe({}))
    assert shown.get("llm", {}).get("backend") == "openai"


def test_docs_config_shows_the_example_file_as_it_is():
    page = (ROOT / "docs" / "config.md").read_text()
    block = page.split("## Example", 1)[1].split("```toml\n", 1)[1].split("```", 1)[0]
    assert block == EXAMPLE.read_text()


def test_the_cli_refuses_a_bad_file_before_any_stage_starts(tmp_path):
    bad = write(tmp_path, '[llm]\nbackend = "opneai"\n')
    done = subprocess.run(
        [sys.executable, "-m", "voxrelay.pipeline.cli", "serve", "--config", bad, "--port", "0"],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
        env={**os.environ, "VOXRELAY_LOG_DIR": str(tmp_path / "logs")},
    )  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert f"{bad}: [llm] backend = 'opneai': backend must be one of" in done.stderr
    assert not (tmp_path / "logs").exists()  # no stage process was spawned
    shown = subprocess.run(
        [sys.executable, "-m", "voxrelay.pipeline.cli", "config", "show", "--config",
         str(EXAMPLE), "--llm-url", "http://10.0.0.5:8000/v1", "--for", "sip"],
        capture_output=True, text=True, timeout=60, cwd=ROOT, check=True,
        env={**os.environ, "OPENAI_API_KEY": "sk-never-shown"},
    ).stdout  # fmt: skip
    assert 'openai.base_url = "http://10.0.0.5:8000/v1"  # --llm-url' in shown
    assert f'backend = "openai"  # {EXAMPLE}' in shown
    assert "[sip]" in shown and "sk-never-shown" not in shown
