"""Helpers for the real-peer tests: 8 kHz clips, a pcap writer for SIPp, SIPp scenarios,
a tshark capture on loopback and its RTP read-out, a call answered on the real pipeline."""

import asyncio
import contextlib
import shutil
import socket
import struct
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import soxr

from voxrelay.pipeline.audio_io import Clip, read_clip, write_wav
from voxrelay.pipeline.config import PipelineConfig
from voxrelay.pipeline.run import Pipeline
from voxrelay.pipeline.sip import g711
from voxrelay.pipeline.sip.caller import Caller
from voxrelay.pipeline.sip.config import SipConfig
from voxrelay.pipeline.sip.dtmf import build_event
from voxrelay.pipeline.sip.rtp import RtpPacket
from voxrelay.pipeline.sip.server import SipServer

SIPP = "/usr/bin/sipp"
BARESIP = "/usr/bin/baresip"
TSHARK = "/usr/bin/tshark"


def missing(*tools: str) -> str | None:
    absent = [tool for tool in tools if shutil.which(tool) is None]
    return f"needs {', '.join(absent)} (make system-deps)" if absent else None


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _tcp_port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_sip_port() -> int:
    """A port P for baresip's `sip_listen`: it binds UDP P, TCP P and, for TLS, TCP P + 1,
    and gives up on the call if any is taken (seen once in a full run: "SIP/TLS transport
    failed: Address already in use")."""
    for _ in range(100):
        port = free_udp_port()
        if port < 65535 and _tcp_port_free(port) and _tcp_port_free(port + 1):
            return port
    raise RuntimeError("no port P with UDP P, TCP P and TCP P + 1 free on 127.0.0.1")


def clip_8k(path: Path, trailing_silence_s: float = 0.0) -> bytes:
    """A real clip as 8 kHz mono PCM16 (as a phone line would carry it)."""
    return to_8k(read_clip(path), trailing_silence_s)


def to_8k(clip: Clip, trailing_silence_s: float = 0.0) -> bytes:
    """`clip` as 8 kHz mono PCM16, then `trailing_silence_s` of line silence."""
    mono = clip.mono_float()
    narrow = soxr.resample(mono, clip.sample_rate, 8000)
    pcm = np.clip(narrow * 32768, -32768, 32767).astype("<i2")
    return np.concatenate([pcm, np.zeros(int(8000 * trailing_silence_s), "<i2")]).tobytes()


def write_8k_wav(path: Path, pcm16: bytes) -> Path:
    write_wav(path, pcm16, 8000)
    return path


def rtp_stream(pcm16: bytes, digits: str = "", codec: str = "PCMU") -> list[bytes]:
    """G.711 packets every 20 ms, then RFC 4733 presses of `digits`; one SSRC, one
    sequence, so the receiver sees one stream."""
    payload_type = {"PCMU": 0, "PCMA": 8}[codec]
    packets: list[bytes] = []
    sequence, timestamp = 1000, 16000
    for offset in range(0, len(pcm16), 320):
        frame = pcm16[offset : offset + 320].ljust(320, b"\0")
        packets.append(RtpPacket(payload_type, sequence, timestamp, 0x1234,
                                 g711.encode(frame, codec), offset == 0).to_bytes())  # fmt: skip
        sequence, timestamp = sequence + 1, timestamp + 160
    for digit in digits:
        for duration, end in ((160, False), (320, False), (480, False), (640, True), (640, True)):
            event = build_event(digit, end, duration)
            packets.append(RtpPacket(101, sequence, timestamp, 0x1234, event).to_bytes())
            sequence += 1
        timestamp += 800
        for _ in range(10):  # 200 ms of silence between keys
            silence = g711.encode(bytes(320), codec)
            packets.append(RtpPacket(payload_type, sequence, timestamp, 0x1234,
                                     silence).to_bytes())  # fmt: skip
            sequence, timestamp = sequence + 1, timestamp + 160
    return packets


