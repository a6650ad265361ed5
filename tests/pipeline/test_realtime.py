"""`/v1/realtime` on a real `voxrelay serve` process, driven by the official `openai`
client's realtime interface with a real speech clip (and by a bare WebSocket for input
the client would refuse to send). Every server event is validated against the `openai`
package's own pydantic types of the Realtime server events."""

import asyncio
import base64
import contextlib
import json
import time

import jiwer
import numpy as np
import pytest
import soxr
from openai import AsyncOpenAI
from openai.types.realtime.realtime_server_event import RealtimeServerEvent
from pydantic import TypeAdapter
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from tests.pipeline.serve_process import AUTH, TOKEN
from voxrelay.pipeline.audio_io import read_clip
from voxrelay.pipeline.realtime_config import (
    RealtimeConfig,
    RealtimeError,
    TurnDetection,
    apply_update,
    turn_taking,
)
from voxrelay.pipeline.sip import g711

EXPECTED = "he was not an ill disposed young man"
SERVER_EVENT = TypeAdapter(RealtimeServerEvent)
MANUAL = {"type": "realtime", "audio": {"input": {"turn_detection": None}}}


def _client(port: int) -> AsyncOpenAI:
    return AsyncOpenAI(
        api_key=TOKEN,
        base_url=f"http://127.0.0.1:{port}/v1",
        websocket_base_url=f"ws://127.0.0.1:{port}/v1",
    )


def _pcm_at(clip, rate: int, trailing_silence_s: float = 0.0) -> bytes:
    """The clip (with trailing silence) as PCM16 mono at `rate`."""
    samples = clip.with_silence(trailing_silence_s).pcm16
    return soxr.resample(samples, clip.sample_rate, rate).astype("<i2").tobytes()


async def _events(connection, until: str, timeout_s: float = 60) -> list[dict]:
    """Server events up to and including the first `until`, each validated by the SDK's
    types (strict: a missing or mistyped field fails)."""
    events = []
    async with asyncio.timeout(timeout_s):
        while True:
            raw = await connection.recv_bytes()
            SERVER_EVENT.validate_json(raw)
            event = json.loads(raw)
            assert event["event_id"], event
            events.append(event)
            if event["type"] == until:
                return events


async def _events_for(connection, seconds: float) -> list[dict]:
    """Every server event that arrives within `seconds`."""
    events: list[dict] = []
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            while True:
                raw = await connection.recv_bytes()
                SERVER_EVENT.validate_json(raw)
                events.append(json.loads(raw))
    return events


async def _append_paced(connection, pcm16: bytes, rate: int, frame_ms: int = 20) -> None:
    """`input_audio_buffer.append` in 20 ms frames at real-time pace, as a microphone."""
    step = rate * frame_ms // 1000 * 2
    start = time.perf_counter()
    for index, offset in enumerate(range(0, len(pcm16), step)):
        delay = start + index * frame_ms / 1000 - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        audio = base64.b64encode(pcm16[offset : offset + step]).decode()
        await connection.input_audio_buffer.append(audio=audio)


def _of(events: list[dict], event_type: str) -> list[dict]:
    return [e for e in events if e["type"] == event_type]


def _audio(events: list[dict]) -> bytes:
    return b"".join(
        base64.b64decode(e["delta"]) for e in _of(events, "response.output_audio.delta")
    )


def _normalise(text: str) -> str:
    return " ".join(jiwer.RemovePunctuation()(text.lower().replace("-", " ")).split())


