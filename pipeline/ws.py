"""`voxrelay serve`: the WebSocket voice endpoint and the browser page, on one port.

`ws://HOST:PORT/v1/voice?sample_rate=16000&output_sample_rate=16000`: binary frames are
PCM16 mono audio both ways, text frames are JSON control (client) and events (server);
`docs/protocol.md` is the reference. `GET /` serves `pipeline/web/index.html`, `GET
/metrics` the Prometheus metrics (`pipeline/metrics.py`; behind the token when one is set).

Everything a connection can be refused for (path, origin, token, rates, capacity) is
decided in `process_request`, before the upgrade, with a plain HTTP status. The server
runs on the supervisor's event loop: sessions of all clients share the three stage
processes, and records carry the session id.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from urllib.parse import SplitResult, parse_qs, urlsplit

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response
from websockets.typing import Subprotocol

from voxrelay.pipeline.config import PipelineConfig
from voxrelay.pipeline.metrics import PipelineMetrics
from voxrelay.pipeline.realtime import RealtimeSession
from voxrelay.pipeline.run import Pipeline
from voxrelay.pipeline.ws_client import CLOSE_NORMAL, CLOSE_TRY_AGAIN, ClientSession

log = logging.getLogger("voxrelay.ws")

VOICE_PATH = "/v1/voice"
REALTIME_PATH = "/v1/realtime"  # OpenAI Realtime API events (pipeline/realtime.py)
# A Realtime event over max_message_bytes gets an `error` and is dropped; base64 makes
# audio 4/3 larger, so frames up to this many times the limit are read to say so.
REALTIME_FRAME_FACTOR = 4
PAGE_PATHS = ("/", "/index.html")
# Browsers cannot set headers on a WebSocket, so OpenAI's Realtime browser clients pass
# the key and the beta flag as subprotocols: new WebSocket(url, ["realtime",
# "openai-insecure-api-key.KEY", "openai-beta.realtime-v1"]). A browser fails a
# handshake that offered subprotocols and got none back: "realtime" is chosen.
REALTIME_SUBPROTOCOL = Subprotocol("realtime")
KEY_SUBPROTOCOL_PREFIX = "openai-insecure-api-key."
BETA_SUBPROTOCOL = "openai-beta.realtime-v1"
METRICS_PATH = "/metrics"
PAGE = Path(__file__).parent / "web" / "index.html"
SAMPLE_RATES = (8000, 16000, 22050, 24000, 44100, 48000)
DEFAULT_SAMPLE_RATE = 16000


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """Listening address, access control and per-client limits of `voxrelay serve`.

    `allow_origins`: browser origins allowed besides the server's own (an `Origin` whose
    host:port equals the request's `Host`); "*" allows any. Clients that send no
    `Origin` (not browsers) are not restricted by it; use a token for those.
    """

    host: str = "127.0.0.1"
    port: int = 8765
    token: str | None = None
    allow_origins: tuple[str, ...] = ()
    max_message_bytes: int = 1 << 20  # ~32 s of 16 kHz PCM16 in one frame
    max_sessions: int = 16
    idle_timeout_s: float = 300.0
    max_turn_audio_s: float = 60.0
    send_queue_audio_s: float = 30.0  # reply audio buffered per client before dropping
    stalled_client_s: float = 10.0  # overflowed, then reads nothing this long: close 1008
    # Kernel send buffer per client (the kernel doubles it): what a client that stopped
    # reading can still absorb before the outgoing queue sees the backlog.
    send_buffer_bytes: int = 64 * 1024

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be 0..65535, got {self.port}")
        if self.token is not None and not self.token:
            raise ValueError("token must not be empty (leave it unset for no auth)")
        if self.max_message_bytes < 1024:
            raise ValueError(f"max_message_bytes must be >= 1024, got {self.max_message_bytes}")
        if self.max_sessions < 1:
            raise ValueError(f"max_sessions must be >= 1, got {self.max_sessions}")
        for name in ("idle_timeout_s", "max_turn_audio_s", "send_queue_audio_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if not 4096 <= self.send_buffer_bytes <= 1 << 24:
            raise ValueError(
                f"send_buffer_bytes must be in 4096..16 MiB, got {self.send_buffer_bytes}"
            )
        if self.stalled_client_s < 0:
            raise ValueError(f"stalled_client_s must be >= 0, got {self.stalled_client_s}")


def parse_rates(query: str) -> tuple[int, int]:
    """(sample_rate, output_sample_rate) from a query string; ValueError says what is wrong."""
    params = parse_qs(query)
    rates = []
    for name in ("sample_rate", "output_sample_rate"):
        values = params.get(name, [str(DEFAULT_SAMPLE_RATE)])
        try:
            rate = int(values[-1])
        except ValueError:
            raise ValueError(f"{name}={values[-1]!r} is not an integer") from None
        if rate not in SAMPLE_RATES:
            raise ValueError(f"{name}={rate} is not supported; use one of {SAMPLE_RATES}")
        rates.append(rate)
    return rates[0], rates[1]


def origin_allowed(origin: str | None, host: str | None, allowed: tuple[str, ...]) -> bool:
    if origin is None:
        return True  # not a browser: no cross-site risk to defend against here
    if "*" in allowed or origin.rstrip("/") in allowed:
        return True
    return host is not None and urlsplit(origin).netloc == host


def offered_subprotocols(request: Request) -> list[str]:
    """The client's `Sec-WebSocket-Protocol` entries, in its order."""
    fields = request.headers.get_all("Sec-WebSocket-Protocol")
    return [entry.strip() for field in fields for entry in field.split(",") if entry.strip()]


