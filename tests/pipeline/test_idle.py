"""The agent speaks up when the user goes quiet (pipeline/idle.py), on the real stages:
a prompt after the quiet, then giving up (the session's on_idle_end), nothing more
while the user stays quiet, and the count starting over once they speak."""

import asyncio
import time

import pytest

from tests.pipeline.test_greeting import Sink, _words
from voxrelay.pipeline.audio_io import read_clip
from voxrelay.pipeline.config import PipelineConfig
from voxrelay.pipeline.run import Pipeline

PROMPT = "Still there?"


def test_idle_settings_are_checked():
    with pytest.raises(ValueError, match="idle_prompt_s must be 0"):
        PipelineConfig(idle_prompt_s=0.2)
    with pytest.raises(ValueError, match="idle_prompt is empty"):
        PipelineConfig(idle_prompt_s=5, idle_prompt=" ")
    with pytest.raises(ValueError, match="idle_prompts must be in 1..10"):
        PipelineConfig(idle_prompts=0)
    assert PipelineConfig(idle_goodbye="").idle_goodbye == ""


@pytest.mark.slow
def test_a_quiet_user_is_prompted_then_given_up_on_until_they_speak(clips_dir):
    clip = read_clip(clips_dir / "goforward.raw").with_silence(1.0)

    async def scenario():
        config = PipelineConfig(
            asr={"turn_detection": "silence"},
            idle_prompt_s=1.0,
            idle_prompt=PROMPT,
            idle_prompts=1,
            idle_goodbye="",
        )
        async with Pipeline(config) as pipeline:
            sink = Sink()
            session = pipeline.open_session(sink, "test")
            gave_up: list[tuple[float, bool]] = []
            session.on_idle_end = lambda s, goodbye: gave_up.append((time.monotonic(), goodbye))
            await pipeline.feed(session.session_id, clip, realtime=True)
            answered = await sink.row(0)
            prompt = await sink.row(1)
            played_at = time.monotonic()
            await asyncio.sleep(3.0)  # quiet on: it gives up once, and asks no more
            quiet_rows = sorted(sink.rows)
            await pipeline.feed(session.session_id, clip, realtime=True)
            spoken = await sink.row(2)
            again = await sink.row(3)
            return answered, prompt, played_at, gave_up, quiet_rows, spoken, again

    answered, prompt, played_at, gave_up, quiet_rows, spoken, again = asyncio.run(scenario())
    assert _words(answered.transcript) == "go forward 10 meters" and answered.reply_text
    assert prompt.opening and prompt.reply_text == PROMPT and not prompt.transcript
    assert quiet_rows == [0, 1], "prompted again after giving up"
    assert len(gave_up) == 1 and gave_up[0][1] is False  # no goodbye configured
    assert 0.5 < gave_up[0][0] - played_at < 2.5  # ~1 s after the prompt played
    assert _words(spoken.transcript) == "go forward 10 meters"
    assert again.opening and again.reply_text == PROMPT  # the count started over
