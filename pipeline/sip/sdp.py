"""SDP offer/answer (RFC 3264) for one audio stream: G.711 at 8 kHz plus RFC 4733
telephone-event. We answer the caller's offer, or, for an INVITE without SDP (late
offer), offer every codec we speak in the 200 OK and take the caller's answer from the
ACK (`accept_answer`).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

# Static payload types (RFC 3551) for the codecs we speak.
STATIC_PAYLOADS: dict[int, str] = {0: "PCMU", 8: "PCMA"}
PAYLOAD_TYPES: dict[str, int] = {name: number for number, name in STATIC_PAYLOADS.items()}
DIRECTIONS = ("sendrecv", "sendonly", "recvonly", "inactive")
# What we answer to each direction the caller offers (RFC 3264 6.1).
_ANSWER_DIRECTION: dict[str, str] = {
    "sendrecv": "sendrecv",
    "sendonly": "recvonly",
    "recvonly": "sendonly",
    "inactive": "inactive",
}
MAX_SDP_BYTES = 4096
# The telephone-event payload type we offer: the number the caller sends digits with.
OFFERED_DTMF_PAYLOAD = 101


@dataclass(frozen=True, slots=True)
class Offer:
    address: str  # where the caller wants our RTP
    port: int
    payloads: tuple[int, ...]  # in the caller's order of preference
    rtpmap: dict[int, str] = field(default_factory=dict)  # "PCMU/8000" etc.
    direction: str = "sendrecv"

    @property
    def on_hold(self) -> bool:
        """RFC 3264 hold (sendonly/inactive) or the older c=0.0.0.0 form (RFC 2543)."""
        return self.direction in ("sendonly", "inactive") or self.address == "0.0.0.0"


@dataclass(frozen=True, slots=True)
class Answer:
    codec: str  # "PCMU" or "PCMA"
    payload_type: int
    dtmf_payload_type: int | None
    direction: str


def parse_offer(body: bytes) -> Offer:
    """The audio stream of an SDP offer; ValueError says what is missing."""
    if len(body) > MAX_SDP_BYTES:
        raise ValueError(f"SDP of {len(body)} bytes exceeds {MAX_SDP_BYTES}")
    try:
        lines = body.decode("utf-8").replace("\r\n", "\n").split("\n")
    except UnicodeDecodeError:
        raise ValueError("SDP is not UTF-8") from None
    session_address = ""
    media_address = ""
    media: list[str] | None = None
    rtpmap: dict[int, str] = {}
    direction = "sendrecv"
    for line in filter(None, lines):
        kind, eq, value = line.partition("=")
        if not eq or len(kind) != 1:
            raise ValueError(f"malformed SDP line {line[:40]!r}")
        if kind == "m":
            if media is not None:
                break  # only the first (audio) stream matters to us
            media = value.split()
        elif kind == "c":
            parts = value.split()
            if len(parts) < 3 or parts[:2] != ["IN", "IP4"]:
                raise ValueError(f"unsupported connection line c={value[:40]}; need IN IP4")
            if media is None:
                session_address = parts[2]
            else:
                media_address = parts[2]
        elif kind == "a" and value.startswith("rtpmap:"):
            number, _, encoding = value[7:].partition(" ")
            if number.isdigit():
                rtpmap[int(number)] = encoding.strip()
        elif kind == "a" and value in DIRECTIONS:
            direction = value
    if media is None or len(media) < 4 or media[0] != "audio":
        raise ValueError("SDP has no m=audio line")
    if not media[1].isdigit() or not 0 <= int(media[1]) <= 65535:
        raise ValueError(f"bad media port {media[1][:10]!r}")
    if media[2] != "RTP/AVP":
        raise ValueError(f"unsupported media profile {media[2][:20]}; only RTP/AVP")
    address = media_address or session_address
    try:
        ipaddress.IPv4Address(address)
    except ValueError:
        raise ValueError(f"connection address {address[:40]!r} is not an IPv4 address") from None
    payloads = tuple(int(p) for p in media[3:] if p.isdigit() and int(p) < 128)
    return Offer(address, int(media[1]), payloads, rtpmap, direction)


def _codec_of(payload: int, rtpmap: dict[int, str]) -> str | None:
    encoding = rtpmap.get(payload)
    if encoding is None:
        return STATIC_PAYLOADS.get(payload)
    name, _, rate = encoding.partition("/")
    name = name.upper()
    return name if name in ("PCMU", "PCMA") and rate.startswith("8000") else None


def negotiate(offer: Offer, codecs: tuple[str, ...]) -> Answer:
    """The caller's most preferred codec among ours; ValueError (-> 488) if none."""
    chosen = next(
        (p for p in offer.payloads if _codec_of(p, offer.rtpmap) in codecs),
        None,
    )
    if chosen is None:
        raise ValueError(f"no common codec: offered {offer.payloads}, we speak {codecs}")
    dtmf = next(
        (
            p
            for p in offer.payloads
            if offer.rtpmap.get(p, "").lower().startswith("telephone-event/8000")
        ),
        None,
    )
    codec = _codec_of(chosen, offer.rtpmap)
    assert codec is not None
    return Answer(codec, chosen, dtmf, _ANSWER_DIRECTION[offer.direction])