def write_pcap(path: Path, rtp_packets: list[bytes], src_port: int = 6000, dst_port: int = 6001):
    """A libpcap file (Ethernet/IPv4/UDP) with one RTP packet every 20 ms, as SIPp's
    play_pcap_audio reads it (it rewrites addresses and ports to the call's)."""
    out = bytearray(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
    for index, rtp in enumerate(rtp_packets):
        udp = struct.pack("!HHHH", src_port, dst_port, 8 + len(rtp), 0) + rtp
        total = 20 + len(udp)
        ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, total, index & 0xFFFF, 0, 64, 17, 0,
                         bytes([127, 0, 0, 1]), bytes([127, 0, 0, 1]))  # fmt: skip
        checksum = sum(struct.unpack("!10H", ip))
        checksum = (checksum & 0xFFFF) + (checksum >> 16)
        ip = (
            ip[:10]
            + struct.pack("!H", ~((checksum & 0xFFFF) + (checksum >> 16)) & 0xFFFF)
            + ip[12:]
        )
        frame = bytes(12) + b"\x08\x00" + ip + udp
        at_us = index * 20_000
        out += struct.pack("<IIII", at_us // 1_000_000, at_us % 1_000_000, len(frame), len(frame))
        out += frame
    path.write_bytes(bytes(out))
    return path


class Capture:
    """tshark on loopback, UDP only, written to a pcap file until stopped."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.process = subprocess.Popen(
            [TSHARK, "-i", "lo", "-f", "udp", "-w", str(path), "-q"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 10
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.1)  # tshark creates the file once it captures
        time.sleep(0.5)

    def stop(self) -> None:
        time.sleep(0.3)
        self.process.terminate()
        self.process.wait(10)

    def rtp_from(self, port: int) -> list[tuple[float, str, int, int, bool]]:
        """(capture s, destination ip, destination port, RTP timestamp, marker) of every
        UDP packet the bridge sent from `port`, decoded as RTP."""
        fields = subprocess.run(
            [TSHARK, "-r", str(self.path), "-d", f"udp.port=={port},rtp",
             "-Y", f"udp.srcport=={port}", "-T", "fields", "-e", "frame.time_epoch",
             "-e", "ip.dst", "-e", "udp.dstport", "-e", "rtp.timestamp", "-e", "rtp.marker"],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        rows = []
        for line in fields.splitlines():
            at, dst, dport, stamp, marker = line.split("\t")
            rows.append((float(at), dst, int(dport), int(stamp or -1), marker in ("1", "True")))
        return rows


def payload_types(capture: Capture, port: int) -> set[int]:
    """The RTP payload types of the packets the bridge sent from `port`."""
    fields = subprocess.run(
        [TSHARK, "-r", str(capture.path), "-d", f"udp.port=={port},rtp",
         "-Y", f"udp.srcport=={port}", "-T", "fields", "-e", "rtp.p_type"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return {int(value) for value in fields.split()}


def pacing_ms(rows: list[tuple[float, str, int, int, bool]]) -> tuple[np.ndarray, np.ndarray]:
    """(|gap - 20 ms| between consecutive packets of a talkspurt, RFC 3550 interarrival
    jitter after each packet). The jitter estimator is the one RTP receivers and
    Wireshark report: J += (|D| - J) / 16, D the transit-time difference of a pair."""
    deviations, jitter = [], []
    estimate = 0.0
    for previous, current in zip(rows, rows[1:], strict=False):
        gap_ms = (current[0] - previous[0]) * 1000
        if not current[4]:  # a marker starts a talkspurt: the gap before it is silence
            deviations.append(abs(gap_ms - 20))
        timestamp_ms = ((current[3] - previous[3]) % (1 << 32)) / 8
        estimate += (abs(gap_ms - timestamp_ms) - estimate) / 16
        jitter.append(estimate)
    return np.array(deviations), np.array(jitter)


SCENARIO_HEAD = '<?xml version="1.0" encoding="ISO-8859-1" ?>\n<scenario name="{name}">\n'
INVITE = """  <send retrans="500"><![CDATA[
INVITE sip:bot@[remote_ip]:[remote_port] SIP/2.0
Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
From: sipp <sip:sipp@[local_ip]:[local_port]>;tag=[pid]SIPpTag[call_number]
To: <sip:bot@[remote_ip]:[remote_port]>
Call-ID: [call_id]
CSeq: 1 INVITE
Contact: <sip:sipp@[local_ip]:[local_port]>
Max-Forwards: 70
Content-Type: application/sdp
Content-Length: [len]

v=0
o=sipp 1 1 IN IP[local_ip_type] [local_ip]
s=-
c=IN IP[media_ip_type] [media_ip]
t=0 0
m=audio [media_port] RTP/AVP 0 101
a=rtpmap:0 PCMU/8000
a=rtpmap:101 telephone-event/8000
a=fmtp:101 0-15
]]></send>
"""


# An INVITE without a body: a late offer, the bridge offers in its 200 OK.
INVITE_NO_SDP = INVITE.split("Content-Type:")[0] + "Content-Length: 0\n\n]]></send>\n"


# The bridge's 200 OK to a late offer carries its offer: both G.711 laws, then DTMF.
LATE_OFFER_200 = """  <recv response="200" rtd="true">
    <action>
      <ereg regexp="m=audio [0-9]+ RTP/AVP 0 8 101" search_in="body" check_it="true"
            assign_to="offer"/>
    </action>
  </recv>
  <Reference variables="offer"/>
"""


def answer_sdp(*payloads: int) -> str:
    """SIPp's SDP answer to the bridge's late offer, with the payload types it takes."""
    names = {0: "PCMU/8000", 8: "PCMA/8000", 18: "G729/8000", 101: "telephone-event/8000"}
    rtpmaps = "".join(f"a=rtpmap:{p} {names[p]}\n" for p in payloads)
    return (
        "v=0\no=sipp 1 1 IN IP[local_ip_type] [local_ip]\ns=-\nc=IN IP[media_ip_type] "
        f"[media_ip]\nt=0 0\nm=audio [media_port] RTP/AVP {' '.join(map(str, payloads))}\n"
        + rtpmaps
    )


def in_dialog(method: str, cseq: int, sdp: str = "") -> str:
    retrans = "" if method == "ACK" else ' retrans="500"'  # an ACK gets no response
    body = (
        f"Content-Type: application/sdp\nContent-Length: [len]\n\n{sdp}"
        if sdp
        else ("Content-Length: 0\n\n")
    )
    return f"""  <send{retrans}><![CDATA[
{method} sip:bot@[remote_ip]:[remote_port] SIP/2.0
Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
From: sipp <sip:sipp@[local_ip]:[local_port]>;tag=[pid]SIPpTag[call_number]
[last_To:]
Call-ID: [call_id]
CSeq: {cseq} {method}
Contact: <sip:sipp@[local_ip]:[local_port]>
Max-Forwards: 70
{body}]]></send>
"""


ANSWER_BYE = """  <recv request="BYE"/>
  <send><![CDATA[
SIP/2.0 200 OK
[last_Via:]
[last_From:]
[last_To:]
[last_Call-ID:]
[last_CSeq:]
Content-Length: 0

]]></send>
"""


def run_sipp(scenario: str, tmp: Path, target: tuple[str, int], *args: str, timeout_s=90):
    path = tmp / "scenario.xml"
    path.write_text(scenario)
    errors_path = tmp / "sipp_errors.log"
    command = [SIPP, f"{target[0]}:{target[1]}", "-sf", str(path), "-m", "1", "-i", "127.0.0.1",
               "-p", str(free_udp_port()), "-timeout", f"{timeout_s}s", "-timeout_error",
               "-trace_err", "-error_file", str(errors_path), "-nostdin", *args]  # fmt: skip
    result = subprocess.run(
        command, cwd=tmp, capture_output=True, text=True, timeout=timeout_s + 30
    )
    errors = errors_path.read_text() if errors_path.exists() else ""
    return result.returncode, result.stdout[-3000:] + result.stderr[-2000:] + errors[-3000:]


class LoopThread:
    """An event loop in a daemon thread, for servers that blocking peers talk to."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def call(self, coro, timeout: float = 180.0):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@contextlib.asynccontextmanager
async def answered_call(config: PipelineConfig):
    """The real pipeline behind a SIP server, and the Python caller's call to it answered
    (200 OK): yields (the call's bridge, the caller, when the 200 OK came)."""
    async with Pipeline(config, transport_name="sip") as pipeline:
        server = SipServer(pipeline, SipConfig(port=0))
        await server.start()
        caller = Caller(server.local)
        await caller.open()
        try:
            assert (await caller.dial()).status == 200
            answered_ns = time.perf_counter_ns()
            yield server.calls[caller.call_id].bridge, caller, answered_ns
        finally:
            caller.close()
            server.stop()
