"""The Python API (`import voxrelay`): cheap to import, strict at its boundary, and a real
clip through the real stage processes yields its events in order."""

import asyncio
import subprocess
import sys
import wave

import jiwer
import numpy as np
import psutil
import pytest
import soxr

import voxrelay
from voxrelay.pipeline.api import pipeline_config
from voxrelay.pipeline.api_session import to_pcm16
from voxrelay.pipeline.audio_io import read_clip
from voxrelay.pipeline.config import PipelineConfig

EXPECTED = "he was not an ill disposed young man"


def _normalise(text: str) -> str:
    return " ".join(jiwer.RemovePunctuation()(text.lower().replace("-", " ")).split())


def test_import_voxrelay_loads_no_torch_and_no_model():
    code = (
        "import sys, voxrelay\n"
        "cheap = 'numpy' not in sys.modules and 'voxrelay.pipeline.run' not in sys.modules\n"
        "voxrelay.VoicePipeline, voxrelay.run_file, voxrelay.TurnDone  # the API itself\n"
        "heavy = [m for m in ('torch', 'faster_whisper', 'ctranslate2', 'piper', 'onnxruntime')"
        " if m in sys.modules]\n"
        "print(cheap, heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[0] == "True []", out.stdout + out.stderr


def test_every_exported_name_resolves_and_unknown_names_raise():
    assert set(voxrelay.__all__) - {"__version__"} == set(voxrelay._EXPORTS)
    for name in voxrelay._EXPORTS:
        assert getattr(voxrelay, name) is not None, name
    assert voxrelay.PipelineConfig is PipelineConfig
    with pytest.raises(AttributeError, match="no attribute 'Pipeline'"):
        _ = voxrelay.Pipeline


def test_to_pcm16_takes_bytes_int16_and_float_arrays():
    assert to_pcm16(b"\x01\x00\xff\x7f") == (b"\x01\x00\xff\x7f", 1)
    assert to_pcm16(np.array([1, -2], dtype=np.int16)) == (b"\x01\x00\xfe\xff", 1)
    stereo = np.array([[0.5, -1.0], [2.0, 0.0]], dtype=np.float32)  # (samples, channels)
    pcm, channels = to_pcm16(stereo)
    assert channels == 2
    assert np.frombuffer(pcm, "<i2").tolist() == [16384, -32767, 32767, 0]  # 2.0 clipped
    assert to_pcm16(np.zeros(0, np.float64)) == (b"", 1)


@pytest.mark.parametrize(
    ("audio", "channels", "error", "message"),
    [
        (b"\x00\x00\x00", None, ValueError, "not whole 1-channel frames"),
        (b"\x00\x00", 2, ValueError, "not whole 2-channel frames"),
        (b"", 0, ValueError, "channels must be >= 1"),
        ([0, 1], None, TypeError, "PCM16 bytes or a numpy array"),
        (np.zeros(4, np.int32), None, TypeError, "int16 or float32/float64"),
        (np.array([0.0, np.nan]), None, ValueError, "NaN or infinite"),
        (np.zeros((2, 2, 2), np.int16), None, ValueError, r"\(samples, channels\)"),
        (np.zeros((4, 2), np.int16), 1, ValueError, "channels=1 but the array"),
    ],
)
def test_to_pcm16_refuses_what_it_cannot_read(audio, channels, error, message):
    with pytest.raises(error, match=message):
        to_pcm16(audio, channels)


def test_pipeline_settings_come_as_a_config_or_a_dict_of_its_fields():
    assert pipeline_config(None) == PipelineConfig()
    config = pipeline_config({"barge_in": False, "llm": {"max_new_tokens": 16}})
    assert config == PipelineConfig(barge_in=False, llm={"max_new_tokens": 16})
    with pytest.raises(ValueError, match=r"unknown pipeline setting\(s\) \['tranport'\]"):
        pipeline_config({"tranport": "zmq"})
    with pytest.raises(ValueError, match="transport must be one of"):
        pipeline_config({"transport": "udp"})
    with pytest.raises(TypeError, match="a dict or a PipelineConfig"):
        pipeline_config("transport=zmq")


def test_misuse_is_refused_before_anything_starts(tmp_path):
    pipeline = voxrelay.open_pipeline()
    with pytest.raises(ValueError, match="start the pipeline first"):
        pipeline.session()
    with pytest.raises(ValueError, match="does not exist"):
        voxrelay.run_file(tmp_path / "missing.wav")

    async def inside_a_loop():
        voxrelay.run_file(tmp_path / "missing.wav")

    with pytest.raises(ValueError, match="await run_file_async"):
        asyncio.run(inside_a_loop())


async def _events_until_input_end(session, timeout_s: float = 120.0) -> list:
    return await _events_until(session, voxrelay.InputEnded, timeout_s)


async def _events_until(session, last: type, timeout_s: float = 60.0) -> list:
    """The session's events up to and including the first of type `last`."""
    events = []
    async with asyncio.timeout(timeout_s):
        async for event in session:
            events.append(event)
            if isinstance(event, last):
                return events
    raise AssertionError(f"the session closed before a {last.__name__}: {events[-5:]}")


def _first(events: list, kind: type, **fields) -> int:
    for index, event in enumerate(events):
        if isinstance(event, kind) and all(getattr(event, k) == v for k, v in fields.items()):
            return index
    raise AssertionError(f"no {kind.__name__} {fields} in {[type(e).__name__ for e in events]}")


def _check_turn_events(events: list, sample_rate: int) -> voxrelay.TurnDone:
    """One turn, its events in the order the pipeline makes them; returns its TurnDone."""
    kinds = [type(e).__name__ for e in events]
    assert not any(isinstance(e, voxrelay.TurnError) for e in events), events
    done = [e for e in events if isinstance(e, voxrelay.TurnDone)]
    assert len(done) == 1, kinds
    turn = done[0].turn
    audio = [e for e in events if isinstance(e, voxrelay.ReplyAudio)]
    assert audio and {e.turn for e in audio} == {turn}
    assert {e.sample_rate for e in audio} == {sample_rate}
    partial = _first(events, voxrelay.Transcript, final=False)
    final = _first(events, voxrelay.Transcript, final=True)
    # Nothing of the reply leaves the pipeline before the turn is committed (its final).
    assert _first(events, voxrelay.SpeechStarted) < partial < final
    assert final < _first(events, voxrelay.ReplyDelta) < _first(events, voxrelay.ReplyAudioDone)
    assert final < events.index(audio[0])
    assert events.index(audio[-1]) < _first(events, voxrelay.ReplyAudioDone)
    assert _first(events, voxrelay.ReplyAudioDone) < _first(events, voxrelay.TurnDone)
    assert kinds[-2:] == ["TurnDone", "InputEnded"]
    seconds = sum(len(e.pcm16) for e in audio) / 2 / sample_rate
    assert 0.5 < seconds < 60, f"reply audio of {seconds:.2f} s"
    assert abs(seconds * 1000 - done[0].trace["audio_out_ms"]) < 20  # (a resampler's tail)
    deltas = "".join(e.text for e in events if isinstance(e, voxrelay.ReplyDelta))
    assert deltas.strip() == done[0].reply_text.strip() != ""
    assert jiwer.wer(EXPECTED, _normalise(done[0].transcript)) <= 0.25, done[0].transcript
    return done[0]


@pytest.mark.slow
def test_real_clip_through_the_api_then_nothing_is_left_running(clips_dir):
    clip = read_clip(clips_dir / "librivox/0880.wav")
    # The same speech at a rate the ASR does not take, as floats: resampled in the API.
    odd_rate = 11_025
    floats = soxr.resample(clip.mono_float(), clip.sample_rate, odd_rate).astype(np.float32)
    before = {p.pid for p in psutil.Process().children(recursive=True)}

    async def scenario():
        async with voxrelay.open_pipeline() as pipeline:
            pids = set(pipeline.stage_pids().values())
            spawned = {p.pid for p in psutil.Process().children(recursive=True)} - before
            async with pipeline.session() as live:  # PCM16 at the clip's rate, real-time pace
                await live.stream(clip.with_silence(1.0).pcm16, clip.sample_rate)
                live.end_input()
                first = await _events_until_input_end(live)
            resampled = pipeline.session(output_sample_rate=16_000)
            with pytest.raises(ValueError, match="eagerness"):
                resampled.set_turn_taking("eager")  # refused before anything is sent
            resampled.set_turn_taking("high")
            silence = np.zeros(odd_rate, np.float32)
            await resampled.stream(np.concatenate([floats, silence]), odd_rate, realtime=False)
            with pytest.raises(ValueError, match="format changed from 11025 Hz x 1"):
                resampled.feed(b"\x00\x00", 16_000)
            resampled.end_input()
            second = await _events_until_input_end(resampled)
            resampled.close()
            with pytest.raises(ValueError, match="session is closed"):
                resampled.feed(b"\x00\x00")
            assert [e async for e in resampled] == []  # closed: the iterator ends
        return first, second, pids, spawned

    first, second, pids, spawned = asyncio.run(scenario())
    done = _check_turn_events(first, 22_050)
    assert 0 < done.ttfa_ms < 10_000
    assert done.trace["transport"] == "api" and done.trace["error"] is None
    _check_turn_events(second, 16_000)
    assert pids <= spawned
    left = {p.pid for p in psutil.Process().children(recursive=True)} - before
    assert not left & spawned, f"still running after the pipeline closed: {left & spawned}"


async def _interrupt_at_the_first_reply_audio(
    session, end_input_first: bool, unread_s: float
) -> list:
    """Reads up to the reply's first audio, lets `unread_s` more of it queue unread,
    interrupts, then reads until the input has ended."""
    events = []
    async with asyncio.timeout(120):
        async for event in session:
            events.append(event)
            if isinstance(event, voxrelay.ReplyAudio):
                break
        await asyncio.sleep(unread_s)
        session.interrupt()
    if not end_input_first:
        session.end_input()
    events += await _events_until_input_end(session, timeout_s=30)
    return events


async def _cut_session(clip, end_input_first: bool, unread_s: float, llm: dict) -> list:
    """The clip streamed as fast as the loop allows, its reply cut at its first audio."""
    async with (
        voxrelay.open_pipeline({"llm": llm}) as pipeline,
        pipeline.session() as session,
    ):
        await session.stream(clip.pcm16, clip.sample_rate, realtime=False)
        if end_input_first:
            session.end_input()
        return await _interrupt_at_the_first_reply_audio(session, end_input_first, unread_s)


@pytest.mark.slow
def test_interrupt_cuts_the_reply_and_drops_its_queued_audio(clips_dir):
    clip = read_clip(clips_dir / "librivox/0880.wav").with_silence(1.0)
    events = asyncio.run(_cut_session(clip, False, 0.3, {"max_new_tokens": 24}))
    cut = _first(events, voxrelay.Interrupted)
    turn = events[_first(events, voxrelay.ReplyAudio)].turn
    assert events[cut].turn == turn + 1
    assert not [e for e in events[cut:] if isinstance(e, voxrelay.ReplyAudio)]
    done = _first(events, voxrelay.TurnDone, turn=turn)
    assert done > cut
    assert events[done].trace["barge_in_ns"], "the cut turn's trace does not say it was cut"
    assert events[done].trace["audio_played_ms"] < events[done].trace["audio_out_ms"]


@pytest.mark.slow
def test_interrupt_after_end_input_still_ends_the_input(clips_dir):
    # Cut at once, while the full-length reply still decodes: END_OF_INPUT, right behind
    # the final transcript, is then waiting in the LLM stage for that reply.
    clip = read_clip(clips_dir / "librivox/0880.wav").with_silence(1.0)
    events = asyncio.run(_cut_session(clip, True, 0.0, {}))
    assert isinstance(events[-1], voxrelay.InputEnded)


@pytest.mark.slow
def test_run_file_is_voxrelay_run_in_one_call(clips_dir, tmp_path):
    output = tmp_path / "reply.wav"
    reply = voxrelay.run_file(
        clips_dir / "librivox/0880.wav",
        output,
        settings={"llm": {"max_new_tokens": 24}},
        realtime=False,
        trace_path=tmp_path / "traces.jsonl",
    )
    assert reply.errors == ()
    assert len(reply.turns) == 1
    assert jiwer.wer(EXPECTED, _normalise(reply.transcript)) <= 0.25, reply.transcript
    assert reply.reply_text
    with wave.open(str(output), "rb") as wav:
        assert wav.getframerate() == reply.sample_rate == 22_050
        assert wav.getnframes() == len(reply.audio) // 2 > reply.sample_rate // 2
    assert len((tmp_path / "traces.jsonl").read_text().splitlines()) == 1


@pytest.mark.slow
def test_the_agent_speaks_first_through_the_api():
    greeting = "Hello, you are through to the demo line."

    async def scenario():
        settings = {"llm": {"max_new_tokens": 24}}
        async with (
            voxrelay.open_pipeline(settings) as pipeline,
            pipeline.session() as session,
        ):
            with pytest.raises(TypeError, match="text must be a string"):
                session.greet(5)  # type: ignore[arg-type]
            session.greet(greeting)
            events = await _events_until(session, voxrelay.TurnDone)
            with pytest.raises(ValueError, match="only before the session's first audio"):
                session.greet()  # its turn is taken
            return events

    events = asyncio.run(scenario())
    done = events[-1]
    assert done.turn == 0 and done.trace["opening"] and done.reply_text == greeting
    assert done.transcript == "" and done.ttfa_ms is None and not done.trace["error"]
    assert sum(len(e.pcm16) for e in events if isinstance(e, voxrelay.ReplyAudio)) > 22_050


@pytest.mark.slow
def test_a_typed_turn_through_the_api():
    async def scenario():
        settings = {"llm": {"max_new_tokens": 24}}
        async with (
            voxrelay.open_pipeline(settings) as pipeline,
            pipeline.session() as session,
        ):
            with pytest.raises(ValueError, match="the user's text is empty"):
                session.send_text("")
            session.send_text("Is the pool open today?")
            events = await _events_until(session, voxrelay.TurnDone)
            return events

    events = asyncio.run(scenario())
    finals = [e for e in events if isinstance(e, voxrelay.Transcript) and e.final]
    assert [e.text for e in finals] == ["Is the pool open today?"]
    done = events[-1]
    assert done.transcript == "Is the pool open today?" and done.reply_text
    assert done.trace["asr_model"] == "typed" and done.ttfa_ms is not None
    assert sum(len(e.pcm16) for e in events if isinstance(e, voxrelay.ReplyAudio)) > 22_050


@pytest.mark.slow
def test_a_wordless_sound_over_a_reply_pauses_and_resumes_it_through_the_api(clips_dir):
    """barge_in_min_words=1, the session's own: a hum over the reply yields ReplyPaused
    (hold playback) and, once the ASR hears no words in it, ReplyResumed; nothing is
    interrupted."""
    from tests.pipeline.test_barge_in import hum

    clip = read_clip(clips_dir / "librivox/0880.wav").with_silence(0.6)
    noise = hum().with_silence(1.0)

    async def main() -> list:
        settings = {"tts": {"speed": 0.5}}  # barge_in_min_words 0: cut at once
        async with voxrelay.open_pipeline(settings) as pipeline, pipeline.session() as session:
            with pytest.raises(ValueError, match="barge_in_min_words must be an integer"):
                session.set_barge_in_min_words(-1)
            assert session.set_barge_in_min_words(1) == 1
            await session.stream(clip.pcm16, clip.sample_rate, realtime=True)
            events = await _events_until(session, voxrelay.ReplyAudio)
            await session.stream(noise.pcm16, noise.sample_rate, realtime=True)
            session.end_input()
            return events + await _events_until_input_end(session)

    events = asyncio.run(main())
    paused = _first(events, voxrelay.ReplyPaused)
    resumed = _first(events, voxrelay.ReplyResumed, turn=events[paused].turn)
    assert _first(events, voxrelay.SpeechStarted, turn=events[paused].turn) < paused < resumed
    assert not [e for e in events if isinstance(e, voxrelay.Interrupted)]
    done = [e for e in events if isinstance(e, voxrelay.TurnDone)]
    assert len(done) == 1 and not done[0].trace["barge_in_ns"]
