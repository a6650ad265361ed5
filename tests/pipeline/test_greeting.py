"""The agent speaks first (`PipelineConfig.greeting`, Pipeline.greet): the greeting is
spoken when the session opens, the user's turns come after it, speaking over it cuts
it, and the history holds what was heard of it."""

import asyncio
import json
import re
import time

import jiwer
import numpy as np
import pytest
import soxr

from tests.pipeline.test_barge_in import _histories
from voxrelay.asr.config import ASRConfig
from voxrelay.asr.models import load_asr
from voxrelay.pipeline.audio_io import Clip, read_clip
from voxrelay.pipeline.config import PipelineConfig
from voxrelay.pipeline.demo import run_once
from voxrelay.pipeline.heard import CUT_MARK
from voxrelay.pipeline.run import Pipeline

GREETING = "Thanks for calling the front desk. How can I help you today?"
# Long enough to be spoken over: ~9 s of speech.
LONG_GREETING = (
    "Thanks for calling the front desk of the Harbour Hotel. Our restaurant is open from "
    "seven in the morning until ten at night, and the pool until nine. How can I help?"
)


class Sink:
    def __init__(self) -> None:
        self.audio: dict[int, bytearray] = {}
        self.rate = 0
        self.texts: list[tuple[int, str, str]] = []
        self.rows: dict[int, object] = {}
        self.first_audio = asyncio.Event()

    def on_audio(self, turn_id: int, pcm16: bytes, sample_rate: int) -> None:
        self.audio.setdefault(turn_id, bytearray()).extend(pcm16)
        self.rate = sample_rate
        self.first_audio.set()

    def on_text(self, turn_id: int, kind: str, text: str) -> None:
        self.texts.append((turn_id, kind, text))

    def on_error(self, turn_id: int, message: str) -> None:
        self.texts.append((turn_id, "error", message))

    def on_audio_end(self, turn_id: int) -> None:
        pass

    def on_turn_done(self, trace) -> None:
        self.rows[trace.turn_id] = trace

    def on_input_end(self, lost: bool) -> None:
        pass

    async def row(self, turn_id: int, timeout_s: float = 60) -> object:
        deadline = time.monotonic() + timeout_s
        while turn_id not in self.rows:
            assert time.monotonic() < deadline, f"turn {turn_id} never finished: {self.texts}"
            await asyncio.sleep(0.05)
        return self.rows[turn_id]


def _said(pcm16: bytes, rate: int) -> str:
    """What tiny.en hears in the reply audio."""
    samples = np.frombuffer(bytes(pcm16), dtype="<i2").astype(np.float32) / 32768
    whisper = load_asr(ASRConfig(model="tiny.en")).whisper["tiny.en"]
    segments, _ = whisper.transcribe(soxr.resample(samples, rate, 16_000), language="en")
    return " ".join(segment.text for segment in segments)


def _words(text: str) -> str:
    return " ".join(jiwer.RemovePunctuation()(text.lower()).split())


def test_a_greeting_is_refused_where_it_cannot_be_spoken(tmp_path):
    with pytest.raises(ValueError, match="greeting is empty"):
        PipelineConfig(greeting="  ")
    with pytest.raises(ValueError, match="at most 1000 are spoken"):
        PipelineConfig(greeting="word " * 300)
    clip = Clip(np.zeros(1600, np.int16), 16_000, 1)
    with pytest.raises(ValueError, match="a greeting needs --mode streaming"):
        asyncio.run(
            run_once(clip, tmp_path / "out.wav", "naive", None, PipelineConfig(greeting="Hi."))
        )