@pytest.mark.slow
def test_a_spoken_turn_with_server_vad(serve_process, clips_dir):
    clip = read_clip(clips_dir / "librivox/0880.wav")

    async def scenario():
        async with _client(serve_process.port).realtime.connect(model="voxrelay") as connection:
            created = await _events(connection, "session.created")
            await connection.session.update(
                session={
                    "type": "realtime",
                    "instructions": "You are a helpful assistant. Answer briefly.",
                    "audio": {"input": {"turn_detection": {"type": "semantic_vad"}}},
                }
            )
            updated = await _events(connection, "session.updated")
            sender = asyncio.create_task(
                _append_paced(connection, _pcm_at(clip, 24_000, 1.0), 24_000)
            )
            events = await _events(connection, "response.done")
            await sender
            return created + updated + events

    events = asyncio.run(scenario())
    session = events[0]["session"]
    assert session["audio"]["input"]["format"] == {"type": "audio/pcm", "rate": 24000}
    assert session["audio"]["input"]["turn_detection"]["type"] == "server_vad"
    detection = events[1]["session"]["audio"]["input"]["turn_detection"]
    assert detection == {
        "type": "semantic_vad",
        "eagerness": "auto",
        "create_response": True,
        "interrupt_response": True,
    }
    types = [e["type"] for e in events]
    assert "error" not in types, events
    order = [
        "input_audio_buffer.speech_started",
        "input_audio_buffer.speech_stopped",
        "input_audio_buffer.committed",
        "conversation.item.input_audio_transcription.completed",
        "response.created",
        "response.output_audio_transcript.delta",
        "response.output_audio.delta",
        "response.output_audio.done",
        "response.output_audio_transcript.done",
        "response.done",
    ]
    positions = [types.index(name) for name in order]
    assert positions == sorted(positions), types
    started, stopped = events[positions[0]], events[positions[1]]
    user_item = started["item_id"]
    assert stopped["item_id"] == user_item == events[positions[2]]["item_id"]
    assert 0 < started["audio_start_ms"] < stopped["audio_end_ms"] < 1000 * clip.duration_s + 1500
    completed = events[positions[3]]
    assert completed["item_id"] == user_item
    assert jiwer.wer(EXPECTED, _normalise(completed["transcript"])) <= 0.25, completed
    done = events[-1]["response"]
    assert done["status"] == "completed" and done["id"] == events[positions[4]]["response"]["id"]
    [item] = done["output"]
    transcript = _of(events, "response.output_audio_transcript.done")[0]["transcript"]
    deltas = "".join(e["delta"] for e in _of(events, "response.output_audio_transcript.delta"))
    assert transcript and deltas.strip() == transcript == item["content"][0]["transcript"]
    assert done["usage"]["output_tokens"] == len(
        _of(events, "response.output_audio_transcript.delta")
    )
    assert done["usage"]["input_tokens"] > 0
    audio = np.frombuffer(_audio(events), dtype="<i2")
    seconds = len(audio) / 24_000
    print(f"\nreply {transcript!r}: {seconds:.2f} s of 24 kHz audio")
    assert 0.5 < seconds < 60
    assert np.sqrt(np.mean(audio.astype(np.float64) ** 2)) > 300  # speech, not silence


@pytest.mark.slow
def test_response_create_with_nothing_to_answer_lets_the_agent_speak(serve_process):
    """Before any input the agent opens the conversation from the instructions; after
    that, a response.create with nothing new to answer has the agent speak up again, with
    the response's own instructions; one while a response is active is acknowledged."""

    async def scenario():
        async with _client(serve_process.port).realtime.connect(model="voxrelay") as connection:
            await _events(connection, "session.created")
            instructions = "You are the front desk of a small hotel. Greet the guest."
            await connection.session.update(
                session={"type": "realtime", "instructions": instructions}
            )
            await _events(connection, "session.updated")
            await connection.response.create()
            opening = await _events(connection, "response.done")
            await connection.response.create(
                response={"instructions": "Ask the guest for their room number."}
            )
            await _events(connection, "response.created")
            await connection.response.create()  # active: acknowledged, not a second one
            again = await _events(connection, "response.done")
            late = await _events_for(connection, 2.0)
            return opening, again, late

    opening, again, late = asyncio.run(scenario())
    for events in (opening, again):
        types = [e["type"] for e in events]
        assert "error" not in types and "input_audio_buffer.committed" not in types, events
        done = events[-1]["response"]
        [item] = done["output"]
        transcript = item["content"][0]["transcript"]
        assert done["status"] == "completed" and item["role"] == "assistant" and transcript.strip()
        audio = np.frombuffer(_audio(events), dtype="<i2")
        print(f"\nagent {transcript!r}: {len(audio) / 24_000:.2f} s")
        assert len(audio) / 24_000 > 0.5 and np.sqrt(np.mean(audio.astype(np.float64) ** 2)) > 300
    assert opening[-1]["response"]["id"] != again[-1]["response"]["id"]
    assert not _of(late, "response.created"), late  # the acknowledged create made none


