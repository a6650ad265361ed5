"""`voxrelay` command line."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from pathlib import Path

from voxrelay.pipeline.cli_flags import (
    LLM_SERVE_FLAGS,
    MIC_FLAGS,
    SERVE_FLAGS,
    STAGE_FLAGS,
    add_settings_flags,
    phone_flags,
    phone_specs,
    settings_from_args,
)
from voxrelay.pipeline.config import MODES
from voxrelay.pipeline.models import ModelError
from voxrelay.pipeline.openmp import prefer_passive_openmp
from voxrelay.pipeline.settings import COMMANDS

# Before any OpenMP runtime loads (stage libraries are imported lazily below): the
# sequential and naive modes run Whisper, the LLM and Piper in this very process.
prefer_passive_openmp()


def _cmd_models(args: argparse.Namespace) -> int:
    from voxrelay.pipeline import models

    if args.action == "list":
        print(f"cache: {models.voxrelay_home()}")
        for asset in models.load_manifest().values():
            state = "present" if asset.is_present() else "missing"
            default = "default" if asset.default else "optional"
            print(f"  {asset.name:10} {asset.kind:5} {default:8} {state:8} {asset.licence}")
        return 0
    for asset in models.select(args.names, args.all):
        path = models.fetch(asset, force=args.force)
        print(f"{asset.name}: {path}")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from voxrelay.pipeline.audio_io import read_clip
    from voxrelay.pipeline.demo import run_once

    specs = (*STAGE_FLAGS, ("transport", "pipeline", "transport"))
    pipeline_config = settings_from_args("run", args, specs).pipeline_config()
    clip = read_clip(Path(args.input))
    trace = Path(args.trace) if args.trace else None
    row = asyncio.run(
        run_once(clip, Path(args.output), args.mode, trace, pipeline_config, args.output_rate)
    )
    if args.json:
        print(json.dumps(row))
    return 0 if not row.get("error") else 1


def _cmd_serve(args: argparse.Namespace) -> int:
    from voxrelay.pipeline.ws import serve_forever

    settings = settings_from_args("serve", args, (*STAGE_FLAGS, *SERVE_FLAGS))
    trace = Path(args.trace) if args.trace else None
    asyncio.run(serve_forever(settings.build("server"), settings.pipeline_config(), trace))
    return 0


def _cmd_sip(args: argparse.Namespace) -> int:
    from voxrelay.pipeline.sip.config import DEFAULT_PORT
    from voxrelay.pipeline.sip.serve import serve_sip

    extra = phone_flags(args, "sip", DEFAULT_PORT)
    settings = settings_from_args("sip", args, phone_specs("sip"), extra)
    trace = Path(args.trace) if args.trace else None
    asyncio.run(serve_sip(settings.build("sip"), settings.pipeline_config(), trace))
    return 0


def _cmd_audiosocket(args: argparse.Namespace) -> int:
    from voxrelay.pipeline.sip.config import DEFAULT_AUDIOSOCKET_PORT
    from voxrelay.pipeline.sip.serve import serve_audiosocket

    extra = phone_flags(args, "audiosocket", DEFAULT_AUDIOSOCKET_PORT)
    settings = settings_from_args("audiosocket", args, phone_specs("audiosocket"), extra)
    config = settings.build("audiosocket")
    trace = Path(args.trace) if args.trace else None
    listen = (config.host, config.port)
    asyncio.run(serve_audiosocket(config, listen, settings.pipeline_config(), trace))
    return 0


def _cmd_llm_serve(args: argparse.Namespace) -> int:
    from voxrelay.llm.serve import serve_forever

    # The native engine always: [llm] backend and its sub-tables are the pipeline's.
    settings = settings_from_args("llm-serve", args, LLM_SERVE_FLAGS)
    asyncio.run(serve_forever(settings.build("llm"), settings.build("llm_serve")))
    return 0


def _cmd_mic(args: argparse.Namespace) -> int:
    from voxrelay.pipeline.mic import device_arg, run_mic

    args.input_device = device_arg(args.input_device)
    args.output_device = device_arg(args.output_device)
    settings = settings_from_args("mic", args, (*STAGE_FLAGS, *MIC_FLAGS))
    trace = Path(args.trace) if args.trace else None
    asyncio.run(run_mic(settings.build("mic"), settings.pipeline_config(), trace))
    return 0


def _cmd_config(args: argparse.Namespace) -> int:
    specs = STAGE_FLAGS if args.for_command != "llm-serve" else ()
    print(settings_from_args(args.for_command, args, specs).describe(os.environ), end="")
    return 0


def _cmd_transcribe(args: argparse.Namespace) -> int:
    from voxrelay.asr.config import ASRConfig
    from voxrelay.asr.transcribe import transcribe_file

    config = ASRConfig(model=args.model, partial_interval_ms=0)
    for path in args.files:
        text = transcribe_file(Path(path), config)
        print(json.dumps({"file": path, "text": text}) if args.json else f"{path}: {text}")
    return 0


def _add_barge_in_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--barge-in-min-words",
        type=int,
        metavar="N",
        help="speech over a reply pauses it, and cuts it only once the ASR has heard N "
        "words, a backchannel's ('mm-hmm', 'okay') not counted; otherwise the reply "
        "resumes, and a backchannel alone gets no reply (0: any speech cuts at once; "
        "default 1 for mic, sip and audiosocket, which play the reply themselves, 0 for serve)",
    )


def _add_standby_flag(parser: argparse.ArgumentParser) -> None:
    # Long-running commands keep a spare process per stage: a crash costs the turn in
    # flight and ~0.3 s, not a cold start (docs/pipeline.md, Recovery).
    parser.add_argument(
        "--warm-standby",
        action=argparse.BooleanOptionalAction,
        help="keep a loaded spare process per stage for fast recovery (one model copy each; "
        "on by default)",
    )


def _cmd_report(args: argparse.Namespace) -> int:
    from voxrelay.pipeline.report import load_rows, write_report

    rows = load_rows(Path(args.traces))
    if not rows:
        raise ValueError(f"{args.traces} holds no trace records")
    page, png = write_report(rows, Path(args.output))
    print(f"wrote {page} and {png} ({len(rows)} utterances)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="voxrelay",
        description="Streaming voice pipeline: speech in -> ASR -> LLM -> TTS -> speech out.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log stage restarts etc.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="one voice turn from a WAV file to a reply WAV")
    run.add_argument("--input", required=True, help="speech WAV (PCM16, any rate) or 16 kHz .raw")
    run.add_argument("--output", required=True, help="where to write the reply WAV")
    run.add_argument("--trace", help="append the utterance's latency trace to this JSONL file")
    run.add_argument(
        "--mode",
        choices=MODES,
        default="streaming",
        help="streaming pipeline (default); or a yardstick, one stage after another: "
        "sequential (voxrelay's engines) or naive (stock runtimes: faster-whisper "
        "transcribe, HF transformers generate, Piper)",
    )
    run.add_argument(
        "--transport",
        choices=("shm", "zmq"),
        help="stage-to-stage links: shared-memory rings (default) or zmq over TCP",
    )
    run.add_argument(
        "--output-rate",
        type=int,
        default=None,
        help="reply sample rate (default: the voice's own, 22050 Hz)",
    )
    run.add_argument("--json", action="store_true", help="print the trace as one JSON line")
    add_settings_flags(run)
    run.set_defaults(func=_cmd_run)

    serve = sub.add_parser("serve", help="WebSocket voice endpoint and browser page")
    # Flags left unset (None) leave the key to the environment, the file or the default.
    serve.add_argument("--host", help="default: 127.0.0.1")
    serve.add_argument("--port", type=int, help="default: 8765; 0: any free port")
    serve.add_argument("--token", help="require this bearer token (default: $VOXRELAY_TOKEN)")
    serve.add_argument(
        "--allow-origin",
        action="append",
        metavar="ORIGIN",
        help="browser origin allowed besides the server's own (repeatable; '*' for any)",
    )
    serve.add_argument("--max-sessions", type=int, help="default: 16")
    serve.add_argument("--max-message-bytes", type=int, help="default: 1048576")
    serve.add_argument("--idle-timeout", type=float, metavar="SECONDS", help="default: 300")
    serve.add_argument("--max-turn-audio", type=float, metavar="SECONDS", help="default: 60")
    serve.add_argument("--trace", help="append one latency trace per utterance to this JSONL")
    serve.add_argument("--transport", choices=("shm", "zmq"), help="default: shm")
    _add_barge_in_flag(serve)
    _add_standby_flag(serve)
    add_settings_flags(serve)
    serve.set_defaults(func=_cmd_serve)

    llm_serve = sub.add_parser(
        "llm-serve", help="the LLM engine behind an OpenAI-compatible HTTP endpoint"
    )
    llm_serve.add_argument("--host", help="default: 127.0.0.1")
    llm_serve.add_argument("--port", type=int, help="default: 8000; 0: any free port")
    llm_serve.add_argument("--model-path", help="GGUF file (default: the bundled SmolLM2)")
    llm_serve.add_argument("--served-model-name", help="default: smollm2")
    llm_serve.add_argument("--threads", type=int, help="CPU threads")
    llm_serve.add_argument(
        "--decode-dtype",
        choices=("auto", "gguf", "same", "float32", "bfloat16", "float16"),
        help="weights of decode steps and prompt tails (auto, the default: the GGUF blocks on "
        "a CPU)",
    )
    llm_serve.add_argument("--temperature", type=float, help="default 0: greedy")
    llm_serve.add_argument("--max-num-seqs", type=int, help="requests per batch (default: 8)")
    add_settings_flags(llm_serve, stages=False)
    llm_serve.set_defaults(func=_cmd_llm_serve)

    mic = sub.add_parser("mic", help="talk through the local microphone and speakers")
    mic.add_argument("--input-device", help="PortAudio input index or name (default: system's)")
    mic.add_argument("--output-device", help="PortAudio output index or name (default: system's)")
    mic.add_argument(
        "--full-duplex",
        action="store_true",
        default=None,
        help="keep the microphone open during replies (headset; speech interrupts the reply)",
    )
    mic.add_argument("--trace", help="append one latency trace per utterance to this JSONL")
    _add_barge_in_flag(mic)
    _add_standby_flag(mic)
    add_settings_flags(mic)
    mic.set_defaults(func=_cmd_mic)

    for name, default, what in (
        ("sip", "127.0.0.1:5060", "answer SIP calls (UDP, G.711 RTP, RFC 4733 DTMF)"),
        ("audiosocket", "127.0.0.1:9092", "serve Asterisk AudioSocket connections (TCP)"),
    ):
        phone = sub.add_parser(name, help=what)
        phone.add_argument("--listen", metavar="HOST:PORT", help=f"default: {default}")
        phone.add_argument(
            "--allow",
            action="append",
            metavar="CIDR",
            help="source networks served (repeatable; default: loopback only)",
        )
        phone.add_argument("--max-calls", type=int, help="default: 16")
        phone.add_argument(
            "--dtmf",
            action="append",
            metavar="DIGIT=ACTION",
            help="what a key does: hangup or transfer (default: '#=hangup', '0=transfer')",
        )
        phone.add_argument("--transfer-to", metavar="URI", help="REFER target of 'transfer'")
        phone.add_argument("--trace", help="append one latency trace per utterance to this JSONL")
        _add_barge_in_flag(phone)
        _add_standby_flag(phone)
        add_settings_flags(phone)
        phone.set_defaults(func=_cmd_sip if name == "sip" else _cmd_audiosocket)

    config = sub.add_parser("config", help="print the merged settings and where each came from")
    config.add_argument("action", choices=("show",))
    config.add_argument(
        "--for",
        dest="for_command",
        choices=COMMANDS,
        default="serve",
        help="the command whose settings to show (default: serve)",
    )
    add_settings_flags(config)
    config.set_defaults(func=_cmd_config)

    models = sub.add_parser("models", help="provision or list the bundled models")
    models.add_argument("action", choices=("fetch", "list"))
    models.add_argument("names", nargs="*", help="assets to fetch (default: the default set)")
    models.add_argument("--all", action="store_true", help="fetch every asset, optional ones too")
    models.add_argument("--force", action="store_true", help="download and unpack again")
    models.set_defaults(func=_cmd_models)

    transcribe = sub.add_parser("transcribe", help="print the final transcript of audio files")
    transcribe.add_argument("files", nargs="+")
    # One file at a time: the more accurate model (docs/asr.md, "One model for one session").
    transcribe.add_argument("--model", choices=("tiny.en", "base"), default="base")
    transcribe.add_argument("--json", action="store_true")
    transcribe.set_defaults(func=_cmd_transcribe)

    report = sub.add_parser("report", help="HTML + PNG latency report of a traces.jsonl")
    report.add_argument("traces", help="JSONL written by --trace")
    report.add_argument(
        "-o", "--output", default="report.html", help="HTML page; the PNG goes next to it"
    )
    report.set_defaults(func=_cmd_report)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.func(args))
    except (ModelError, ValueError) as exc:
        print(f"voxrelay: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
