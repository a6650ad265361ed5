"""One WebSocket client's outgoing messages: a bounded queue and the writer that drains it.

The session's Sink methods run in the supervisor's record callback and never await: they
append here, and the client's own writer task (`write_loop`) sends. Reply audio has a
budget (`send_queue_audio_s`): past it audio is dropped and counted, never waited for,
and a client that takes nothing for `stalled_client_s` while audio waits is closed. A
client that still reads, however slowly, only loses audio.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from websockets.asyncio.server import ServerConnection

if TYPE_CHECKING:
    from voxrelay.pipeline.ws import ServerConfig

log = logging.getLogger("voxrelay.ws")

MAX_QUEUED_EVENTS = 4096  # JSON events waiting for one client before it counts as stalled
CLOSE_POLICY = 1008
# A client that does not take our close frame (it stopped reading) is cut after this.
CLOSE_GRACE_S = 2.0
# Reply audio sent is kept by turn for this many recent turns: only those can still be cut.
SENT_TURNS_KEPT = 4


class Outbox:
    """The outgoing queue of one connection (`label` names it in the log)."""

    def __init__(
        self, connection: ServerConnection, config: ServerConfig, output_rate: int, label: str
    ) -> None:
        self.connection = connection
        self.config = config
        self.label = label
        self._loop = asyncio.get_running_loop()
        # (turn, message, reply audio bytes it carries at output_rate: 0 for an event)
        self._queue: deque[tuple[int, str | bytes, int]] = deque()
        self._queued_audio_bytes = 0
        self._max_audio_bytes = int(config.send_queue_audio_s * output_rate) * 2
        self._wake = asyncio.Event()
        self.drained = asyncio.Event()
        self._overflowed = False  # reply audio was dropped since the writer was last idle
        self._last_sent = self._loop.time()  # the writer's last completed send, or the
        # last time the transport's buffer was seen to shrink (the kernel took bytes)
        self._buffered_at_check = 0
        self._stall_check: asyncio.TimerHandle | None = None
        self._sent_bytes: dict[int, int] = {}  # by turn: reply audio that left for the client
        self._closing: asyncio.Task[None] | None = None
        self.dropped_audio_bytes = 0
        self.close_reason: str | None = None  # set once the server decided to close
        self.last_activity = self._loop.time()

    def push_text(self, turn: int, text: str) -> None:
        """A text message (not reply audio)."""
        self._push(turn, text)
        if len(self._queue) > MAX_QUEUED_EVENTS:
            self.abort(CLOSE_POLICY, "client does not read its messages")

    def push_audio(
        self, turn: int, pcm16: bytes, encode: Callable[[int, bytes], str | bytes]
    ) -> None:
        """Reply audio (PCM16 at the output rate), as the message `encode` makes of it,
        if it fits the budget; else it is dropped and counted, and the client watched
        for a stall."""
        if self._queued_audio_bytes + len(pcm16) > self._max_audio_bytes:
            # Never wait for a slow client here: drop, count, and close it if it stays slow
            # (a timer: the reply may end, and nothing else arrive, while it stays stuck).
            self.dropped_audio_bytes += len(pcm16)
            self._overflowed = True
            if self._stall_check is None:
                self._stall_check = self._loop.call_later(
                    self.config.stalled_client_s, self._check_stalled
                )
            return
        self._queued_audio_bytes += len(pcm16)
        self._push(turn, encode(turn, pcm16), len(pcm16))

    def sent_audio_bytes(self, turn: int) -> int:
        """Reply audio of `turn` that left for the client (PCM16 bytes, output rate)."""
        return self._sent_bytes.get(turn, 0)

    def drop_audio_before(self, floor: int) -> None:
        """Forget reply audio of turns before `floor`: queued, and what was sent."""
        kept: deque[tuple[int, str | bytes, int]] = deque()
        for entry in self._queue:
            turn, _message, audio_bytes = entry
            if audio_bytes and turn < floor:
                self._queued_audio_bytes -= audio_bytes
            else:
                kept.append(entry)
        self._queue = kept
        for turn in [t for t in self._sent_bytes if t < floor]:
            del self._sent_bytes[turn]

    def _check_stalled(self) -> None:
        """Stalled: the queue overflowed, and the client has taken nothing for
        `stalled_client_s` while reply audio waits for it."""
        self._stall_check = None
        # The writer may be idle with its last messages still in the transport's buffer:
        # what the kernel takes from there is progress too; what it never takes is not.
        buffered = self._transport_buffered()
        if buffered < self._buffered_at_check:
            self._last_sent = self._loop.time()
        self._buffered_at_check = buffered
        if not self._queue and not buffered:
            self._overflowed = False
        if not self._overflowed:
            return  # the client has caught up since
        waited = self._loop.time() - self._last_sent
        if waited >= self.config.stalled_client_s:
            self.abort(CLOSE_POLICY, "client reads reply audio too slowly")
        else:
            self._stall_check = self._loop.call_later(
                self.config.stalled_client_s - waited, self._check_stalled
            )

    def _transport_buffered(self) -> int:
        transport = self.connection.transport
        return 0 if transport is None else transport.get_write_buffer_size()

    def _push(self, turn: int, message: str | bytes, audio_bytes: int = 0) -> None:
        self.last_activity = self._loop.time()
        self._queue.append((turn, message, audio_bytes))
        self.drained.clear()
        self._wake.set()

    async def write_loop(self) -> None:
        """Drains the queue into the socket; ends when the connection does."""
        while True:
            if not self._queue:
                if not self._transport_buffered():  # else: the stall timer decides
                    self._overflowed = False
                self.drained.set()
                self._wake.clear()
                await self._wake.wait()
                continue
            turn, message, audio_bytes = self._queue.popleft()
            await self.connection.send(message)
            self._last_sent = self._loop.time()
            if audio_bytes:
                self._queued_audio_bytes -= audio_bytes
                self._sent_bytes[turn] = self._sent_bytes.get(turn, 0) + audio_bytes
                if len(self._sent_bytes) > SENT_TURNS_KEPT:
                    del self._sent_bytes[min(self._sent_bytes)]

    def abort(self, code: int, reason: str) -> None:
        """Close the connection from a callback that must not await."""
        if self._closing is None:
            self.close_reason = reason
            log.warning("%s: closing with %d: %s", self.label, code, reason)
            self._closing = self._loop.create_task(self.connection.close(code, reason[:120]))
            # close() waits until the close frame is written, which never happens for a
            # client that stopped reading: drop the TCP connection after a grace period.
            self.cut_after_grace()

    def cut_after_grace(self) -> None:
        """Drop the TCP connection CLOSE_GRACE_S from now, whatever the close frame does."""
        self._loop.call_later(CLOSE_GRACE_S, self.connection.transport.abort)

    def close(self) -> None:
        """The connection is gone: nothing more goes out."""
        if self._stall_check is not None:
            self._stall_check.cancel()
        self._queue.clear()