def accept_answer(body: bytes, codecs: tuple[str, ...]) -> tuple[Offer, Answer]:
    """The caller's answer to our late offer: its stream (address, port, direction, read
    like an offer) and the media that sets up on our side. ValueError if the ACK carries
    no SDP or one we cannot take (no codec of ours)."""
    if not body.strip():
        raise ValueError("the ACK carries no SDP answer")
    theirs = parse_offer(body)
    chosen = negotiate(theirs, codecs)
    # RFC 3264 5.1: the offer's numbers are those its author receives, so digits come
    # to us as the payload type we offered, whatever number the answer gives the event.
    dtmf = OFFERED_DTMF_PAYLOAD if chosen.dtmf_payload_type is not None else None
    return theirs, Answer(chosen.codec, chosen.payload_type, dtmf, chosen.direction)


def build_answer(answer: Answer, address: str, port: int, session_id: int, version: int) -> bytes:
    return _describe(
        [(answer.payload_type, answer.codec)],
        answer.dtmf_payload_type,
        answer.direction,
        address,
        port,
        session_id,
        version,
    )


def build_offer(
    codecs: tuple[str, ...], address: str, port: int, session_id: int, version: int
) -> bytes:
    """Our offer for a late-offer 200 OK: every codec of ours, in our order, and DTMF."""
    formats = [(PAYLOAD_TYPES[codec], codec) for codec in codecs]
    return _describe(formats, OFFERED_DTMF_PAYLOAD, "sendrecv", address, port, session_id, version)


def _describe(
    formats: list[tuple[int, str]],
    dtmf_payload_type: int | None,
    direction: str,
    address: str,
    port: int,
    session_id: int,
    version: int,
) -> bytes:
    payloads = [number for number, _ in formats]
    if dtmf_payload_type is not None:
        payloads.append(dtmf_payload_type)
    lines = [
        "v=0",
        f"o=voxrelay {session_id} {version} IN IP4 {address}",
        "s=voxrelay",
        f"c=IN IP4 {address}",
        "t=0 0",
        f"m=audio {port} RTP/AVP {' '.join(map(str, payloads))}",
    ]
    lines += [f"a=rtpmap:{number} {codec}/8000" for number, codec in formats]
    if dtmf_payload_type is not None:
        lines += [
            f"a=rtpmap:{dtmf_payload_type} telephone-event/8000",
            f"a=fmtp:{dtmf_payload_type} 0-16",
        ]
    lines += ["a=ptime:20", f"a={direction}"]
    return ("\r\n".join(lines) + "\r\n").encode()
