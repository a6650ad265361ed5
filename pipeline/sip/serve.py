"""Bodies of `voxrelay sip` and `voxrelay audiosocket`: a Pipeline, a server, until a signal."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from voxrelay.pipeline.config import PipelineConfig
from voxrelay.pipeline.run import Pipeline
from voxrelay.pipeline.sip.audiosocket import AudioSocketServer
from voxrelay.pipeline.sip.config import SipConfig
from voxrelay.pipeline.sip.server import SipServer


async def _until_signal() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()


async def serve_sip(config: SipConfig, pipeline_config: PipelineConfig, trace: Path | None) -> None:
    async with Pipeline(pipeline_config, trace, transport_name="sip") as pipeline:
        server = SipServer(pipeline, config)
        host, port = await server.start()
        print(f"voxrelay: answering SIP calls on udp:{host}:{port}", flush=True)
        try:
            await _until_signal()
        finally:
            server.stop()


async def serve_audiosocket(
    config: SipConfig, listen: tuple[str, int], pipeline_config: PipelineConfig, trace: Path | None
) -> None:
    async with Pipeline(pipeline_config, trace, transport_name="audiosocket") as pipeline:
        server = AudioSocketServer(pipeline, config, listen)
        host, port = await server.start()
        print(f"voxrelay: AudioSocket on tcp:{host}:{port}", flush=True)
        try:
            await _until_signal()
        finally:
            await server.stop()
