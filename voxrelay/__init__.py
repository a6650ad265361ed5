"""voxrelay: a streaming voice pipeline (ASR -> LLM -> TTS) built for the lowest time to
first audio. The stage packages live under this namespace: `voxrelay.asr`,
`voxrelay.llm`, `voxrelay.tts`, `voxrelay.ipc`, `voxrelay.pipeline`.

The Python API (docs/pipeline.md, "Python API")::

    import voxrelay

    async with voxrelay.open_pipeline() as pipeline:
        async with pipeline.session() as session:
            await session.stream(samples, 16000)  # or session.feed(chunk, rate) live
            session.end_input()
            async for event in session:
                if isinstance(event, voxrelay.TurnDone):
                    print(event.transcript, "->", event.reply_text, event.ttfa_ms)
                elif isinstance(event, voxrelay.InputEnded):
                    break

    reply = voxrelay.run_file("in.wav", "reply.wav")  # one call, blocking

Importing voxrelay loads none of it: each name below is imported on first use, so
`import voxrelay` stays cheap (no numpy, no torch) and the models load only in the
stage processes a pipeline starts.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from voxrelay.pipeline.api import (
        FileReply,
        VoicePipeline,
        open_pipeline,
        run_file,
        run_file_async,
    )
    from voxrelay.pipeline.api_events import (
        Event,
        InputEnded,
        Interrupted,
        ReplyAudio,
        ReplyAudioDone,
        ReplyDelta,
        ReplyPaused,
        ReplyResumed,
        SpeechStarted,
        Transcript,
        TurnDone,
        TurnError,
    )
    from voxrelay.pipeline.api_session import VoiceSession
    from voxrelay.pipeline.config import PipelineConfig

# Public name -> the module that defines it: PEP 562 lazy attributes, so that the import
# of numpy, soxr and the supervisor waits for the first use of the API.
_EXPORTS = {
    "open_pipeline": "voxrelay.pipeline.api",
    "run_file": "voxrelay.pipeline.api",
    "run_file_async": "voxrelay.pipeline.api",
    "FileReply": "voxrelay.pipeline.api",
    "VoicePipeline": "voxrelay.pipeline.api",
    "VoiceSession": "voxrelay.pipeline.api_session",
    "PipelineConfig": "voxrelay.pipeline.config",
    "Event": "voxrelay.pipeline.api_events",
    "SpeechStarted": "voxrelay.pipeline.api_events",
    "Transcript": "voxrelay.pipeline.api_events",
    "ReplyDelta": "voxrelay.pipeline.api_events",
    "ReplyAudio": "voxrelay.pipeline.api_events",
    "ReplyAudioDone": "voxrelay.pipeline.api_events",
    "Interrupted": "voxrelay.pipeline.api_events",
    "ReplyPaused": "voxrelay.pipeline.api_events",
    "ReplyResumed": "voxrelay.pipeline.api_events",
    "TurnError": "voxrelay.pipeline.api_events",
    "TurnDone": "voxrelay.pipeline.api_events",
    "InputEnded": "voxrelay.pipeline.api_events",
}

__all__ = [  # the same names as _EXPORTS (tests/pipeline/test_api.py checks)
    "__version__",
    "open_pipeline",
    "run_file",
    "run_file_async",
    "FileReply",
    "VoicePipeline",
    "VoiceSession",
    "PipelineConfig",
    "Event",
    "SpeechStarted",
    "Transcript",
    "ReplyDelta",
    "ReplyAudio",
    "ReplyAudioDone",
    "Interrupted",
    "ReplyPaused",
    "ReplyResumed",
    "TurnError",
    "TurnDone",
    "InputEnded",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'voxrelay' has no attribute {name!r}")
    # The module is imported once (sys.modules); a look-up after that costs a dict get.
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(__all__)
