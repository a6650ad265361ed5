"""One call: its dialog (RFC 3261 12), its RTP port and its pipeline session.

We are always the called party. The caller's INVITE carries its SDP offer, or none (a
late offer, RFC 3261 13.2.1): then our offer goes in the 200 OK, the caller's answer
comes in the ACK, and media (the RTP port's bridge to a pipeline session) starts only
once that answer is taken; an ACK without an answer we can take ends the call with a
BYE. The dialog remembers what in-dialog requests of ours (BYE, REFER) need: the
caller's tag and Contact, the route set, our CSeq. Requests go to the address the
INVITE came from (symmetric signalling, RFC 3581), which is where a caller behind NAT
or a proxy can be reached.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import secrets
from collections.abc import Callable

from voxrelay.pipeline.sip.bridge import CallBridge, SessionHost
from voxrelay.pipeline.sip.config import SipConfig
from voxrelay.pipeline.sip.media import RtpPort
from voxrelay.pipeline.sip.message import SipMessage, param, uri_of
from voxrelay.pipeline.sip.sdp import (
    OFFERED_DTMF_PAYLOAD,
    PAYLOAD_TYPES,
    Answer,
    Offer,
    accept_answer,
    build_answer,
    build_offer,
    negotiate,
)
from voxrelay.pipeline.sip.transaction import Address, new_branch

log = logging.getLogger("voxrelay.sip")
# (request, where to, callback with the final response or None on timeout)
SendRequest = Callable[[SipMessage, Address, Callable[[SipMessage | None], None]], None]


class CallState(enum.Enum):
    RINGING = "ringing"
    CONFIRMED = "confirmed"
    ENDED = "ended"


class Call:
    def __init__(
        self,
        invite: SipMessage,
        source: Address,
        local: Address,
        config: SipConfig,
        send_request: SendRequest,
        on_end: Callable[[Call], None],
    ) -> None:
        self.call_id = invite.call_id
        self.invite = invite
        self.source = source
        self.local = local
        self.config = config
        self.local_tag = secrets.token_hex(6)
        self.remote_from = invite.header("From")  # caller's From, with its tag
        self.local_to = f"{invite.header('To')};tag={self.local_tag}"
        contact = invite.get("Contact")
        self.remote_target = uri_of(contact) if contact else uri_of(self.remote_from)
        self.route_set = invite.get_all("Record-Route")
        self.remote_cseq = invite.cseq[0]
        self._local_cseq = 1
        self._send_request = send_request
        self._on_end = on_end
        self.state = CallState.RINGING
        self.rtp: RtpPort | None = None
        self.bridge: CallBridge | None = None
        self.sdp_version = 1
        self.awaiting_answer = False  # a late offer: our SDP went in the 200 OK
        self.end_reason = ""
        self._watchdog: asyncio.Task[None] | None = None

    @property
    def ended(self) -> bool:
        return self.state is CallState.ENDED

    @property
    def remote_tag(self) -> str:
        return param(self.remote_from, "tag") or ""

    async def open_media(self, offer: Offer, host: SessionHost) -> bytes:
        """RTP port and pipeline session for the call; returns the SDP answer."""
        answer = negotiate(offer, self.config.codecs)
        self.rtp = await RtpPort.open(
            self.local[0],
            answer,
            (offer.address, offer.port),
            self.config.jitter_packets,
            self.source[0],
        )
        self._start_media(offer, answer, host)
        return self._sdp()

    async def offer_media(self) -> bytes:
        """Late offer: bind the RTP port; returns our SDP offer for the 200 OK."""
        codec = self.config.codecs[0]
        # Until the ACK's answer names the caller's address and codec, the port sends
        # nothing (held) and hands nothing on (no bridge, no session yet).
        pending = Answer(codec, PAYLOAD_TYPES[codec], OFFERED_DTMF_PAYLOAD, "sendrecv")
        nowhere = ("0.0.0.0", 0)
        self.rtp = await RtpPort.open(
            self.local[0], pending, nowhere, self.config.jitter_packets, self.source[0]
        )
        self.rtp.update(pending, nowhere, held=True)
        self.awaiting_answer = True
        return build_offer(
            self.config.codecs,
            self.local[0],
            self.rtp.local_port,
            id(self) % 10**9,
            self.sdp_version,
        )

    def _start_media(self, theirs: Offer, answer: Answer, host: SessionHost) -> None:
        assert self.rtp is not None
        self.rtp.update(answer, (theirs.address, theirs.port), theirs.on_hold)
        self.rtp.on_hangup = self.hangup
        self.rtp.on_transfer = self.transfer
        self.bridge = CallBridge(host, self.rtp, self.config, "sip", self.call_id)
        self.rtp.bridge = self.bridge
        self.rtp.start()

    def _sdp(self) -> bytes:
        assert self.rtp is not None
        return build_answer(
            self.rtp.answer, self.local[0], self.rtp.local_port, id(self) % 10**9, self.sdp_version
        )

    def reinvite(self, offer: Offer) -> bytes:
        """Hold/unhold or a codec change; returns the new SDP answer."""
        assert self.rtp is not None
        answer = negotiate(offer, self.config.codecs)
        self.rtp.update(answer, (offer.address, offer.port), offer.on_hold)
        self.sdp_version += 1
        if self.bridge is not None:
            self.bridge.note("reinvite", f"{answer.codec} {answer.direction}")
        return self._sdp()

    def confirm(self, ack: SipMessage, host: SessionHost) -> None:
        """The ACK arrived: the call is up. After a late offer, media starts with the
        answer the ACK carries; without one we can take, we hang up: an ACK cannot be
        refused (RFC 3261 13.2.2.4 has a caller do the same with an offer it rejects)."""
        if self.state is not CallState.RINGING:
            return  # a retransmitted ACK
        self.state = CallState.CONFIRMED
        if self.awaiting_answer:
            self.awaiting_answer = False
            try:
                theirs, answer = accept_answer(ack.body, self.config.codecs)
            except ValueError as exc:
                self.hangup(f"no usable SDP answer in the ACK: {exc}", after_playback=False)
                return
            self._start_media(theirs, answer, host)
        self._watchdog = asyncio.get_running_loop().create_task(self._watch())

    async def _watch(self) -> None:
        """Ends calls that outlive max_call_s or whose caller stopped sending RTP."""
        elapsed_s = 0.0
        while self.state is CallState.CONFIRMED:
            await asyncio.sleep(1.0)
            elapsed_s += 1.0
            assert self.rtp is not None
            silent_s = asyncio.get_running_loop().time() - self.rtp.last_packet_at
            if elapsed_s > self.config.max_call_s:
                self.hangup("maximum call duration reached", after_playback=False)
            elif silent_s > self.config.rtp_timeout_s and not self.rtp.held:
                self.hangup(f"no RTP for {silent_s:.0f} s", after_playback=False)

    def in_dialog_request(self, method: str) -> SipMessage:
        request = SipMessage(method=method, uri=self.remote_target)
        host, port = self.local
        request.headers += [
            ("Via", f"SIP/2.0/UDP {host}:{port};branch={new_branch()};rport"),
            ("Max-Forwards", "70"),
            ("From", self.local_to),
            ("To", self.remote_from),
            ("Call-ID", self.call_id),
            ("CSeq", f"{self._local_cseq} {method}"),
            ("Contact", f"<sip:voxrelay@{host}:{port}>"),
        ]
        request.headers += [("Route", route) for route in self.route_set]
        self._local_cseq += 1
        return request

    def hangup(self, reason: str, after_playback: bool) -> None:
        """The bot ends the call: BYE (after the reply has played out, if asked)."""
        if self.state is not CallState.CONFIRMED:
            return
        assert self.rtp is not None
        if after_playback and self.rtp.pacer.queued_ms > 0:
            self.rtp.pacer.on_drained = lambda: self.hangup(reason, after_playback=False)
            return
        self._send_request(self.in_dialog_request("BYE"), self.source, lambda reply: None)
        self.end(f"bot hung up: {reason}")

    def transfer(self, target: str) -> bool:
        """Blind transfer (RFC 3515): REFER the caller to `target`; its NOTIFYs end the call."""
        if self.state is not CallState.CONFIRMED:
            return False
        refer = self.in_dialog_request("REFER")
        refer.headers += [
            ("Refer-To", f"<{target}>"),
            ("Referred-By", f"<sip:voxrelay@{self.local[0]}:{self.local[1]}>"),
        ]

        def on_reply(reply: SipMessage | None) -> None:
            if self.bridge is not None and (reply is None or reply.status >= 300):
                status = "timeout" if reply is None else f"{reply.status} {reply.reason}"
                self.bridge.note("error", f"transfer to {target} refused: {status}")

        self._send_request(refer, self.source, on_reply)
        return True

    def on_notify(self, notify: SipMessage) -> None:
        """REFER progress (a sipfrag status line): once the transfer succeeded, we leave."""
        status_line = notify.body.decode("utf-8", errors="replace").split("\r\n", 1)[0]
        if self.bridge is not None:
            self.bridge.note("transfer", f"progress: {status_line}")
        parts = status_line.split()
        if len(parts) >= 2 and parts[1].isdigit() and 200 <= int(parts[1]) < 300:
            self.hangup("transferred", after_playback=False)

    def end(self, reason: str) -> None:
        """Free everything: session, RTP socket, tasks. Idempotent."""
        if self.state is CallState.ENDED:
            return
        self.state = CallState.ENDED
        self.end_reason = reason
        if self.bridge is not None:
            self.bridge.note("hangup", reason)
        self.release()
        self._on_end(self)

    def release(self) -> None:
        """Close the session, the RTP socket and the watchdog (each close is idempotent)."""
        if self._watchdog is not None:
            self._watchdog.cancel()
        if self.bridge is not None:
            self.bridge.close()
        if self.rtp is not None:
            self.rtp.close()
