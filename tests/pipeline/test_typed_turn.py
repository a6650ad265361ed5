"""A turn the user types (Pipeline.send_text): numbered by the ASR behind the audio sent
before it, answered as a spoken turn is, and cutting a reply still playing."""

import asyncio

import jiwer
import numpy as np
import pytest

from tests.pipeline.test_barge_in import _histories
from tests.pipeline.test_greeting import Sink, _said, _words
from voxrelay.asr.events import TYPED
from voxrelay.pipeline.audio_io import read_clip
from voxrelay.pipeline.config import MAX_USER_TEXT_CHARS, PipelineConfig
from voxrelay.pipeline.heard import CUT_MARK
from voxrelay.pipeline.run import Pipeline

QUESTION = "What is the capital of France?"
LONG_ASK = "Tell me a long story about a dragon who lives in a castle by the sea."


@pytest.mark.slow
def test_a_typed_turn_is_answered_and_the_next_spoken_turn_follows_it(
    clips_dir, tmp_path, monkeypatch
):
    monkeypatch.setenv("VOXRELAY_LOG_DIR", str(tmp_path))
    monkeypatch.setenv("VOXRELAY_LOG_LEVEL", "DEBUG")  # the LLM logs each request's history
    clip = read_clip(clips_dir / "goforward.raw").with_silence(1.0)

    async def scenario():
        config = PipelineConfig(asr={"turn_detection": "silence"})
        async with Pipeline(config) as pipeline:
            sink = Sink()
            session = pipeline.open_session(sink, "test")
            pipeline.send_text(session.session_id, f"  {QUESTION}\n")
            typed = await sink.row(0)
            with pytest.raises(ValueError, match="only before the session's first audio"):
                pipeline.greet(session.session_id, "Hello.")
            await pipeline.feed(session.session_id, clip, realtime=True)
            return sink, typed, await sink.row(1)

    sink, typed, spoken = asyncio.run(scenario())
    assert typed.transcript == QUESTION and typed.asr_model == TYPED and not typed.error
    assert (0, "speech.started", TYPED) in sink.texts
    assert (0, "transcript.final", QUESTION) in sink.texts
    # Answered out loud: the reply's audio says the reply's words.
    assert typed.reply_text and typed.to_dict()["ttfa_ms"] is not None
    # Scored on characters: tiny.en hears this voice's "France is" as "Francis" and, at
    # the first fragment's joint, "of" as "a" (5 in 40 syntheses), which is half the
    # words of a six-word reply but 13% of its characters; other words score ~0.8.
    said = _said(sink.audio[0], sink.rate)
    assert jiwer.cer(_words(typed.reply_text), _words(said)) <= 0.25
    # The spoken turn after it is turn 1, and its prompt holds the typed exchange.
    assert _words(spoken.transcript) == "go forward 10 meters" and spoken.asr_model != TYPED
    history = _histories(tmp_path / "llm.log")[1]
    assert history[0] == {"role": "user", "content": QUESTION}
    assert history[1]["role"] == "assistant" and history[1]["content"]


@pytest.mark.slow
def test_text_typed_while_the_user_speaks_comes_after_what_was_said(clips_dir):
    """The text travels behind the audio: the utterance under way is finalized as its
    own turn first (with the words heard so far), then the typed turn."""
    clip = read_clip(clips_dir / "goforward.raw")  # no trailing silence: still speaking

    async def scenario():
        async with Pipeline(PipelineConfig()) as pipeline:
            sink = Sink()
            session = pipeline.open_session(sink, "test")
            await pipeline.feed(session.session_id, clip, realtime=True)
            pipeline.send_text(session.session_id, QUESTION)
            return await sink.row(0), await sink.row(1)

    spoken, typed = asyncio.run(scenario())
    assert "forward" in _words(spoken.transcript) and spoken.asr_model != TYPED
    assert typed.transcript == QUESTION and typed.asr_model == TYPED and typed.reply_text


@pytest.mark.slow
def test_typing_over_a_reply_cuts_it_and_the_history_keeps_what_was_heard(tmp_path, monkeypatch):
    monkeypatch.setenv("VOXRELAY_LOG_DIR", str(tmp_path))
    monkeypatch.setenv("VOXRELAY_LOG_LEVEL", "DEBUG")

    async def scenario():
        async with Pipeline(PipelineConfig(continue_turn_ms=0)) as pipeline:
            sink = Sink()
            session = pipeline.open_session(sink, "test")
            pipeline.send_text(session.session_id, LONG_ASK)
            await asyncio.wait_for(sink.first_audio.wait(), 30)
            await asyncio.sleep(0.8)  # some of the reply heard, then the user types
            pipeline.send_text(session.session_id, QUESTION)
            return sink, await sink.row(0), await sink.row(1)

    sink, first, second = asyncio.run(scenario())
    assert (1, "response.audio.clear", "") in sink.texts
    assert first.barge_in_ns and first.heard_text.endswith(CUT_MARK)
    assert len(first.heard_text) < len(first.reply_text)
    assert second.transcript == QUESTION and second.reply_text and not second.barge_in_ns
    history = _histories(tmp_path / "llm.log")[1]
    assert history == [
        {"role": "user", "content": LONG_ASK},
        {"role": "assistant", "content": first.heard_text},
    ]


def test_bad_typed_turns_are_refused_and_the_session_goes_on(clips_dir):
    async def scenario():
        async with Pipeline(PipelineConfig()) as pipeline:
            sink = Sink()
            session = pipeline.open_session(sink, "test")
            with pytest.raises(ValueError, match="session 9999 is not open"):
                pipeline.send_text(9999, QUESTION)
            with pytest.raises(ValueError, match="the user's text is empty"):
                pipeline.send_text(session.session_id, " \n ")
            with pytest.raises(ValueError, match=f"at most {MAX_USER_TEXT_CHARS}"):
                pipeline.send_text(session.session_id, "word " * MAX_USER_TEXT_CHARS)
            with pytest.raises(TypeError, match="must be a string"):
                pipeline.send_text(session.session_id, b"bytes")  # type: ignore[arg-type]
            assert session.before_first_audio  # nothing refused went anywhere
            pipeline.send_text(session.session_id, "Hello there.")
            return await sink.row(0)

    row = asyncio.run(scenario())
    assert row.transcript == "Hello there." and row.reply_text and not row.error
    assert np.isfinite(row.to_dict()["ttfa_ms"])
