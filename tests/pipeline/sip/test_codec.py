"""G.711 tables against known values, RTP packets, the reorder buffer, RFC 4733, SDP."""

import numpy as np
import pytest

from voxrelay.pipeline.sip import g711
from voxrelay.pipeline.sip.dtmf import DtmfReceiver, build_event, parse_event
from voxrelay.pipeline.sip.rtp import JitterBuffer, RtpPacket, parse_packet, seq_distance
from voxrelay.pipeline.sip.sdp import (
    accept_answer,
    build_answer,
    build_offer,
    negotiate,
    parse_offer,
)

# ITU-T G.711 reference values (Sun g711.c / CCITT tables).
MULAW = {0: 0xFF, -1: 0x7E, 1000: 0xCE, -1000: 0x4E, 32767: 0x80, -32768: 0x00, 100: 0xF2}
ALAW = {0: 0xD5, -1: 0x55, 1000: 0xFA, -1000: 0x7A, 32767: 0xAA, -32768: 0x2A}


@pytest.mark.parametrize(("codec", "known"), [("PCMU", MULAW), ("PCMA", ALAW)])
def test_g711_encodes_known_values(codec, known):
    samples = np.array(list(known), dtype="<i2").tobytes()
    assert list(g711.encode(samples, codec)) == list(known.values())


def test_g711_decode_known_values_and_round_trip():
    assert np.frombuffer(g711.decode(bytes([0xFF, 0x00, 0x80]), "PCMU"), "<i2").tolist() == [
        0, -32124, 32124,
    ]  # fmt: skip
    assert np.frombuffer(g711.decode(bytes([0xD5, 0x2A]), "PCMA"), "<i2").tolist() == [8, -32256]
    for codec in g711.CODECS:
        decoded = g711.decode(bytes(range(256)), codec)
        again = g711.decode(g711.encode(decoded, codec), codec)
        assert again == decoded  # decoded values are fixed points of encode


def test_g711_matches_cpython_audioop_where_it_still_exists():
    audioop = pytest.importorskip("audioop")  # gone in 3.13; our tables must not need it
    every = np.arange(-32768, 32768, dtype="<i2").tobytes()
    assert g711.encode(every, "PCMU") == audioop.lin2ulaw(every, 2)
    assert g711.encode(every, "PCMA") == audioop.lin2alaw(every, 2)


def test_g711_rejects_unknown_codec():
    with pytest.raises(ValueError, match="unknown G.711 codec"):
        g711.encode(b"\0\0", "G729")


def test_rtp_packet_round_trip_and_garbage():
    packet = RtpPacket(0, 65535, 2**32 - 1, 0xDEADBEEF, b"\xff" * 160, marker=True)
    assert parse_packet(packet.to_bytes()) == packet
    with pytest.raises(ValueError):
        parse_packet(b"\x80\x00")
    with pytest.raises(ValueError, match="version"):
        parse_packet(b"\x40" + bytes(20))
    with pytest.raises(ValueError, match="RTCP"):
        parse_packet(b"\x80\xc8" + bytes(20))


def _packets(sequences, ssrc=1):
    return [RtpPacket(0, s % 65536, s * 160, ssrc, bytes([s % 256])) for s in sequences]


def test_jitter_buffer_in_order_passes_at_once_across_wrap():
    buffer = JitterBuffer(depth=2)
    for packet in _packets(range(65530, 65545)):
        assert buffer.push(packet) == [packet]
    assert seq_distance(2, 65534) == 4


def test_jitter_buffer_reorders_drops_duplicates_and_declares_loss():
    buffer = JitterBuffer(depth=2)
    p = _packets(range(10, 20))
    assert buffer.push(p[0]) == [p[0]]
    assert buffer.push(p[2]) == []  # 11 missing: wait
    assert buffer.push(p[1]) == [p[1], p[2]]  # reordered
    assert buffer.push(p[1]) == []  # duplicate
    assert buffer.late == 1
    assert buffer.push(p[4]) == [] and buffer.push(p[5]) == []
    assert buffer.push(p[6]) == [None, p[4], p[5], p[6]]  # 13 lost after 3 held
    assert buffer.lost == 1
    assert buffer.push(p[3]) == []  # too late now


