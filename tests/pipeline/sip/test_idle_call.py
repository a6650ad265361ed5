"""A caller who stops answering: a real SIP call (the Python caller over UDP, G.711 RTP)
on the real pipeline hears the greeting, then "Are you still there?" after the quiet,
then the goodbye, and the server hangs up (BYE) once it has played."""

import asyncio
import time

import jiwer
import pytest

from tests.pipeline.sip.peers import answered_call
from tests.pipeline.sip.test_greeting_call import _heard, _words
from voxrelay.pipeline.config import PipelineConfig

pytestmark = pytest.mark.slow

GREETING = "Hello, front desk."
PROMPT = "Are you still there?"
GOODBYE = "Thanks for calling, talk to you later."  # not the bridge's goodbye pattern


def test_a_quiet_caller_is_asked_then_hung_up_on():
    async def call():
        config = PipelineConfig(
            asr={"turn_detection": "silence"},
            greeting=GREETING,
            idle_prompt_s=1.5,
            idle_prompt=PROMPT,
            idle_prompts=1,
            idle_goodbye=GOODBYE,
        )
        async with answered_call(config) as (bridge, caller, answered_ns):
            # The caller sends silence, as a phone line does, and says nothing.
            quiet = asyncio.create_task(caller.stream(bytes(2 * 8000 * 30)))
            async with asyncio.timeout(60):
                await caller.hung_up_by_server.wait()
            bye_s = (time.perf_counter_ns() - answered_ns) / 1e9
            quiet.cancel()
        return bye_s, bridge, caller

    bye_s, bridge, caller = asyncio.run(call())
    traces = {t.turn_id: t for t in bridge.traces}
    said = [traces[turn].reply_text for turn in sorted(traces)]
    assert said == [GREETING, PROMPT, GOODBYE], said
    assert all(t.opening and not t.transcript and not t.error for t in traces.values())
    # The goodbye played out before the BYE: the caller heard all three.
    heard = _words(_heard(caller.received_pcm16()))
    print(f"\ncaller heard {heard!r}; BYE {bye_s:.1f} s after the 200 OK")
    assert jiwer.wer(_words(f"{GREETING} {PROMPT} {GOODBYE}"), heard) <= 0.3
    assert any(e.kind == "hangup" and "stopped answering" in e.detail for e in bridge.events), [
        (e.kind, e.detail) for e in bridge.events
    ]
    # Greeting, 1.5 s of quiet, the prompt, 1.5 s, the goodbye: not sooner, not much later.
    assert 4.0 < bye_s < 20.0
