"""One voice turn from a file: the body of `voxrelay run` and `make demo`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from voxrelay.pipeline.audio_io import Clip, OutputResampler, write_wav
from voxrelay.pipeline.config import PipelineConfig
from voxrelay.pipeline.run import ClipResult, Pipeline
from voxrelay.pipeline.trace import TraceSink, format_trace


async def run_once(
    clip: Clip,
    output: Path,
    mode: str,
    trace_path: Path | None,
    pipeline_config: PipelineConfig | None = None,
    output_rate: int | None = None,
) -> dict[str, Any]:
    if mode in ("sequential", "naive"):
        if pipeline_config is not None and pipeline_config.greeting:
            raise ValueError(f"--mode {mode} answers one turn: a greeting needs --mode streaming")
        from voxrelay.pipeline.naive import yardstick

        result = yardstick(mode).run_clip(clip)
        traces = TraceSink(trace_path)
        for trace in result.traces:
            traces.write(trace)
        traces.close()
    else:
        config = pipeline_config or PipelineConfig()
        async with Pipeline(config, trace_path) as pipeline:
            result = await pipeline.run_clip(clip)
    return report(result, output, output_rate)


def report(result: ClipResult, output: Path, output_rate: int | None) -> dict[str, Any]:
    for error in result.errors:
        print(f"error: {error}", file=sys.stderr)
    if not result.traces:
        print("no speech was recognised in the input", file=sys.stderr)
        return {"error": "no turn"}
    rate = output_rate or result.sample_rate
    audio = OutputResampler(result.sample_rate, rate).convert(result.audio, last=True)
    write_wav(output, audio, rate)
    row: dict[str, Any] = {}
    for trace in result.traces:
        row = trace.to_dict()
        if row["opening"]:  # the agent's greeting: no words of the user's, no TTFA
            print(f"greeting:   {row['reply_text']}")
        else:
            print(f"transcript: {row['transcript']}")
            print(f"reply:      {row['reply_text']}")
            print(f"trace:      {format_trace(row)}")
        if row["error"]:
            print(f"error:      {row['error']}")
    print(f"wrote {output} ({len(audio) / 2 / rate:.2f} s at {rate} Hz)")
    if row["opening"]:  # the greeting alone
        print("no speech was recognised in the input", file=sys.stderr)
        return {"error": "no turn"}
    return row
