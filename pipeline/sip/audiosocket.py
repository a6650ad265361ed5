"""`voxrelay audiosocket`: Asterisk AudioSocket over TCP, the same media port interface.

Asterisk's `AudioSocket(uuid,host:port)` connects to us and exchanges type-length-value
frames: 1 byte kind, 2 bytes big-endian length, payload. The first frame names the
call (a 16-byte UUID); audio is 8 kHz mono PCM16 little-endian both ways. We send
reply audio in 20 ms frames at real-time pace, as Asterisk plays frames as they come.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import struct
import uuid
from collections import deque
from collections.abc import Callable

from voxrelay.pipeline.sip.bridge import CallBridge, SessionHost
from voxrelay.pipeline.sip.config import SipConfig
from voxrelay.pipeline.sip.playout import PacedPort, Pacer, raise_thread_priority

log = logging.getLogger("voxrelay.audiosocket")
FRAME_HEADER = struct.Struct("!BH")
FIRST_FRAME_TIMEOUT_S = 5.0


class Kind(enum.IntEnum):
    HANGUP = 0x00
    UUID = 0x01
    DTMF = 0x03
    AUDIO = 0x10
    ERROR = 0xFF


def frame(kind: Kind, payload: bytes = b"") -> bytes:
    if len(payload) > 0xFFFF:
        raise ValueError(f"AudioSocket payload of {len(payload)} bytes exceeds 65535")
    return FRAME_HEADER.pack(kind, len(payload)) + payload


async def read_frame(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """(kind, payload); IncompleteReadError when the peer closes."""
    kind, length = FRAME_HEADER.unpack(await reader.readexactly(FRAME_HEADER.size))
    return kind, await reader.readexactly(length)


class AudioSocketPort(PacedPort):
    """One AudioSocket connection as a media port."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer
        self.pacer = Pacer(self._send_frame)
        self.ended = asyncio.Event()
        self.hangup_reason = ""

    def _send_frame(self, pcm16: bytes, tick: int, first: bool) -> None:
        if not self._writer.is_closing():
            self._writer.write(frame(Kind.AUDIO, pcm16))

    def hangup(self, reason: str, after_playback: bool) -> None:
        if after_playback and self.pacer.queued_ms > 0:
            self.pacer.on_drained = lambda: self.hangup(reason, after_playback=False)
            return
        self.hangup_reason = reason
        if not self._writer.is_closing():
            self._writer.write(frame(Kind.HANGUP))
        self.ended.set()

    def transfer(self, target: str) -> bool:
        return False  # AudioSocket has no transfer; the dialplan decides after hangup


class AudioSocketServer:
    def __init__(self, host: SessionHost, config: SipConfig, listen: tuple[str, int]) -> None:
        self.host = host
        self.config = config
        self.listen = listen
        self.bridges: dict[str, CallBridge] = {}
        self.ended: deque[CallBridge] = deque(maxlen=256)
        self._server: asyncio.Server | None = None
        self._handlers: dict[int, Callable[[CallBridge, AudioSocketPort, bytes], None]] = {
            # An odd trailing byte is not a sample: drop it rather than shift every later one.
            Kind.AUDIO: lambda bridge, port, payload: bridge.on_caller_audio(
                payload[: len(payload) & ~1]
            ),
            Kind.DTMF: self._on_dtmf,
            Kind.HANGUP: lambda bridge, port, payload: port.ended.set(),
            Kind.ERROR: self._on_error,
        }

    async def start(self) -> tuple[str, int]:
        if self.config.media_nice is not None:
            raise_thread_priority(self.config.media_nice)
        self._server = await asyncio.start_server(self._serve, *self.listen)
        address: tuple[str, int] = self._server.sockets[0].getsockname()[:2]
        log.info("AudioSocket listening on tcp:%s:%d", *address)
        return address

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        try:
            if not self.config.allows(peer[0]):
                log.info("refused AudioSocket connection from %s", peer[0])
                return
            try:
                kind, payload = await asyncio.wait_for(read_frame(reader), FIRST_FRAME_TIMEOUT_S)
            except (TimeoutError, asyncio.IncompleteReadError):
                return
            if kind != Kind.UUID or len(payload) != 16:
                log.info("AudioSocket from %s: first frame must be a 16-byte UUID", peer[0])
                writer.write(frame(Kind.ERROR, b"\x01"))
                return
            if len(self.bridges) >= self.config.max_calls:
                writer.write(frame(Kind.HANGUP))
                return
            await self._call(str(uuid.UUID(bytes=payload)), reader, writer)
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _call(
        self, call_id: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        port = AudioSocketPort(writer)
        bridge = CallBridge(self.host, port, self.config, "audiosocket", call_id)
        self.bridges[call_id] = bridge
        port.pacer.start()
        reading = asyncio.get_running_loop().create_task(self._read(bridge, port, reader))
        try:
            await port.ended.wait()
            await writer.drain()
        finally:
            reading.cancel()
            port.pacer.stop()
            bridge.note("hangup", port.hangup_reason or "caller hung up")
            bridge.close()
            self.bridges.pop(call_id, None)
            self.ended.append(bridge)

    async def _read(
        self, bridge: CallBridge, port: AudioSocketPort, reader: asyncio.StreamReader
    ) -> None:
        try:
            while not port.ended.is_set():
                kind, payload = await read_frame(reader)
                handler = self._handlers.get(kind)
                if handler is not None:
                    handler(bridge, port, payload)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        port.ended.set()

    @staticmethod
    def _on_dtmf(bridge: CallBridge, port: AudioSocketPort, payload: bytes) -> None:
        digit = payload[:1].decode("ascii", errors="replace")
        bridge.on_dtmf(digit)

    @staticmethod
    def _on_error(bridge: CallBridge, port: AudioSocketPort, payload: bytes) -> None:
        bridge.note("error", f"AudioSocket error frame {payload.hex()}")
        port.ended.set()
