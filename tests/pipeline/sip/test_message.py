"""SIP parsing and serialisation: strict limits, ValueError on garbage, responses."""

import pytest

from voxrelay.pipeline.sip.config import SipConfig, from_cli, parse_listen
from voxrelay.pipeline.sip.message import parse, parse_lenient, response, uri_of

INVITE = (
    "INVITE sip:bot@127.0.0.1:5060 SIP/2.0\r\n"
    "Via: SIP/2.0/UDP 127.0.0.1:5061;branch=z9hG4bK-1;rport\r\n"
    "Max-Forwards: 70\r\n"
    'f: "Alice" <sip:alice@127.0.0.1>;tag=a1\r\n'
    "t: <sip:bot@127.0.0.1>\r\n"
    "i: call-1@127.0.0.1\r\n"
    "CSeq: 1 INVITE\r\n"
    "m: <sip:alice@127.0.0.1:5061>\r\n"
    "Record-Route: <sip:proxy;lr>\r\n"
    "Content-Type: application/sdp\r\n"
    "Content-Length: 4\r\n\r\nv=0\r\nextra"
)


def test_parse_request_compact_forms_and_body_length():
    msg = parse(INVITE.encode())
    assert msg.method == "INVITE" and msg.uri == "sip:bot@127.0.0.1:5060"
    assert msg.call_id == "call-1@127.0.0.1" and msg.cseq == (1, "INVITE")
    assert msg.branch == "z9hG4bK-1" and msg.body == b"v=0\r"
    assert uri_of(msg.header("From")) == "sip:alice@127.0.0.1"
    assert uri_of(msg.header("Contact")) == "sip:alice@127.0.0.1:5061"


def test_response_copies_dialog_headers_and_adds_to_tag():
    msg = parse(INVITE.encode())
    reply = parse(response(msg, 180, "Ringing", "b2").to_bytes())
    assert reply.status == 180 and reply.reason == "Ringing"
    assert reply.header("To") == "<sip:bot@127.0.0.1>;tag=b2"
    for name in ("Via", "From", "Call-ID", "CSeq", "Record-Route"):
        assert reply.get(name) == msg.get(name)
    trying = response(msg, 100, "Trying", "b2")
    assert trying.get("To") == "<sip:bot@127.0.0.1>"  # 100 carries no To tag


@pytest.mark.parametrize(
    ("datagram", "why"),
    [
        (b"\x00\xff garbage", "blank line"),
        (b"HELLO\r\n\r\n", "start line"),
        (INVITE.replace("SIP/2.0\r\nVia", "SIP/3.0\r\nVia").encode(), "version"),
        (INVITE.replace("i: call-1@127.0.0.1\r\n", "").encode(), "Call-ID"),
        (INVITE.replace("CSeq: 1 INVITE", "CSeq: 1 BYE").encode(), "does not match"),
        (INVITE.replace("CSeq: 1 INVITE", "CSeq: x").encode(), "CSeq"),
        (INVITE.replace("Content-Length: 4", "Content-Length: 999").encode(), "exceeds"),
        (INVITE.replace("Max-Forwards: 70", "Max Forwards 70").encode(), "malformed header"),
        (INVITE.encode() + b"x" * 9000, "exceeds"),
        (INVITE.replace("Max-Forwards: 70", "X: " + "y" * 3000).encode(), "longer"),
        (b"SIP/2.0 9999 Huh\r\n\r\n", "status"),
    ],
)
def test_garbage_raises_value_error_with_reason(datagram, why):
    with pytest.raises(ValueError, match=why):
        parse(datagram)


def test_lenient_parse_still_reads_headers_of_an_invalid_request():
    bad = INVITE.replace("CSeq: 1 INVITE", "CSeq: 1 BYE").encode()
    assert parse_lenient(bad).call_id == "call-1@127.0.0.1"


def test_config_validation_messages():
    with pytest.raises(ValueError, match="CIDR"):
        SipConfig(allow=("10.0.0.0/33",))
    with pytest.raises(ValueError, match="dtmf action"):
        SipConfig(dtmf_actions=(("X", "hangup"),))
    with pytest.raises(ValueError, match="transfer_uri"):
        SipConfig(transfer_uri="http://x")
    with pytest.raises(ValueError, match="IPv4"):
        parse_listen("localhost:5060", 5060)
    with pytest.raises(ValueError, match="DIGIT=ACTION"):
        from_cli("127.0.0.1:0", 5060, [], 4, ["#"], None)
    assert SipConfig().allows("127.0.0.1") and not SipConfig().allows("10.1.2.3")
    assert SipConfig(allow=("10.0.0.0/8",)).allows("10.1.2.3")
    config, listen = from_cli("127.0.0.1", 5060, [], 4, ["9=hangup"], None)
    assert listen == ("127.0.0.1", 5060) and config.dtmf_actions == (("9", "hangup"),)
