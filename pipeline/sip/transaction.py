"""SIP transactions over UDP (RFC 3261 17), the parts a UAS that may hang up needs.

Server side: a retransmitted request is absorbed and answered with the last response
sent for it; an INVITE's final response is retransmitted (T1, doubling up to T2) until
its ACK arrives or 64*T1 passes (then `on_timeout`: the dialog is torn down); other
final responses are kept 64*T1 to answer retransmissions. Client side (our BYE and
REFER): the request is retransmitted until any final response, or fails after 64*T1.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field

from voxrelay.pipeline.sip.message import BRANCH_COOKIE, SipMessage, param

Address = tuple[str, int]
SendFn = Callable[[bytes, Address], None]


@dataclass(slots=True)
class Timers:
    t1_s: float = 0.5  # RTT estimate
    t2_s: float = 4.0  # cap on the retransmission interval

    @property
    def timeout_s(self) -> float:
        return 64 * self.t1_s


@dataclass(slots=True)
class _ServerEntry:
    request: SipMessage
    address: Address
    response: bytes = b""
    final: bool = False
    acked: bool = False
    handles: list[asyncio.TimerHandle] = field(default_factory=list)


def new_branch() -> str:
    return BRANCH_COOKIE + secrets.token_hex(8)


def _server_key(request: SipMessage) -> tuple[str, ...]:
    method = "INVITE" if request.method == "ACK" else request.method
    branch = request.branch
    if branch.startswith(BRANCH_COOKIE):
        return (branch, method)
    # RFC 2543 peers: no unique branch; fall back on the dialog-identifying fields.
    from_tag = param(request.header("From"), "tag") or ""
    return (request.call_id, str(request.cseq[0]), from_tag, method)


class ServerTransactions:
    def __init__(self, send: SendFn, timers: Timers) -> None:
        self._send = send
        self._timers = timers
        self._entries: dict[tuple[str, ...], _ServerEntry] = {}
        self._invites: dict[tuple[str, int], tuple[str, ...]] = {}  # (Call-ID, CSeq) -> key

    def __len__(self) -> int:
        return len(self._entries)

    def absorb(self, request: SipMessage, address: Address) -> bool:
        """True if `request` retransmits one already seen (its last response is resent)."""
        entry = self._entries.get(_server_key(request))
        if entry is None:
            return False
        if entry.response:
            self._send(entry.response, address)
        return True

    def begin(self, request: SipMessage, address: Address) -> None:
        key = _server_key(request)
        self._entries[key] = _ServerEntry(request, address)
        if request.method == "INVITE":
            self._invites[(request.call_id, request.cseq[0])] = key

    def pending_invite(self, cancel: SipMessage) -> SipMessage | None:
        """The INVITE a CANCEL targets, if it has no final response yet."""
        entry = self._entries.get((*_server_key(cancel)[:-1], "INVITE"))
        return entry.request if entry is not None and not entry.final else None

    def respond(
        self,
        request: SipMessage,
        reply: SipMessage,
        on_timeout: Callable[[], None] | None = None,
    ) -> None:
        entry = self._entries.get(_server_key(request))
        assert entry is not None, "respond() to a request never begun"
        entry.response = reply.to_bytes()
        self._send(entry.response, entry.address)
        if reply.status < 200:
            return
        entry.final = True
        loop = asyncio.get_running_loop()
        if request.method == "INVITE":
            entry.handles.append(
                loop.call_later(self._timers.t1_s, self._retransmit, entry, self._timers.t1_s)
            )
            entry.handles.append(
                loop.call_later(self._timers.timeout_s, self._expire, entry, on_timeout)
            )
        else:
            entry.handles.append(loop.call_later(self._timers.timeout_s, self._expire, entry, None))

    def ack(self, ack: SipMessage) -> bool:
        """An ACK ends its INVITE's retransmissions; False if it matches none."""
        key = self._invites.get((ack.call_id, ack.cseq[0]))
        entry = self._entries.get(key) if key is not None else None
        if entry is None or not entry.final:
            return False
        if not entry.acked:
            entry.acked = True
            for handle in entry.handles:
                handle.cancel()
            # Keep absorbing ACK/INVITE retransmissions for a while (Timer I ~ T4).
            entry.handles = [asyncio.get_running_loop().call_later(5.0, self._drop, entry)]
        return True

    def _retransmit(self, entry: _ServerEntry, interval_s: float) -> None:
        if entry.acked or _server_key(entry.request) not in self._entries:
            return
        self._send(entry.response, entry.address)
        interval_s = min(2 * interval_s, self._timers.t2_s)
        entry.handles.append(
            asyncio.get_running_loop().call_later(interval_s, self._retransmit, entry, interval_s)
        )

    def _expire(self, entry: _ServerEntry, on_timeout: Callable[[], None] | None) -> None:
        self._drop(entry)
        if on_timeout is not None and not entry.acked:
            on_timeout()

    def _drop(self, entry: _ServerEntry) -> None:
        for handle in entry.handles:
            handle.cancel()
        self._entries.pop(_server_key(entry.request), None)
        if entry.request.method == "INVITE":
            self._invites.pop((entry.request.call_id, entry.request.cseq[0]), None)

    def close(self) -> None:
        for entry in list(self._entries.values()):
            self._drop(entry)


@dataclass(slots=True)
class _ClientEntry:
    data: bytes
    address: Address
    on_response: Callable[[SipMessage | None], None]
    handles: list[asyncio.TimerHandle] = field(default_factory=list)


class ClientTransactions:
    """Our own non-INVITE requests (BYE, REFER): retransmitted until answered."""

    def __init__(self, send: SendFn, timers: Timers) -> None:
        self._send = send
        self._timers = timers
        self._entries: dict[tuple[str, str], _ClientEntry] = {}

    def send(
        self,
        request: SipMessage,
        address: Address,
        on_response: Callable[[SipMessage | None], None],
    ) -> None:
        """`on_response` gets the final response, or None after 64*T1 without one."""
        key = (request.branch, request.method)
        entry = _ClientEntry(request.to_bytes(), address, on_response)
        self._entries[key] = entry
        self._send(entry.data, address)
        loop = asyncio.get_running_loop()
        entry.handles.append(
            loop.call_later(self._timers.t1_s, self._retransmit, key, self._timers.t1_s)
        )
        entry.handles.append(loop.call_later(self._timers.timeout_s, self._finish, key, None))

    def on_response(self, reply: SipMessage) -> bool:
        """False if the response matches none of our transactions (stray)."""
        key = (reply.branch, reply.cseq[1])
        if key not in self._entries:
            return False
        if reply.status >= 200:
            self._finish(key, reply)
        return True

    def _retransmit(self, key: tuple[str, str], interval_s: float) -> None:
        entry = self._entries.get(key)
        if entry is None:
            return
        self._send(entry.data, entry.address)
        interval_s = min(2 * interval_s, self._timers.t2_s)
        entry.handles.append(
            asyncio.get_running_loop().call_later(interval_s, self._retransmit, key, interval_s)
        )

    def _finish(self, key: tuple[str, str], reply: SipMessage | None) -> None:
        entry = self._entries.pop(key, None)
        if entry is None:
            return
        for handle in entry.handles:
            handle.cancel()
        entry.on_response(reply)

    def close(self) -> None:
        for key in list(self._entries):
            entry = self._entries.pop(key)
            for handle in entry.handles:
                handle.cancel()