def token_presented(request: Request, query: str, token: str) -> bool:
    """The token as `Authorization: Bearer`, `?token=` or (a Realtime browser client's
    way) the `openai-insecure-api-key.TOKEN` subprotocol."""
    expected = token.encode()
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), expected):
        return True
    keys = [
        entry.removeprefix(KEY_SUBPROTOCOL_PREFIX)
        for entry in offered_subprotocols(request)
        if entry.startswith(KEY_SUBPROTOCOL_PREFIX)
    ]
    presented = [*parse_qs(query).get("token", []), *keys]
    return any(hmac.compare_digest(v.encode(), expected) for v in presented)


def _select_subprotocol(
    connection: ServerConnection, offered: Sequence[Subprotocol]
) -> Subprotocol | None:
    # Only "realtime" is ever answered: the key's entry must not come back in a header.
    return REALTIME_SUBPROTOCOL if REALTIME_SUBPROTOCOL in offered else None


def _response(status: HTTPStatus, body: bytes, content_type: str, **headers: str) -> Response:
    fields = [
        ("Content-Type", content_type),
        ("Content-Length", str(len(body))),
        ("Cache-Control", "no-store"),
        ("Connection", "close"),
        *headers.items(),
    ]
    return Response(status.value, status.phrase, Headers(fields), body)


def _refuse(status: HTTPStatus, message: str, **headers: str) -> Response:
    log.info("refused with %d: %s", status.value, message)
    return _response(status, (message + "\n").encode(), "text/plain; charset=utf-8", **headers)