def test_jitter_buffer_restarts_on_new_ssrc():
    buffer = JitterBuffer(depth=2)
    buffer.push(_packets([100])[0])
    fresh = _packets([5000], ssrc=2)[0]
    assert buffer.push(fresh) == [fresh]


def test_dtmf_digit_reported_once_per_press():
    receiver = DtmfReceiver()
    press = [build_event("5", False, 160), build_event("5", False, 320)]
    press += [build_event("5", True, 800)] * 3  # end packets are sent three times
    digits = [receiver.feed(payload, 48000) for payload in press]
    assert digits == ["5", None, None, None, None]
    assert receiver.feed(build_event("#", True, 800), 49600) == "#"
    event = parse_event(build_event("*", True, 400, volume=7))
    assert (event.digit, event.end, event.volume, event.duration) == ("*", True, 7, 400)
    with pytest.raises(ValueError):
        parse_event(bytes([42, 0, 0, 0]))


OFFER = (
    b"v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
    b"m=audio 40000 RTP/AVP 8 0 101\r\na=rtpmap:8 PCMA/8000\r\na=rtpmap:0 PCMU/8000\r\n"
    b"a=rtpmap:101 telephone-event/8000\r\na=fmtp:101 0-15\r\na=sendrecv\r\n"
)


def test_sdp_offer_answer_keeps_caller_preference_and_dtmf():
    offer = parse_offer(OFFER)
    assert (offer.address, offer.port, offer.payloads) == ("127.0.0.1", 40000, (8, 0, 101))
    answer = negotiate(offer, ("PCMU", "PCMA"))
    assert (answer.codec, answer.payload_type, answer.dtmf_payload_type) == ("PCMA", 8, 101)
    body = build_answer(answer, "127.0.0.1", 30000, 7, 1).decode()
    assert "m=audio 30000 RTP/AVP 8 101" in body and "a=rtpmap:101 telephone-event/8000" in body


def test_sdp_hold_and_refusals():
    assert parse_offer(OFFER.replace(b"sendrecv", b"sendonly")).on_hold
    assert negotiate(parse_offer(OFFER.replace(b"sendrecv", b"sendonly")), ("PCMU",)).direction == (
        "recvonly"
    )
    assert parse_offer(OFFER.replace(b"c=IN IP4 127.0.0.1", b"c=IN IP4 0.0.0.0")).on_hold
    with pytest.raises(ValueError, match="no common codec"):
        negotiate(parse_offer(OFFER.replace(b"8 0 101", b"18 101")), ("PCMU", "PCMA"))
    with pytest.raises(ValueError, match="m=audio"):
        parse_offer(b"v=0\r\nc=IN IP4 1.2.3.4\r\n")
    with pytest.raises(ValueError, match="IPv4"):
        parse_offer(OFFER.replace(b"c=IN IP4 127.0.0.1", b"c=IN IP4 bogus"))


def test_sdp_late_offer_lists_our_codecs_and_takes_the_answer_from_the_ack():
    ours = parse_offer(build_offer(("PCMU", "PCMA"), "127.0.0.1", 30000, 7, 1))
    assert (ours.port, ours.payloads, ours.direction) == (30000, (0, 8, 101), "sendrecv")
    assert ours.rtpmap[101] == "telephone-event/8000"
    # The answer picks PCMA and numbers the event 96: digits still come to us as 101,
    # the number we offered (RFC 3264 5.1: an offer's numbers are what its author hears).
    answer_body = OFFER.replace(b"8 0 101", b"8 96").replace(b"a=rtpmap:101", b"a=rtpmap:96")
    theirs, answer = accept_answer(answer_body, ("PCMU", "PCMA"))
    assert (theirs.address, theirs.port) == ("127.0.0.1", 40000)
    assert (answer.codec, answer.payload_type, answer.dtmf_payload_type) == ("PCMA", 8, 101)
    _, without_dtmf = accept_answer(OFFER.replace(b"8 0 101", b"0"), ("PCMU", "PCMA"))
    assert without_dtmf.dtmf_payload_type is None
    with pytest.raises(ValueError, match="no SDP answer"):
        accept_answer(b"", ("PCMU",))
    with pytest.raises(ValueError, match="no common codec"):
        accept_answer(OFFER.replace(b"8 0 101", b"18"), ("PCMU", "PCMA"))