@pytest.mark.slow
def test_the_agent_speaks_first_and_answers_the_user_after_it(clips_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("VOXRELAY_LOG_DIR", str(tmp_path))
    monkeypatch.setenv("VOXRELAY_LOG_LEVEL", "DEBUG")  # the LLM logs each request's history
    clip = read_clip(clips_dir / "goforward.raw").with_silence(1.0)

    async def scenario():
        config = PipelineConfig(asr={"turn_detection": "silence"}, greeting=GREETING)
        async with Pipeline(config) as pipeline:
            sink = Sink()
            session = pipeline.open_session(sink, "test")
            greeting = await sink.row(0)  # written once it has played
            await pipeline.feed(session.session_id, clip, realtime=True)
            answer = await sink.row(1)
            with pytest.raises(ValueError, match="only before the session's first audio"):
                pipeline.greet(session.session_id, "Hello again.")
            return sink, greeting, answer

    sink, greeting, answer = asyncio.run(scenario())
    assert greeting.opening and not greeting.transcript and not greeting.error
    assert greeting.reply_text == GREETING and not greeting.barge_in_ns
    assert jiwer.wer(_words(GREETING), _words(_said(sink.audio[0], sink.rate))) <= 0.2
    assert not answer.opening and _words(answer.transcript) == "go forward 10 meters"
    assert answer.reply_text and answer.to_dict()["ttfa_ms"] is not None
    # The user's turn is answered with the greeting as the history's first message.
    assert _histories(tmp_path / "llm.log")[1] == [{"role": "assistant", "content": GREETING}]


@pytest.mark.slow
def test_speaking_over_the_greeting_cuts_it_and_the_history_keeps_what_was_heard(
    clips_dir, tmp_path, monkeypatch
):
    monkeypatch.setenv("VOXRELAY_LOG_DIR", str(tmp_path))
    monkeypatch.setenv("VOXRELAY_LOG_LEVEL", "DEBUG")
    clip = read_clip(clips_dir / "goforward.raw").with_silence(1.0)

    async def scenario():
        config = PipelineConfig(asr={"turn_detection": "silence"}, continue_turn_ms=0)
        async with Pipeline(config) as pipeline:
            sink = Sink()
            session = pipeline.open_session(sink, "test")
            assert pipeline.greet(session.session_id, LONG_GREETING) == 0
            await asyncio.wait_for(sink.first_audio.wait(), 30)
            await asyncio.sleep(1.0)  # a second of it heard, then the caller speaks
            await pipeline.feed(session.session_id, clip, realtime=True)
            return sink, await sink.row(0), await sink.row(1)

    sink, greeting, answer = asyncio.run(scenario())
    assert (1, "response.audio.clear", "") in sink.texts
    assert greeting.opening and greeting.barge_in_ns and greeting.heard_text.endswith(CUT_MARK)
    heard = greeting.heard_text
    assert len(heard) < len(LONG_GREETING) and LONG_GREETING.startswith(heard.rstrip(CUT_MARK))
    assert _words(answer.transcript) == "go forward 10 meters" and answer.reply_text
    assert _histories(tmp_path / "llm.log")[1] == [{"role": "assistant", "content": heard}]


def _agent_prompts(log_path) -> dict[int, str]:
    """Turn -> the prompt of a reply of the agent's own (the LLM's debug log)."""
    found = {}
    for line in log_path.read_text().splitlines():
        if match := re.search(r"turn (\d+) agent prompt (.*)$", line):
            found[int(match.group(1))] = json.loads(match.group(2))
    return found


@pytest.mark.slow
def test_the_agent_speaks_up_later_as_written_or_in_the_models_words(
    clips_dir, tmp_path, monkeypatch
):
    """Pipeline.say after a turn: a verbatim line, then one the model writes from the
    conversation under this reply's instructions; both are turns of the agent's own in
    the history of the user's next turn; say is refused while a reply plays."""
    monkeypatch.setenv("VOXRELAY_LOG_DIR", str(tmp_path))
    monkeypatch.setenv("VOXRELAY_LOG_LEVEL", "DEBUG")
    clip = read_clip(clips_dir / "goforward.raw").with_silence(1.0)
    still_there = "Are you still there?"
    instructions = "You are a robot's voice. Ask the user how far it should go next."

    async def scenario():
        config = PipelineConfig(asr={"turn_detection": "silence"})
        async with Pipeline(config) as pipeline:
            sink = Sink()
            sid = pipeline.open_session(sink, "test").session_id
            await pipeline.feed(sid, clip, realtime=True)
            first = await sink.row(0)  # written once its reply has played
            with pytest.raises(ValueError, match="not both"):
                pipeline.say(sid, still_there, instructions)
            pipeline.say(sid, still_there)
            verbatim = await sink.row(1)
            pipeline.say(sid, instructions=instructions)
            written = await sink.row(2)
            await pipeline.feed(sid, clip, realtime=True)
            while 3 not in sink.audio:
                await asyncio.sleep(0.02)
            with pytest.raises(ValueError, match="a reply is coming or playing"):
                pipeline.say(sid, still_there)
            return sink, first, verbatim, written, await sink.row(3)

    sink, first, verbatim, written, last = asyncio.run(scenario())
    assert verbatim.opening and not verbatim.transcript and verbatim.reply_text == still_there
    assert verbatim.to_dict()["ttfa_ms"] is None and not verbatim.error
    assert jiwer.wer(_words(still_there), _words(_said(sink.audio[1], sink.rate))) <= 0.2
    assert written.opening and written.reply_text and not written.error
    prompt = _agent_prompts(tmp_path / "llm.log")[2]
    assert prompt.startswith(f"<|im_start|>system\n{instructions}<|im_end|>"), prompt
    assert still_there in prompt and prompt.endswith("<|im_start|>assistant\n")
    assert _words(last.transcript) == "go forward 10 meters" and not last.opening
    assert _histories(tmp_path / "llm.log")[3] == [
        {"role": "user", "content": first.transcript},
        {"role": "assistant", "content": first.reply_text},
        {"role": "assistant", "content": still_there},
        {"role": "assistant", "content": written.reply_text},
    ]
