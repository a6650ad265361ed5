"""The Python API behind `import voxrelay`: open a pipeline, talk to it in sessions.

`VoicePipeline` starts the ASR, LLM and TTS processes on the running event loop; each
`VoiceSession` on it (pipeline/api_session.py) is one conversation, fed audio and read
as an async iterator of the events in pipeline/api_events.py. `run_file` is
`voxrelay run` as one call.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from voxrelay.pipeline.api_events import InputEnded, ReplyAudio, TurnDone, TurnError
from voxrelay.pipeline.api_session import VoiceSession, check_rate
from voxrelay.pipeline.audio_io import read_clip, write_wav
from voxrelay.pipeline.config import PipelineConfig
from voxrelay.pipeline.run import Pipeline

VOICE_RATE = 22_050  # the bundled voice's (Piper joe-medium): a reply without audio


def pipeline_config(settings: PipelineConfig | Mapping[str, Any] | None) -> PipelineConfig:
    """A `PipelineConfig` from one, from a dict of its fields, or the defaults (None)."""
    if settings is None or isinstance(settings, PipelineConfig):
        return settings or PipelineConfig()
    if not isinstance(settings, Mapping):
        raise TypeError(f"settings must be a dict or a PipelineConfig, got {type(settings)}")
    known = [f.name for f in dataclasses.fields(PipelineConfig)]
    unknown = sorted(set(settings) - set(known))
    if unknown:
        raise ValueError(f"unknown pipeline setting(s) {unknown}; known: {', '.join(known)}")
    return PipelineConfig(**settings)


class VoicePipeline:
    """The three stage processes and their supervisor, on the running event loop.

    `async with VoicePipeline() as pipeline:` starts them (models load: seconds) and
    stops them all on exit. `settings`: a `PipelineConfig`, or a dict of its fields
    (`{"llm": {"max_new_tokens": 32}}`); None runs the embedded defaults.
    """

    def __init__(
        self,
        settings: PipelineConfig | Mapping[str, Any] | None = None,
        *,
        trace_path: str | Path | None = None,
    ) -> None:
        self.config = pipeline_config(settings)
        self._trace_path = Path(trace_path) if trace_path else None
        self._pipeline: Pipeline | None = None

    async def start(self) -> None:
        """Starts the stage processes and waits until each has loaded its model."""
        if self._pipeline is not None:
            raise ValueError("this pipeline is already started")
        pipeline = Pipeline(self.config, self._trace_path, transport_name="api")
        try:
            await pipeline.__aenter__()
        except BaseException:
            await pipeline.supervisor.stop()  # those that did start
            pipeline.traces.close()
            raise
        self._pipeline = pipeline

    async def close(self) -> None:
        """Closes every session and stops the stage processes."""
        pipeline, self._pipeline = self._pipeline, None
        if pipeline is not None:
            for session in list(pipeline.router.sessions.values()):
                if isinstance(session.sink, VoiceSession):
                    session.sink.close()
            await pipeline.__aexit__(None, None, None)

    async def __aenter__(self) -> VoicePipeline:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def session(
        self,
        *,
        instructions: str | None = None,
        voice_speed: float | None = None,
        output_sample_rate: int | None = None,
    ) -> VoiceSession:
        """A new conversation. `output_sample_rate`: reply audio resampled to it
        (default: the voice's own, 22050 Hz)."""
        if self._pipeline is None:
            raise ValueError("start the pipeline first: async with VoicePipeline() as pipeline")
        if output_sample_rate is not None:
            check_rate(output_sample_rate)
        if instructions is not None and not isinstance(instructions, str):
            raise TypeError(f"instructions must be a string, got {type(instructions).__name__}")
        if voice_speed is not None and not 0.5 <= voice_speed <= 2.0:
            raise ValueError(f"voice_speed must be 0.5..2.0 (1.0 = normal), got {voice_speed}")
        session = VoiceSession(self._pipeline, output_sample_rate)
        if instructions is not None:
            session.set_instructions(instructions)
        if voice_speed is not None:
            session.set_voice_speed(voice_speed)
        return session

    def stage_pids(self) -> dict[str, int]:
        """The pid of each running stage process, by stage name."""
        if self._pipeline is None:
            return {}
        supervisor = self._pipeline.supervisor
        return {name: supervisor.stage_pid(name) for name in ("asr", "llm", "tts")}


def open_pipeline(
    settings: PipelineConfig | Mapping[str, Any] | None = None,
    *,
    trace_path: str | Path | None = None,
) -> VoicePipeline:
    """`async with voxrelay.open_pipeline() as pipeline:` (see `VoicePipeline`)."""
    return VoicePipeline(settings, trace_path=trace_path)


@dataclass(frozen=True, slots=True)
class FileReply:
    """What `run_file` heard and said: one `TurnDone` per turn, the reply audio of all."""

    turns: tuple[TurnDone, ...]
    audio: bytes
    sample_rate: int
    errors: tuple[str, ...]

    @property
    def transcript(self) -> str:
        return " ".join(turn.transcript for turn in self.turns if turn.transcript)

    @property
    def reply_text(self) -> str:
        return " ".join(turn.reply_text for turn in self.turns if turn.reply_text)


async def run_file_async(
    path: str | Path,
    output: str | Path | None = None,
    *,
    settings: PipelineConfig | Mapping[str, Any] | None = None,
    realtime: bool = True,
    output_sample_rate: int | None = None,
    trace_path: str | Path | None = None,
    timeout_s: float = 120.0,
) -> FileReply:
    """`voxrelay run` as a call: the audio file at `path` (WAV, FLAC, MP3, ... or 16 kHz
    .raw) goes through a pipeline of its own (at a microphone's pace with `realtime`, then
    1 s of silence); the reply is written to `output` as a WAV when one is named."""
    clip = read_clip(Path(path))
    pcm = clip.with_silence(1.0).pcm16.reshape(-1, clip.channels)  # (samples, channels)
    async with (
        VoicePipeline(settings, trace_path=trace_path) as pipeline,
        pipeline.session(output_sample_rate=output_sample_rate) as session,
    ):

        async def feed() -> None:
            await session.stream(pcm, clip.sample_rate, realtime=realtime)
            session.end_input()

        feeder = asyncio.create_task(feed())
        try:
            reply = await _collect(session, clip.duration_s + timeout_s)
        finally:
            feeder.cancel()
    if output is not None:
        write_wav(Path(output), reply.audio, reply.sample_rate)
    return reply


async def _collect(session: VoiceSession, timeout_s: float) -> FileReply:
    """The session's turns and reply audio until its input has ended."""
    audio, errors, turns = bytearray(), [], []
    rate = session.output_sample_rate or VOICE_RATE
    try:
        async with asyncio.timeout(timeout_s):
            async for event in session:
                match event:
                    case ReplyAudio():
                        audio += event.pcm16
                        rate = event.sample_rate
                    case TurnError():
                        errors.append(event.message)
                    case TurnDone():
                        turns.append(event)
                    case InputEnded():
                        break
    except TimeoutError:
        errors.append(f"no reply within {timeout_s:.0f} s")
    return FileReply(tuple(turns), bytes(audio), rate, tuple(errors))


def run_file(
    path: str | Path,
    output: str | Path | None = None,
    *,
    settings: PipelineConfig | Mapping[str, Any] | None = None,
    realtime: bool = True,
    output_sample_rate: int | None = None,
    trace_path: str | Path | None = None,
    timeout_s: float = 120.0,
) -> FileReply:
    """`run_file_async` for code without an event loop: blocks until the reply is done."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        call = run_file_async(
            path,
            output,
            settings=settings,
            realtime=realtime,
            output_sample_rate=output_sample_rate,
            trace_path=trace_path,
            timeout_s=timeout_s,
        )
        return asyncio.run(call)
    raise ValueError("run_file() blocks; inside an event loop, await run_file_async() instead")