@pytest.mark.slow
def test_a_typed_user_message_is_answered_out_loud(serve_process, clips_dir):
    """conversation.item.create with input_text, then response.create: the item is echoed,
    one response answers it with audio, and the next spoken turn is answered after it."""
    question = "What is the capital of France?"
    pcm = _pcm_at(read_clip(clips_dir / "librivox/0880.wav"), 24_000, trailing_silence_s=3.0)

    async def scenario():
        async with _client(serve_process.port).realtime.connect(model="voxrelay") as connection:
            await _events(connection, "session.created")
            content = [{"type": "input_text", "text": question}]
            await connection.conversation.item.create(
                item={"type": "message", "role": "user", "content": content, "id": "item_typed1"}
            )
            await connection.response.create()
            typed = await _events(connection, "response.done")
            await _append_paced(connection, pcm, 24_000)
            spoken = await _events(connection, "response.done")
            return typed, spoken

    typed, spoken = asyncio.run(scenario())
    types = [e["type"] for e in typed]
    assert "error" not in types and "input_audio_buffer.committed" not in types, typed
    added = _of(typed, "conversation.item.added")
    assert added[0]["item"]["id"] == "item_typed1" and added[0]["item"]["role"] == "user"
    assert added[0]["item"]["content"] == [{"type": "input_text", "text": question}]
    assert types.index("conversation.item.done") < types.index("response.created")
    assert len(_of(typed, "response.created")) == 1
    done = typed[-1]["response"]
    assert done["status"] == "completed" and done["output"][0]["content"][0]["transcript"]
    audio = np.frombuffer(_audio(typed), dtype="<i2")
    assert len(audio) / 24_000 > 0.5 and np.sqrt(np.mean(audio.astype(np.float64) ** 2)) > 300
    # The spoken turn after it: transcribed and answered as before.
    [transcribed] = _of(spoken, "conversation.item.input_audio_transcription.completed")
    assert _normalise(transcribed["transcript"]) == EXPECTED
    user_item = _of(spoken, "conversation.item.added")[0]
    assert user_item["previous_item_id"] == typed[-1]["response"]["output"][0]["id"]
    assert spoken[-1]["response"]["status"] == "completed"


@pytest.mark.slow
def test_manual_commit_cancel_mid_reply_and_g711_in_and_out(serve_process, clips_dir):
    """turn_detection null: commit makes the turn. response.cancel mid-reply stops the
    audio, response.done says cancelled; the next turn, in G.711 mu-law, still works."""
    clip = read_clip(clips_dir / "librivox/0880.wav")

    async def scenario():
        async with _client(serve_process.port).realtime.connect(model="voxrelay") as connection:
            await _events(connection, "session.created")
            await connection.session.update(session=MANUAL)
            await _events(connection, "session.updated")
            pcm = _pcm_at(clip, 24_000)
            for offset in range(0, len(pcm), 48_000):  # 1 s appends, not paced
                chunk = base64.b64encode(pcm[offset : offset + 48_000]).decode()
                await connection.input_audio_buffer.append(audio=chunk)
            await connection.input_audio_buffer.commit()
            await connection.response.create()
            first = await _events(connection, "response.output_audio.delta")
            await connection.response.cancel()
            first += await _events(connection, "response.done")
            late = await _events_for(connection, 1.5)  # nothing more of the cancelled reply
            await connection.session.update(
                session={
                    "type": "realtime",
                    "audio": {
                        "input": {"format": {"type": "audio/pcmu"}},
                        "output": {"format": {"type": "audio/pcmu"}},
                    },
                }
            )
            updated = await _events(connection, "session.updated")
            mulaw = g711.encode(_pcm_at(clip, 8_000), "PCMU")
            await connection.input_audio_buffer.append(audio=base64.b64encode(mulaw).decode())
            await connection.input_audio_buffer.commit()
            second = await _events(connection, "response.done")
            return first, late, updated, second

    first, late, updated, second = asyncio.run(scenario())
    types = [e["type"] for e in first]
    assert "input_audio_buffer.speech_started" not in types  # no VAD events when manual
    assert types.index("input_audio_buffer.committed") < types.index("response.created")
    cancelled = first[-1]["response"]
    assert cancelled["status"] == "cancelled", cancelled
    assert cancelled["status_details"]["reason"] == "client_cancelled"
    assert "error" not in types and late == []
    out = updated[-1]["session"]["audio"]["output"]["format"]
    assert out == {"type": "audio/pcmu"}
    assert "error" not in [e["type"] for e in second], second
    assert second[-1]["response"]["status"] == "completed"
    completed = _of(second, "conversation.item.input_audio_transcription.completed")
    assert jiwer.wer(EXPECTED, _normalise(completed[0]["transcript"])) <= 0.3, completed
    reply = np.frombuffer(g711.decode(_audio(second), "PCMU"), dtype="<i2")
    assert 0.5 < len(reply) / 8_000 < 60  # one byte per sample at 8 kHz
    assert np.sqrt(np.mean(reply.astype(np.float64) ** 2)) > 300


