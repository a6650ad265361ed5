"""`SipConfig`: one frozen configuration for `voxrelay sip` and `voxrelay audiosocket`."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from voxrelay.pipeline.sip.dtmf import DIGITS
from voxrelay.pipeline.sip.g711 import CODECS

DEFAULT_PORT = 5060
DEFAULT_AUDIOSOCKET_PORT = 9092
DTMF_ACTIONS = ("hangup", "transfer")
DEFAULT_DTMF_ACTIONS = (("#", "hangup"), ("0", "transfer"))


def parse_listen(value: str, default_port: int) -> tuple[str, int]:
    """'HOST:PORT' or 'HOST' -> (host, port); ValueError says what is wrong."""
    host, sep, port = value.rpartition(":")
    if not sep:
        host, port = value, str(default_port)
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        raise ValueError(f"--listen {value!r}: the host must be an IPv4 address") from None
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--listen {value!r}: the port must be 0..65535")
    return host, int(port)


@dataclass(frozen=True, slots=True)
class SipConfig:
    """Where the bridge listens, who may call, and what a call does.

    `allow`: CIDRs whose requests are served; others get 403 (empty: loopback only,
    because an open SIP port on the internet is toll fraud bait). `dtmf_actions` maps
    a digit to "hangup" or "transfer" (a REFER to `transfer_uri`). A reply matching
    `goodbye_pattern` ends the call with a BYE once it has been played.
    """

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    allow: tuple[str, ...] = ()
    codecs: tuple[str, ...] = ("PCMU", "PCMA")  # in our order of preference
    max_calls: int = 16
    answer_delay_s: float = 0.0  # ringing time before 200 OK
    jitter_packets: int = 2  # reorder depth: at most 40 ms held, and only behind a gap
    dtmf_actions: tuple[tuple[str, str], ...] = DEFAULT_DTMF_ACTIONS
    transfer_uri: str | None = None
    goodbye_pattern: str = r"\b(goodbye|bye now)\b"
    max_call_s: float = 3600.0
    rtp_timeout_s: float = 60.0  # no RTP from the caller this long: hang up
    t1_s: float = 0.5
    # Nice value asked for the event-loop thread that paces media (see playout.py);
    # None leaves it alone.
    media_nice: int | None = -10

    def __post_init__(self) -> None:
        parse_listen(f"{self.host}:{self.port}", self.port)
        for cidr in self.allow:
            try:
                ipaddress.ip_network(cidr, strict=False)
            except ValueError:
                raise ValueError(f"--allow {cidr!r} is not a CIDR like 10.0.0.0/8") from None
        if not self.codecs or any(codec not in CODECS for codec in self.codecs):
            raise ValueError(f"codecs must be a non-empty subset of {CODECS}, got {self.codecs}")
        if self.max_calls < 1:
            raise ValueError(f"max_calls must be >= 1, got {self.max_calls}")
        if not 0 <= self.jitter_packets <= 25:
            raise ValueError(
                f"jitter_packets must be 0..25 (20 ms each), got {self.jitter_packets}"
            )
        for digit, action in self.dtmf_actions:
            if digit not in DIGITS or action not in DTMF_ACTIONS:
                raise ValueError(
                    f"dtmf action {digit!r}->{action!r}: digits are {DIGITS}, actions "
                    f"{DTMF_ACTIONS}"
                )
        if self.transfer_uri is not None and not self.transfer_uri.startswith(("sip:", "tel:")):
            raise ValueError(f"transfer_uri must be a sip: or tel: URI, got {self.transfer_uri!r}")
        try:
            re.compile(self.goodbye_pattern)
        except re.error as exc:
            raise ValueError(f"goodbye_pattern is not a regular expression: {exc}") from None
        if self.media_nice is not None and not -20 <= self.media_nice <= 19:
            raise ValueError(f"media_nice must be -20..19 or None, got {self.media_nice}")
        for name in ("answer_delay_s", "max_call_s", "rtp_timeout_s", "t1_s"):
            if getattr(self, name) < 0 or (name != "answer_delay_s" and not getattr(self, name)):
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")

    def allows(self, address: str) -> bool:
        ip = ipaddress.ip_address(address)
        if not self.allow:
            return ip.is_loopback
        return any(ip in ipaddress.ip_network(cidr, strict=False) for cidr in self.allow)


def from_cli(
    listen: str,
    default_port: int,
    allow: list[str],
    max_calls: int,
    dtmf: list[str],
    transfer_to: str | None,
) -> tuple[SipConfig, tuple[str, int]]:
    """The config of `voxrelay sip`/`audiosocket` from their flags (`--dtmf DIGIT=ACTION`)."""
    host, port = parse_listen(listen, default_port)
    actions: list[tuple[str, str]] = []
    for item in dtmf:
        digit, sep, action = item.partition("=")
        if not sep:
            raise ValueError(f"--dtmf {item!r}: use DIGIT=ACTION, e.g. '#=hangup' or '0=transfer'")
        actions.append((digit, action))
    config = SipConfig(
        host=host,
        port=port,
        allow=tuple(allow),
        max_calls=max_calls,
        transfer_uri=transfer_to,
        dtmf_actions=tuple(actions) if actions else DEFAULT_DTMF_ACTIONS,
    )
    return config, (host, port)
