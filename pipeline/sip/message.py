"""SIP messages (RFC 3261 subset): strict parsing of one UDP datagram, serialisation.

A datagram from the network is untrusted: sizes, header counts and line lengths are
bounded, and anything that is not a well-formed request or response raises ValueError
with the reason (the server answers 400 with it when it can address a reply).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

MAX_DATAGRAM_BYTES = 8192  # bigger than any sane SIP-over-UDP message (MTU ~1500)
MAX_HEADERS = 64
MAX_LINE_BYTES = 2048
SIP_VERSION = "SIP/2.0"
BRANCH_COOKIE = "z9hG4bK"

# Compact forms (RFC 3261 7.3.3) -> canonical names.
_COMPACT: dict[str, str] = {
    "v": "Via", "f": "From", "t": "To", "i": "Call-ID", "m": "Contact",
    "l": "Content-Length", "c": "Content-Type", "k": "Supported", "s": "Subject",
    "r": "Refer-To", "o": "Event",
}  # fmt: skip
_CANONICAL: dict[str, str] = {
    name.lower(): name
    for name in (
        "Via", "From", "To", "Call-ID", "CSeq", "Contact", "Content-Length", "Content-Type",
        "Max-Forwards", "Record-Route", "Route", "Allow", "Supported", "Server",
        "User-Agent", "Accept", "Refer-To", "Referred-By", "Event", "Subscription-State",
        "Warning",
    )
}  # fmt: skip
_TOKEN = re.compile(r"^[A-Za-z0-9.!%*_+`'~-]+$")
_REQUIRED = ("Via", "From", "To", "Call-ID", "CSeq")


def _canonical(name: str) -> str:
    lower = name.strip().lower()
    return _COMPACT.get(lower) or _CANONICAL.get(lower) or name.strip()


@dataclass(slots=True)
class SipMessage:
    """A request (`method` set) or a response (`status` set)."""

    method: str = ""
    uri: str = ""
    status: int = 0
    reason: str = ""
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""

    @property
    def is_request(self) -> bool:
        return bool(self.method)

    def get(self, name: str) -> str | None:
        wanted = _canonical(name)
        return next((value for key, value in self.headers if key == wanted), None)

    def get_all(self, name: str) -> list[str]:
        wanted = _canonical(name)
        return [value for key, value in self.headers if key == wanted]

    def header(self, name: str) -> str:
        value = self.get(name)
        if value is None:
            raise ValueError(f"missing {name} header")
        return value

    @property
    def call_id(self) -> str:
        return self.header("Call-ID")

    @property
    def cseq(self) -> tuple[int, str]:
        number, method = self.header("CSeq").split()
        return int(number), method

    @property
    def branch(self) -> str:
        return param(self.header("Via"), "branch") or ""

    def to_bytes(self) -> bytes:
        start = (
            f"{self.method} {self.uri} {SIP_VERSION}"
            if self.method
            else f"{SIP_VERSION} {self.status} {self.reason}"
        )
        lines = [start]
        lines += [f"{key}: {value}" for key, value in self.headers if key != "Content-Length"]
        lines.append(f"Content-Length: {len(self.body)}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + self.body


def param(header_value: str, name: str) -> str | None:
    """A `;name=value` parameter of a header (outside any <...> URI), or None."""
    outside = header_value.rsplit(">", 1)[-1]
    for part in outside.split(";")[1:]:
        key, _, value = part.partition("=")
        if key.strip().lower() == name:
            return value.strip()
    return None


def uri_of(name_addr: str) -> str:
    """The URI in `"Name" <sip:a@b>;tag=x` or `sip:a@b;tag=x`."""
    if "<" in name_addr:
        return name_addr.split("<", 1)[1].split(">", 1)[0].strip()
    return name_addr.split(";", 1)[0].strip()


def parse(datagram: bytes) -> SipMessage:
    """One SIP message from a UDP datagram; ValueError says what is wrong."""
    message = _parse(datagram, strict=True)
    _validate(message)
    return message


def parse_lenient(datagram: bytes) -> SipMessage:
    """Start line and the well-formed headers, not checked for the mandatory ones: enough
    to address a 400 response to a request that `parse` refused."""
    return _parse(datagram, strict=False)


def _parse(datagram: bytes, strict: bool) -> SipMessage:
    if len(datagram) > MAX_DATAGRAM_BYTES:
        raise ValueError(f"datagram of {len(datagram)} bytes exceeds {MAX_DATAGRAM_BYTES}")
    head, sep, body = datagram.partition(b"\r\n\r\n")
    if not sep:
        raise ValueError("no blank line (CRLF CRLF) ends the headers")
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("headers are not UTF-8") from None
    lines = text.split("\r\n")
    if len(lines) - 1 > MAX_HEADERS:
        raise ValueError(f"more than {MAX_HEADERS} header lines")
    if any(len(line) > MAX_LINE_BYTES for line in lines):
        raise ValueError(f"a header line is longer than {MAX_LINE_BYTES} bytes")
    message = _start_line(lines[0])
    for line in lines[1:]:
        if line[:1] in (" ", "\t"):  # folded continuation (obsolete but legal)
            if not message.headers:
                raise ValueError("continuation line before any header")
            key, value = message.headers[-1]
            message.headers[-1] = (key, f"{value} {line.strip()}")
            continue
        name, colon, value = line.partition(":")
        if not colon or not _TOKEN.match(name.strip()):
            if strict:
                raise ValueError(f"malformed header line {line[:60]!r}")
            continue
        message.headers.append((_canonical(name), value.strip()))
    message.body = _body(message, body)
    return message


def _start_line(line: str) -> SipMessage:
    parts = line.split(" ", 2)
    if len(parts) != 3:
        raise ValueError(f"malformed start line {line[:60]!r}")
    if parts[0] == SIP_VERSION:
        if not (parts[1].isdigit() and len(parts[1]) == 3 and 100 <= int(parts[1]) <= 699):
            raise ValueError(f"bad status code {parts[1][:10]!r}")
        return SipMessage(status=int(parts[1]), reason=parts[2])
    method, uri, version = parts
    if version != SIP_VERSION:
        raise ValueError(f"unsupported version {version[:20]!r}; expected {SIP_VERSION}")
    if not _TOKEN.match(method) or not method.isupper():
        raise ValueError(f"bad method {method[:20]!r}")
    if ":" not in uri or " " in uri:
        raise ValueError(f"bad request URI {uri[:60]!r}")
    return SipMessage(method=method, uri=uri)


def _body(message: SipMessage, body: bytes) -> bytes:
    declared = message.get("Content-Length")
    if declared is None:
        return body  # optional over UDP: the body is the rest of the datagram
    if not declared.isdigit():
        raise ValueError(f"Content-Length {declared[:20]!r} is not a number")
    if int(declared) > len(body):
        raise ValueError(f"Content-Length {declared} exceeds the {len(body)} body bytes")
    return body[: int(declared)]


def _validate(message: SipMessage) -> None:
    for name in _REQUIRED:
        message.header(name)
    try:
        number, method = message.cseq
    except ValueError:
        raise ValueError(f"malformed CSeq {message.header('CSeq')[:40]!r}") from None
    if not 0 <= number < 2**31:
        raise ValueError(f"CSeq number {number} out of range")
    if message.is_request and method != message.method:
        raise ValueError(f"CSeq method {method} does not match the request's {message.method}")
    if not message.header("Via").upper().startswith(SIP_VERSION + "/"):
        raise ValueError("Via must start with SIP/2.0/<transport>")


def response(
    request: SipMessage, status: int, reason: str, to_tag: str | None = None
) -> SipMessage:
    """A response with the request's Via/From/To/Call-ID/CSeq (RFC 3261 8.2.6.2)."""
    reply = SipMessage(status=status, reason=reason)
    for name in ("Via", "Record-Route"):
        reply.headers += [(name, value) for value in request.get_all(name)]
    to = request.header("To")
    if to_tag is not None and param(to, "tag") is None and status != 100:
        to = f"{to};tag={to_tag}"
    reply.headers += [
        ("From", request.header("From")),
        ("To", to),
        ("Call-ID", request.header("Call-ID")),
        ("CSeq", request.header("CSeq")),
        ("Server", "voxrelay"),
    ]
    return reply
