"""The channel interface over both transports, and record decoding at the boundary."""

import time

import pytest

from voxrelay.ipc.channel import ChannelSpec, make_channel, open_receiver, open_sender
from voxrelay.ipc.records import (
    HEADER_BYTES,
    RecordKind,
    decode,
    encode,
    split_text_pair,
    text_pair,
)


@pytest.mark.parametrize("transport", ["shm", "zmq"])
def test_same_records_over_either_transport(transport):
    spec = ChannelSpec.parse(make_channel(transport, 1 << 16).encode())
    receiver = open_receiver(spec)
    sender = open_sender(spec)
    for i in range(50):
        sender.send(
            RecordKind.TOKEN,
            i.to_bytes(4, "little"),
            b"word",
            session_id=3,
            turn_id=i,
            origin_ns=-i,
        )
    received = []
    deadline = time.monotonic() + 5
    while len(received) < 50 and time.monotonic() < deadline:
        record = receiver.recv()
        if record is None:
            time.sleep(0.001)
            continue
        received.append(record)
    assert [r.turn_id for r in received] == list(range(50))
    assert all(r.payload[4:] == b"word" and r.session_id == 3 for r in received)
    assert [r.origin_ns for r in received] == [-i for i in range(50)]
    sender.close()
    receiver.close()


def test_unknown_transport_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown channel transport"):
        make_channel("carrier-pigeon", 4096)
    with pytest.raises(ValueError, match="unknown channel transport"):
        ChannelSpec.parse("udp:1,2,3")


def test_decode_rejects_malformed_records():
    good = encode(RecordKind.FINAL, b"hello", session_id=1)
    assert decode(good).payload == b"hello"
    with pytest.raises(ValueError, match="shorter than"):
        decode(good[:10])
    with pytest.raises(ValueError, match="does not fit"):
        decode(good[:-2])
    bad_kind = bytearray(good)
    bad_kind[4] = 250
    with pytest.raises(ValueError, match="unknown record kind"):
        decode(bytes(bad_kind))
    assert len(encode(RecordKind.PAD)) == HEADER_BYTES


def test_text_pair_round_trip_and_corruption():
    assert split_text_pair(text_pair("stable wörds", " tail")) == ("stable wörds", " tail")
    with pytest.raises(ValueError):
        split_text_pair(b"\xff\x00\x00\x00abc")