async def _raw_session(port: int):
    ws = await connect(f"ws://127.0.0.1:{port}/v1/realtime?model=x", additional_headers=AUTH)
    assert json.loads(await ws.recv())["type"] == "session.created"
    return ws


async def _reply_to(ws, message: str | bytes) -> dict:
    await ws.send(message)
    raw = await asyncio.wait_for(ws.recv(), 10)
    SERVER_EVENT.validate_json(raw)
    return json.loads(raw)


def _event(event_type: str, event_id: str, **fields) -> str:
    return json.dumps({"type": event_type, "event_id": event_id, **fields})


def _update(event_id: str, **session) -> str:
    return _event("session.update", event_id, session={"type": "realtime", **session})


def _item(event_id: str, **item) -> str:
    """A conversation.item.create of a user text message, with `item`'s fields changed."""
    text = [{"type": "input_text", "text": "Hello."}]
    fields = {"type": "message", "role": "user", "content": text, **item}
    return _event("conversation.item.create", event_id, item=fields)


PCM_16K = {"input": {"format": {"type": "audio/pcm", "rate": 16000}}}
# (message, error code, param, the client event id the error must carry)
BAD_INPUT = [
    ("not json{", "invalid_json", None, None),
    (_event("dance", "evt_1"), "invalid_value", "type", "evt_1"),
    (_event("input_audio_buffer.append", "evt_2", audio="@@@"), "invalid_value", "audio", "evt_2"),
    (_event("input_audio_buffer.append", "evt_3", audio="AA=="), "invalid_value", "audio", "evt_3"),
    (_update("evt_4", audio=PCM_16K), "invalid_value", "session.audio.input.format", "evt_4"),
    (_update("evt_5", cloning=True), "unknown_parameter", "session.cloning", "evt_5"),
    (_event("response.cancel", "evt_6"), "response_cancel_not_active", None, "evt_6"),
    (
        _event("input_audio_buffer.commit", "evt_7"),
        "input_audio_buffer_commit_empty",
        None,
        "evt_7",
    ),
    (b"\x00\x01", "invalid_value", None, None),
    (_item("evt_11", role="assistant"), "unsupported_value", "item.role", "evt_11"),
    (_item("evt_12", type="function_call_output"), "unsupported_value", "item.type", "evt_12"),
    (
        _item("evt_13", content=[{"type": "input_audio", "audio": "AAAA"}]),
        "unsupported_value",
        "item.content[0].type",
        "evt_13",
    ),
    (
        _item("evt_14", content=[{"type": "input_text", "text": "  "}]),
        "invalid_value",
        "item.content",
        "evt_14",
    ),
    (_item("evt_15", tools=[]), "unknown_parameter", "item.tools", "evt_15"),
    # base64 of 1 MiB: ~1.4 MB, over the server's 1 MiB message limit
    (
        _event(
            "input_audio_buffer.append", "evt_8", audio=base64.b64encode(bytes(1 << 20)).decode()
        ),
        "message_too_large",
        None,
        "evt_8",
    ),
]


