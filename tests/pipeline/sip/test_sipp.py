"""SIPp against the bridge (fake pipeline, no models): OPTIONS, CANCEL before answer,
malformed requests and garbage datagrams, methods we do not do, a source outside the
allowlist, a late offer whose ACK brings no answer we can take. All on 127.0.0.1."""

import pytest

from tests.pipeline.sip.fake import FakePipeline
from tests.pipeline.sip.peers import (
    ANSWER_BYE,
    INVITE,
    INVITE_NO_SDP,
    LATE_OFFER_200,
    SCENARIO_HEAD,
    SIPP,
    LoopThread,
    answer_sdp,
    in_dialog,
    missing,
    run_sipp,
)
from voxrelay.pipeline.sip.config import SipConfig
from voxrelay.pipeline.sip.server import SipServer

pytestmark = pytest.mark.skipif(missing(SIPP) is not None, reason=str(missing(SIPP)))


@pytest.fixture(scope="module")
def servers():
    thread = LoopThread()
    made = {}

    async def start():
        for name, overrides in (
            ("open", {}),
            ("ringing", {"answer_delay_s": 15.0}),  # CANCEL lands while ringing, even under load
            ("strict", {"allow": ("10.0.0.0/8",)}),
        ):
            server = SipServer(FakePipeline(), SipConfig(port=0, **overrides))
            made[name] = (server, await server.start())

    thread.call(start())
    yield made

    async def stop():
        for server, _ in made.values():
            server.stop()

    thread.call(stop())
    thread.stop()


def request(method: str, body: str = "", cseq_method: str | None = None, extra: str = "") -> str:
    return f"""  <send><![CDATA[
{method} sip:bot@[remote_ip]:[remote_port] SIP/2.0
Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
From: sipp <sip:sipp@[local_ip]:[local_port]>;tag=[pid]SIPpTag[call_number]
To: <sip:bot@[remote_ip]:[remote_port]>
Call-ID: [call_id]
CSeq: 1 {cseq_method or method}
Max-Forwards: 70
{extra}Content-Length: [len]

{body}]]></send>
"""


def scenario(name: str, *steps: str) -> str:
    return SCENARIO_HEAD.format(name=name) + "".join(steps) + "</scenario>\n"


def test_options_ping(servers, tmp_path):
    code, output = run_sipp(
        scenario("options", request("OPTIONS"), '  <recv response="200"/>\n'),
        tmp_path,
        servers["open"][1],
    )
    assert code == 0, output


def test_malformed_garbage_and_unsupported_methods(servers, tmp_path):
    steps = [
        request("OPTIONS", extra="This header line has no colon\n"),  # 400
        '  <recv response="400"/>\n',
        "  <send><![CDATA[\n\x01\x02 this is not SIP at all\n\n]]></send>\n",  # dropped
        request("REGISTER"),
        '  <recv response="405"/>\n',
        request("FROBNICATE"),
        '  <recv response="501"/>\n',
        request("BYE"),  # no such dialog
        '  <recv response="481"/>\n',
        request("OPTIONS"),  # still alive after all that
        '  <recv response="200"/>\n',
    ]
    code, output = run_sipp(scenario("odd", *steps), tmp_path, servers["open"][1])
    assert code == 0, output
    assert servers["open"][0].dropped_datagrams >= 2  # the 400 one and the garbage


def test_cancel_before_answer(servers, tmp_path):
    cancel = """  <send><![CDATA[
CANCEL sip:bot@[remote_ip]:[remote_port] SIP/2.0
[last_Via:]
From: sipp <sip:sipp@[local_ip]:[local_port]>;tag=[pid]SIPpTag[call_number]
To: <sip:bot@[remote_ip]:[remote_port]>
Call-ID: [call_id]
CSeq: 1 CANCEL
Max-Forwards: 70
Content-Length: 0

]]></send>
"""
    ack = """  <send><![CDATA[
ACK sip:bot@[remote_ip]:[remote_port] SIP/2.0
[last_Via:]
From: sipp <sip:sipp@[local_ip]:[local_port]>;tag=[pid]SIPpTag[call_number]
[last_To:]
Call-ID: [call_id]
CSeq: 1 ACK
Max-Forwards: 70
Content-Length: 0

]]></send>
"""
    steps = [
        INVITE,
        '  <recv response="100" optional="true"/>\n',
        '  <recv response="180"/>\n',
        cancel,
        '  <recv response="200"/>\n',
        '  <recv response="487"/>\n',
        ack,
    ]
    server, address = servers["ringing"]
    code, output = run_sipp(scenario("cancel", *steps), tmp_path, address, "-mi", "127.0.0.1")
    assert code == 0, output
    assert not server.calls
    assert server.ended[-1].end_reason == "caller cancelled"
    assert not server.host.sessions  # cancelled before answer: no session was ever opened


def test_source_outside_allowlist_is_forbidden(servers, tmp_path):
    server, address = servers["strict"]
    code, output = run_sipp(
        scenario("forbidden", request("OPTIONS"), '  <recv response="403"/>\n'), tmp_path, address
    )
    assert code == 0, output
    assert not server.calls


@pytest.mark.parametrize(
    ("sdp", "why"),
    [
        ("", "the ACK carries no SDP answer"),
        (answer_sdp(18), "no common codec"),  # G.729 only: not a codec we offered
    ],
    ids=["no-answer", "no-common-codec"],
)
def test_late_offer_without_a_usable_answer_in_the_ack_ends_with_bye(servers, tmp_path, sdp, why):
    server, address = servers["open"]
    ended_before = len(server.ended)
    steps = [
        INVITE_NO_SDP,
        '  <recv response="100" optional="true"/>\n',
        '  <recv response="180" optional="true"/>\n',
        LATE_OFFER_200,
        in_dialog("ACK", 1, sdp),
        ANSWER_BYE,  # the bridge hangs up at once
    ]
    code, output = run_sipp(scenario("late", *steps), tmp_path, address, "-mi", "127.0.0.1")
    assert code == 0, output
    assert len(server.ended) == ended_before + 1 and not server.calls
    call = server.ended[-1]
    assert call.end_reason.startswith("bot hung up: no usable SDP answer in the ACK"), call
    assert why in call.end_reason
    assert call.bridge is None and not server.host.sessions  # media never started