class VoiceServer:
    """The WebSocket endpoint over a running `Pipeline`."""

    def __init__(self, pipeline: Pipeline, config: ServerConfig) -> None:
        self.pipeline = pipeline
        self.config = config
        self.clients: dict[int, ClientSession] = {}
        self._server: Server | None = None
        self._page = PAGE.read_bytes()
        self._closed_drops = {"input": 0, "reply": 0}  # bytes dropped by closed sessions
        self.metrics = PipelineMetrics(pipeline, self._client_drops)

    async def start(self) -> int:
        """Listen; returns the bound port (useful with port 0)."""
        self.pipeline.traces.observers.append(self.metrics.observe_turn)
        self._server = await serve(
            self._serve,
            self.config.host,
            self.config.port,
            process_request=self._process_request,
            select_subprotocol=_select_subprotocol,
            max_size=self.config.max_message_bytes,  # bigger frames: closed with 1009 unread
            compression=None,  # PCM does not compress, and deflate costs latency
            close_timeout=2.0,
        )
        port: int = self._server.sockets[0].getsockname()[1]
        log.info("listening on ws://%s:%d%s", self.config.host, port, VOICE_PATH)
        return port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()  # open connections get 1001 (going away)
            await self._server.wait_closed()
        if self.metrics.observe_turn in self.pipeline.traces.observers:
            self.pipeline.traces.observers.remove(self.metrics.observe_turn)

    def _client_drops(self) -> dict[str, int]:
        drops = dict(self._closed_drops)
        for client in self.clients.values():
            drops["input"] += client.dropped_input_bytes
            drops["reply"] += client.outbox.dropped_audio_bytes
        return drops

    def _process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        url = urlsplit(request.path)
        if url.path in PAGE_PATHS:
            return _response(HTTPStatus.OK, self._page, "text/html; charset=utf-8")
        if url.path == METRICS_PATH:
            if self.config.token is not None and not token_presented(
                request, url.query, self.config.token
            ):
                return _refuse(HTTPStatus.UNAUTHORIZED, "/metrics needs the server's token")
            body, content_type = self.metrics.render()
            return _response(HTTPStatus.OK, body, content_type)
        if url.path not in (VOICE_PATH, REALTIME_PATH):
            return _refuse(
                HTTPStatus.NOT_FOUND,
                f"no such path; the voice endpoints are {VOICE_PATH} and {REALTIME_PATH}",
            )
        origin = request.headers.get("Origin")
        if not origin_allowed(origin, request.headers.get("Host"), self.config.allow_origins):
            return _refuse(HTTPStatus.FORBIDDEN, f"origin {origin} is not allowed")
        if self.config.token is not None and not token_presented(
            request, url.query, self.config.token
        ):
            return _refuse(
                HTTPStatus.UNAUTHORIZED,
                "a token is required: 'Authorization: Bearer <token>' or ?token=",
                **{"WWW-Authenticate": "Bearer"},
            )
        try:
            if url.path == VOICE_PATH:  # a Realtime session sets its formats by event
                parse_rates(url.query)
        except ValueError as exc:
            return _refuse(HTTPStatus.BAD_REQUEST, str(exc))
        if len(self.clients) >= self.config.max_sessions:
            return _refuse(
                HTTPStatus.SERVICE_UNAVAILABLE,
                f"the server is at its limit of {self.config.max_sessions} sessions",
                **{"Retry-After": "5"},
            )
        return None

    async def _serve(self, connection: ServerConnection) -> None:
        assert connection.request is not None
        if len(self.clients) >= self.config.max_sessions:  # raced past process_request
            await connection.close(CLOSE_TRY_AGAIN, "the server is at its session limit")
            return
        client = self._open_client(connection, urlsplit(connection.request.path))
        self.clients[client.session_id] = client
        log.info("session %d opened from %s", client.session_id, connection.remote_address)
        client.announce()
        writer = asyncio.create_task(client.outbox.write_loop())
        try:
            await self._read(client)
        except ConnectionClosed:
            pass
        finally:
            writer.cancel()
            self.clients.pop(client.session_id, None)
            self._closed_drops["input"] += client.dropped_input_bytes
            self._closed_drops["reply"] += client.outbox.dropped_audio_bytes
            client.close()
            log.info(
                "session %d closed (%d reply bytes dropped)",
                client.session_id,
                client.outbox.dropped_audio_bytes,
            )

    def _open_client(self, connection: ServerConnection, url: SplitResult) -> ClientSession:
        if url.path == REALTIME_PATH:
            connection.protocol.max_message_size = (
                REALTIME_FRAME_FACTOR * self.config.max_message_bytes
            )
            model = parse_qs(url.query).get("model", ["voxrelay"])[-1]
            assert connection.request is not None
            beta = "realtime=v1" in connection.request.headers.get("OpenAI-Beta", "") or (
                BETA_SUBPROTOCOL in offered_subprotocols(connection.request)
            )
            return RealtimeSession(connection, self.pipeline, self.config, model, beta)
        input_rate, output_rate = parse_rates(url.query)
        return ClientSession(connection, self.pipeline, self.config, input_rate, output_rate)

    async def _read(self, client: ClientSession) -> None:
        idle_s = self.config.idle_timeout_s
        loop = asyncio.get_running_loop()
        connection = client.connection
        while True:
            try:
                # recv() is cancellation-safe: a timeout loses no message.
                async with asyncio.timeout(min(1.0, idle_s)):
                    message = await connection.recv()
            except TimeoutError:
                if loop.time() - client.outbox.last_activity > idle_s:
                    await client.close_with_error(
                        CLOSE_NORMAL, "idle_timeout", f"no activity for {idle_s:.0f} s"
                    )
                    return
                continue
            client.outbox.last_activity = loop.time()
            await client.on_message(message)


async def serve_forever(
    config: ServerConfig, pipeline_config: PipelineConfig, trace_path: Path | None
) -> None:
    """Body of `voxrelay serve`: runs until SIGINT or SIGTERM."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    async with Pipeline(pipeline_config, trace_path, transport_name="websocket") as pipeline:
        server = VoiceServer(pipeline, config)
        port = await server.start()
        address = f"{config.host}:{port}"
        print(f"voxrelay: serving http://{address}/ and ws://{address}{VOICE_PATH}", flush=True)
        await stop.wait()
        await server.stop()