@pytest.mark.slow
def test_bad_input_gets_nested_errors_and_the_session_survives(serve_process):
    async def scenario():
        ws = await _raw_session(serve_process.port)
        errors = [await _reply_to(ws, bad[0]) for bad in BAD_INPUT]
        updated = await _reply_to(ws, _update("evt_9", instructions="Hi"))
        cleared = await _reply_to(ws, _event("input_audio_buffer.clear", "evt_10"))
        await ws.close()
        return errors, updated, cleared

    errors, updated, cleared = asyncio.run(scenario())
    got = [(e["error"]["code"], e["error"]["param"], e["error"]["event_id"]) for e in errors]
    assert got == [bad[1:] for bad in BAD_INPUT], errors
    for error in errors:
        assert error["type"] == "error" and error["event_id"].startswith("event_")
        assert error["error"]["type"] == "invalid_request_error" and error["error"]["message"]
    assert updated["type"] == "session.updated" and updated["session"]["instructions"] == "Hi"
    assert cleared["type"] == "input_audio_buffer.cleared"


@pytest.mark.slow
def test_token_and_path_are_checked_before_the_upgrade(serve_process):
    async def status(url: str, headers: dict, subprotocols: list | None = None) -> int:
        try:
            async with connect(url, additional_headers=headers, subprotocols=subprotocols) as ws:
                first = json.loads(await ws.recv())
                assert first["type"] == "session.created", first
                # Offered (as browsers must), "realtime" is the one chosen.
                assert ws.subprotocol == ("realtime" if subprotocols else None)
                if subprotocols and "openai-beta.realtime-v1" in subprotocols:  # beta's names
                    content = [{"type": "input_text", "text": "Hello."}]
                    item = {"type": "message", "role": "user", "content": content}
                    await ws.send(json.dumps({"type": "conversation.item.create", "item": item}))
                    echoed = json.loads(await ws.recv())
                    assert echoed["type"] == "conversation.item.created", echoed
                return 101
        except InvalidStatus as refused:
            return refused.response.status_code

    base = f"ws://127.0.0.1:{serve_process.port}"
    assert asyncio.run(status(f"{base}/v1/realtime", {})) == 401
    assert asyncio.run(status(f"{base}/v1/realtime", {"Authorization": "Bearer no"})) == 401
    assert asyncio.run(status(f"{base}/v1/realtime?model=gpt-realtime", AUTH)) == 101
    assert asyncio.run(status(f"{base}/v1/realtimes", AUTH)) == 404
    # A browser's way: the key in a subprotocol (browsers cannot set headers).
    browser = ["realtime", f"openai-insecure-api-key.{TOKEN}", "openai-beta.realtime-v1"]
    assert asyncio.run(status(f"{base}/v1/realtime", {}, browser)) == 101
    assert asyncio.run(status(f"{base}/v1/realtime", {}, browser[:1])) == 401
    wrong = ["realtime", "openai-insecure-api-key.no"]
    assert asyncio.run(status(f"{base}/v1/realtime", {}, wrong)) == 401


