"""`voxrelay sip`: the SIP user agent server over UDP, one asyncio DatagramProtocol.

Every datagram is checked in this order: source allowlist (403), parse (400 when the
request can be answered at all, else dropped), response or request, retransmission
(absorbed by the transaction layer), then dispatch on the method through a table.
Calls share the server's `Pipeline`: each is its own session on the stage processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable
from typing import cast

from voxrelay.pipeline.sip import message
from voxrelay.pipeline.sip.bridge import SessionHost
from voxrelay.pipeline.sip.call import Call, CallState
from voxrelay.pipeline.sip.config import SipConfig
from voxrelay.pipeline.sip.message import SipMessage, param
from voxrelay.pipeline.sip.playout import raise_thread_priority
from voxrelay.pipeline.sip.sdp import Offer, parse_offer
from voxrelay.pipeline.sip.transaction import (
    Address,
    ClientTransactions,
    ServerTransactions,
    Timers,
)

log = logging.getLogger("voxrelay.sip")
ALLOW = "INVITE, ACK, BYE, CANCEL, OPTIONS, NOTIFY"
# Methods we know but do not do (405 with Allow); any other method gets 501.
NOT_ALLOWED = ("REGISTER", "SUBSCRIBE", "MESSAGE", "INFO", "PRACK", "UPDATE", "PUBLISH", "REFER")


class SipServer(asyncio.DatagramProtocol):
    def __init__(self, host: SessionHost, config: SipConfig) -> None:
        self.host = host
        self.config = config
        self.calls: dict[str, Call] = {}
        self.ended: deque[Call] = deque(maxlen=256)  # for tests, the bench and post-mortems
        self.rejected: dict[int, int] = {}  # status -> count
        self.dropped_datagrams = 0
        self._transport: asyncio.DatagramTransport | None = None
        self.local: Address = (config.host, config.port)  # the bound address after start()
        timers = Timers(t1_s=config.t1_s)
        self.server_transactions = ServerTransactions(self._sendto, timers)
        self.client_transactions = ClientTransactions(self._sendto, timers)
        self._methods: dict[str, Callable[[SipMessage, Address], None]] = {
            "INVITE": self._on_invite,
            "BYE": self._on_bye,
            "CANCEL": self._on_cancel,
            "OPTIONS": self._on_options,
            "NOTIFY": self._on_notify,
        }
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> Address:
        """Bind the UDP socket; returns the bound (host, port) (useful with port 0)."""
        if self.config.media_nice is not None:
            raise_thread_priority(self.config.media_nice)
        loop = asyncio.get_running_loop()
        await loop.create_datagram_endpoint(
            lambda: self, local_addr=(self.config.host, self.config.port)
        )
        assert self._transport is not None
        address: Address = self._transport.get_extra_info("sockname")[:2]
        self.local = address
        log.info("SIP listening on udp:%s:%d", *address)
        return address

    def stop(self) -> None:
        for call in list(self.calls.values()):
            call.hangup("server shutting down", after_playback=False)
            call.end("server shutting down")
        for task in self._tasks:
            task.cancel()
        self.server_transactions.close()
        self.client_transactions.close()
        if self._transport is not None:
            self._transport.close()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Python 3.11's selector transport does not subclass DatagramTransport.
        self._transport = cast(asyncio.DatagramTransport, transport)

    def _sendto(self, data: bytes, address: Address) -> None:
        if self._transport is not None:
            self._transport.sendto(data, address)

    def _reply(
        self, request: SipMessage, status: int, reason: str, to_tag: str | None = None
    ) -> SipMessage:
        reply = message.response(request, status, reason, to_tag)
        if status >= 300:
            self.rejected[status] = self.rejected.get(status, 0) + 1
        return reply

    def _respond(self, request: SipMessage, status: int, reason: str, **headers: str) -> None:
        reply = self._reply(request, status, reason)
        reply.headers += list(headers.items())
        self.server_transactions.respond(request, reply)

    # Receive.

    def datagram_received(self, data: bytes, addr: Address) -> None:
        if not data.strip(b"\r\n"):
            return  # keep-alive (RFC 5626 CRLF ping)
        allowed = self.config.allows(addr[0])
        try:
            msg = message.parse(data)
        except ValueError as exc:
            self.dropped_datagrams += 1
            if allowed:
                self._bad_request(data, str(exc), addr)
            return
        if not allowed:
            if msg.is_request and msg.method != "ACK":
                log.info("403 for %s from %s:%d", msg.method, *addr)
                self._sendto(self._reply(msg, 403, "Forbidden").to_bytes(), addr)
            return
        if not msg.is_request:
            if not self.client_transactions.on_response(msg):
                self.dropped_datagrams += 1
            return
        if msg.method == "ACK":
            with contextlib.suppress(ValueError):  # an ACK gets no response, even a 400
                self._on_ack(msg)
            return
        if self.server_transactions.absorb(msg, addr):
            return
        self.server_transactions.begin(msg, addr)
        handler = self._methods.get(msg.method)
        if handler is not None:
            try:
                handler(msg, addr)
            except ValueError as exc:  # a field the parser let through but the method needs
                self._respond(msg, 400, "Bad Request", Warning=f'399 voxrelay "{exc}"')
        elif msg.method in NOT_ALLOWED:
            self._respond(msg, 405, "Method Not Allowed", Allow=ALLOW)
        else:
            self._respond(msg, 501, "Not Implemented", Allow=ALLOW)

    def _bad_request(self, data: bytes, why: str, addr: Address) -> None:
        """400 for a request whose Via, From, To, Call-ID and CSeq we could read."""
        try:
            partial = message.parse_lenient(data)
            if not partial.is_request or partial.method == "ACK":
                return
            reply = self._reply(partial, 400, "Bad Request")
        except ValueError:
            log.info("dropped an unparseable datagram from %s:%d: %s", *addr, why)
            return
        reply.headers.append(("Warning", f'399 voxrelay "{why[:200]}"'))
        self._sendto(reply.to_bytes(), addr)

    # Methods.

    def _on_invite(self, invite: SipMessage, addr: Address) -> None:
        if param(invite.header("To"), "tag") is not None:
            self._on_reinvite(invite)
            return
        if invite.call_id in self.calls:
            self._respond(invite, 482, "Loop Detected")
            return
        if len(self.calls) >= self.config.max_calls:
            self._respond(invite, 486, "Busy Here", **{"Retry-After": "10"})
            return
        try:
            # No body: a late offer (ours goes in the 200 OK, the answer comes in the ACK).
            offer = parse_offer(invite.body) if invite.body.strip() else None
        except ValueError as exc:
            self._respond(invite, 488, "Not Acceptable Here", Warning=f'305 voxrelay "{exc}"')
            return
        self.server_transactions.respond(invite, self._reply(invite, 100, "Trying"))
        call = Call(invite, addr, self.local, self.config, self._send_request, self._call_ended)
        self.calls[call.call_id] = call
        task = asyncio.get_running_loop().create_task(self._answer(call, offer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answer(self, call: Call, offer: Offer | None) -> None:
        invite = call.invite
        self.server_transactions.respond(
            invite, self._reply(invite, 180, "Ringing", call.local_tag)
        )
        if self.config.answer_delay_s:
            await asyncio.sleep(self.config.answer_delay_s)
        if call.state is not CallState.RINGING:
            return  # cancelled while ringing
        try:
            media = call.offer_media() if offer is None else call.open_media(offer, self.host)
            sdp = await media
        except ValueError as exc:
            self._respond(invite, 488, "Not Acceptable Here", Warning=f'305 voxrelay "{exc}"')
            call.end(f"no media: {exc}")
            return
        except OSError as exc:  # no RTP port could be bound
            self._respond(invite, 500, "Server Internal Error", Warning=f'399 voxrelay "{exc}"')
            call.release()
            call.end(f"no media: {exc}")
            return
        if call.ended:  # cancelled while the media was being set up
            call.release()
            return
        ok = self._reply(invite, 200, "OK", call.local_tag)
        ok.headers += [
            ("Contact", f"<sip:voxrelay@{self.local[0]}:{self.local[1]}>"),
            ("Allow", ALLOW),
            ("Content-Type", "application/sdp"),
        ]
        ok.body = sdp
        self.server_transactions.respond(invite, ok, on_timeout=lambda: self._no_ack(call))
        log.info(
            "call %s answered (session %d)",
            call.call_id,
            call.bridge.session_id if call.bridge else -1,
        )

    def _no_ack(self, call: Call) -> None:
        # RFC 3261 13.3.1.4: a 2xx never acknowledged ends the dialog with a BYE.
        call.state = CallState.CONFIRMED
        call.hangup("no ACK for the 200 OK", after_playback=False)

    def _on_reinvite(self, invite: SipMessage) -> None:
        call = self._dialog(invite)
        if call is None:
            self._respond(invite, 481, "Call/Transaction Does Not Exist")
            return
        try:
            sdp = call.reinvite(parse_offer(invite.body))
        except ValueError as exc:
            self._respond(invite, 488, "Not Acceptable Here", Warning=f'305 voxrelay "{exc}"')
            return
        ok = self._reply(invite, 200, "OK")
        ok.headers += [("Content-Type", "application/sdp")]
        ok.body = sdp
        self.server_transactions.respond(invite, ok)

    def _on_ack(self, ack: SipMessage) -> None:
        if self.server_transactions.ack(ack):
            call = self.calls.get(ack.call_id)
            if call is not None:
                call.confirm(ack, self.host)

    def _on_bye(self, bye: SipMessage, addr: Address) -> None:
        call = self._dialog(bye)
        if call is None:
            self._respond(bye, 481, "Call/Transaction Does Not Exist")
            return
        self._respond(bye, 200, "OK")
        call.end("caller hung up")

    def _on_cancel(self, cancel: SipMessage, addr: Address) -> None:
        invite = self.server_transactions.pending_invite(cancel)
        if invite is None:
            self._respond(cancel, 481, "Call/Transaction Does Not Exist")
            return
        self._respond(cancel, 200, "OK")
        call = self.calls.get(invite.call_id)
        tag = call.local_tag if call is not None else None
        self.server_transactions.respond(
            invite, self._reply(invite, 487, "Request Terminated", tag)
        )
        if call is not None:
            call.end("caller cancelled")

    def _on_options(self, options: SipMessage, addr: Address) -> None:
        self._respond(
            options, 200, "OK", Allow=ALLOW, Accept="application/sdp", Supported="replaces"
        )

    def _on_notify(self, notify: SipMessage, addr: Address) -> None:
        call = self._dialog(notify)
        if call is None:
            self._respond(notify, 481, "Call/Transaction Does Not Exist")
            return
        self._respond(notify, 200, "OK")
        call.on_notify(notify)

    def _dialog(self, request: SipMessage) -> Call | None:
        call = self.calls.get(request.call_id)
        if call is None or param(request.header("To"), "tag") != call.local_tag:
            return None
        return call

    # Calls.

    def _send_request(
        self,
        request: SipMessage,
        address: Address,
        on_response: Callable[[SipMessage | None], None],
    ) -> None:
        self.client_transactions.send(request, address, on_response)

    def _call_ended(self, call: Call) -> None:
        self.calls.pop(call.call_id, None)
        self.ended.append(call)
        log.info("call %s ended: %s", call.call_id, call.end_reason)
