"""A call centre's bot answers the phone with its greeting: a real SIP call (the Python
caller over UDP, G.711 RTP) on the real pipeline hears it before saying a word, then
speaks and is answered."""

import asyncio

import jiwer
import numpy as np
import pytest
import soxr

from tests.pipeline.sip.peers import answered_call, clip_8k
from voxrelay.asr.config import ASRConfig
from voxrelay.asr.models import load_asr
from voxrelay.pipeline.config import PipelineConfig

pytestmark = pytest.mark.slow

GREETING = "Thank you for calling the front desk. How can I help you?"


def _words(text: str) -> str:
    return " ".join(jiwer.RemovePunctuation()(text.lower()).split())


def _heard(pcm16: bytes) -> str:
    """What tiny.en hears in 8 kHz call audio."""
    samples = np.frombuffer(pcm16, dtype="<i2").astype(np.float32) / 32768
    whisper = load_asr(ASRConfig(model="tiny.en")).whisper["tiny.en"]
    segments, _ = whisper.transcribe(soxr.resample(samples, 8000, 16_000), language="en")
    return " ".join(segment.text for segment in segments)


def test_the_caller_hears_the_greeting_then_is_answered(clips_dir):
    speech = clip_8k(clips_dir / "goforward.raw", trailing_silence_s=1.5)

    async def call():
        config = PipelineConfig(
            asr={"turn_detection": "silence"},
            tts={"noise_scale": 0.0, "noise_w_scale": 0.0},  # deterministic takes
            greeting=GREETING,
        )
        async with answered_call(config) as (bridge, caller, answered_ns):
            async with asyncio.timeout(30):  # the greeting plays, then silence
                while 0 not in {t.turn_id for t in bridge.traces}:
                    await asyncio.sleep(0.05)
            greeting = caller.received_pcm16()
            first_rtp_ms = (caller.received[0][0] - answered_ns) / 1e6
            await caller.stream(speech)
            async with asyncio.timeout(60):
                while 1 not in {t.turn_id for t in bridge.traces}:
                    await asyncio.sleep(0.05)
            await caller.hangup()
        return greeting, first_rtp_ms, {t.turn_id: t for t in bridge.traces}

    greeting, first_rtp_ms, traces = asyncio.run(call())
    print(f"\nfirst RTP of the greeting {first_rtp_ms:.0f} ms after the 200 OK")
    assert first_rtp_ms < 1000, "the caller waited for the greeting"
    assert len(greeting) / 2 / 8000 > 2.0, "under 2 s of greeting on the line"
    heard = _heard(greeting)
    print(f"caller heard {heard!r}")
    assert jiwer.wer(_words(GREETING), _words(heard)) <= 0.25
    assert traces[0].opening and traces[0].reply_text == GREETING
    assert _words(traces[1].transcript) == "go forward 10 meters" and traces[1].reply_text