def test_session_update_takes_ga_nesting_and_beta_names_and_refuses_whole():
    config = RealtimeConfig()
    ga = apply_update(
        config,
        {
            "type": "realtime",
            "instructions": "Be brief.",
            "audio": {
                "input": {"format": {"type": "audio/pcmu"}, "turn_detection": None},
                "output": {"speed": 1.25},
            },
        },
    )
    assert (ga.input_format.codec, ga.turn_detection, ga.speed) == ("PCMU", None, 1.25)
    assert ga.instructions == "Be brief." and ga.output_format == config.output_format
    beta = apply_update(
        config,
        {
            "input_audio_format": "g711_alaw",
            "output_audio_format": "pcm16",
            "turn_detection": {"type": "semantic_vad", "eagerness": "low"},
        },
    )
    assert beta.input_format.type == "audio/pcma" and beta.output_format.rate == 24_000
    assert beta.turn_detection == TurnDetection("semantic_vad", "low")
    bad = [
        ({"instructions": "x", "audio": {"output": {"speed": 3}}}, "session.audio.output.speed"),
        (
            {
                "audio": {
                    "input": {"turn_detection": {"type": "server_vad", "create_response": False}}
                }
            },
            "session.audio.input.turn_detection.create_response",
        ),
        (
            {"audio": {"input": {"turn_detection": {"type": "semantic_vad", "eagerness": "max"}}}},
            "session.audio.input.turn_detection.eagerness",
        ),
        ({"output_modalities": ["text"]}, "session.output_modalities"),
        ({"tools": [{"type": "function", "name": "f"}]}, "session.tools"),
        ({"type": "transcription"}, "session.type"),
        ({"audio": {"output": {"format": {"type": "audio/opus"}}}}, "session.audio.output.format"),
    ]
    for session, param in bad:
        with pytest.raises(RealtimeError) as refused:
            apply_update(config, session)
        assert refused.value.param == param and refused.value.message, session


def test_turn_detection_maps_to_the_asr_turn_taking():
    assert turn_taking(TurnDetection("semantic_vad", "auto")) == ("medium", None)
    assert turn_taking(TurnDetection("semantic_vad", "high")) == ("high", None)
    assert turn_taking(TurnDetection("server_vad", silence_duration_ms=700)) == ("medium", 700)
    assert turn_taking(TurnDetection("server_vad")) == ("medium", None)


@pytest.mark.slow
def test_a_backchannel_over_a_response_gets_no_response_of_its_own(clips_dir, tmp_path):
    """`voxrelay serve --barge-in-min-words 1`: "Okay." said over a response is the
    user's item and its transcription, then nothing: the response under way completes
    (not cancelled) and no second one is created."""
    from tests.pipeline.serve_process import ServeProcess
    from tests.pipeline.test_barge_in import spoken

    question = read_clip(clips_dir / "librivox/0880.wav")
    server = ServeProcess(tmp_path, "--barge-in-min-words", "1")

    async def scenario():
        async with _client(server.port).realtime.connect(model="voxrelay") as connection:
            await _events(connection, "session.created")
            # Half tempo and long answers: the response still plays while "Okay." is
            # heard and decided.
            session = {
                "type": "realtime",
                "instructions": "You are a storyteller. Answer with a long story.",
                "audio": {"output": {"speed": 0.5}},
            }
            await connection.session.update(session=session)
            events = await _events(connection, "session.updated")
            sender = asyncio.create_task(
                _append_paced(connection, _pcm_at(question, 24_000, 3.0), 24_000)
            )
            events += await _events(connection, "response.output_audio.delta")
            sender.cancel()  # the turn has ended: the rest of its silence is not needed
            with contextlib.suppress(asyncio.CancelledError):
                await sender
            await _append_paced(connection, _pcm_at(spoken("Okay."), 24_000, 1.0), 24_000)
            events += await _events(connection, "response.done")
            return events + await _events_for(connection, 3.0)

    try:
        events = asyncio.run(scenario())
        metrics = server.metrics()
    finally:
        assert server.stop() == 0, server.log_tail()
    assert metrics['voxrelay_turns_total{outcome="backchannel"}'] == 1
    assert metrics['voxrelay_turns_total{outcome="barged_in"}'] == 0
    types = [e["type"] for e in events]
    assert "error" not in types, events
    assert types.count("response.created") == 1 and types.count("response.done") == 1, types
    assert _of(events, "response.done")[0]["response"]["status"] == "completed"
    transcripts = _of(events, "conversation.item.input_audio_transcription.completed")
    assert len(transcripts) == 2 and "okay" in _normalise(transcripts[1]["transcript"]), types
    # The backchannel's item came while the response played: it did not end or cut it.
    assert types.index("response.done") > events.index(transcripts[1])
