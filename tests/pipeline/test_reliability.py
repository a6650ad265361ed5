"""Fault recovery leaves nothing behind, full rings drop instead of blocking, garbage from
a stage is survived. One real pipeline (three stage processes) for the whole module."""

import asyncio
import json
import os
import signal
import socket
import time

import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families
from websockets.asyncio.client import connect

from tests.pipeline.pipeline_thread import (
    NullSink,
    PipelineThread,
    fd_census,
    stage_children,
    wait_standbys,
)
from voxrelay.ipc.records import RecordKind, Stamp
from voxrelay.ipc.ring import Producer
from voxrelay.pipeline.audio_io import read_clip
from voxrelay.pipeline.ws import ServerConfig, VoiceServer

pytestmark = pytest.mark.slow

# Fault -> the stage answers again. With a warm standby per stage (this module's pipeline,
# and `voxrelay serve`'s default) recovery is a promotion, and issue 8 asks for 2 s.
# Without one it is a cold process (interpreter, imports, model load): 4-6 s for ASR/TTS
# and 12 s for the LLM were measured on the 2-core box under other jobs' load.
RECOVERY_S = 2.0
COLD_RECOVERY_S = 30.0
# A standby loads at nice 19: on the busy 2-core box that takes a while.
STANDBY_LOAD_S = 180.0
# Strike once the victim is working on the turn: its stamp has reached the supervisor.
BUSY_FROM = {"asr": Stamp.SPEECH_START, "llm": Stamp.LLM_START, "tts": Stamp.LLM_FIRST_TOKEN}


@pytest.fixture(scope="module")
def running(shared_pipeline, clips_dir):
    return shared_pipeline, read_clip(clips_dir / "cards/005.wav")


def _census(thread: PipelineThread) -> dict:
    wait_standbys(
        thread.pipeline.supervisor, STANDBY_LOAD_S
    )  # a loading standby's fds and threads are still changing
    children = stage_children(thread.pipeline.supervisor)
    return {
        "stages": sorted(children),
        "fds": fd_census(),
        "child_fds": {name: fd_census(p.pid) for name, p in children.items()},
        "child_threads": {name: p.num_threads() for name, p in children.items()},
    }


def _wait_ready(thread: PipelineThread, stage: str, restarts: int, timeout_s: float) -> float:
    supervisor = thread.pipeline.supervisor
    started = time.monotonic()
    while supervisor.restarts(stage) < restarts or not supervisor.is_ready(stage):
        assert time.monotonic() - started < timeout_s, f"{stage} did not come back"
        time.sleep(0.005)
    return time.monotonic() - started


def _turn_works(thread: PipelineThread, clip) -> dict:
    result = thread.call(thread.pipeline.run_clip(clip, realtime=False))
    assert not result.errors, result.errors
    row = result.traces[0].to_dict()
    assert row["error"] is None and row["audio_out_ms"] > 0
    return row


async def _strike_mid_turn(pipeline, clip, stage: str, signum: int) -> dict[str, float | str]:
    """A turn streamed at real-time pace; once `stage` works on it, `signum` hits the
    stage. Seconds from the strike until the session heard the turn fail and until the
    stage was ready again, and the error."""
    supervisor = pipeline.supervisor
    restarts = supervisor.restarts(stage)
    sink = _TurnSink()
    session = pipeline.open_session(sink, "test")
    feed = asyncio.create_task(pipeline.feed(session.session_id, clip.with_silence(1.0), True))
    deadline = time.monotonic() + 60
    while not any(BUSY_FROM[stage] in t.stamps for t in session.turns.values()):
        assert time.monotonic() < deadline and not session.finished, "the turn never got there"
        await asyncio.sleep(0.002)
    os.kill(supervisor.stage_pid(stage), signum)
    struck = time.monotonic()
    while not sink.errors:
        assert time.monotonic() - struck < 60, "the session was not told its turn failed"
        await asyncio.sleep(0.002)
    failed_s = time.monotonic() - struck
    while supervisor.restarts(stage) <= restarts or not supervisor.is_ready(stage):
        assert time.monotonic() - struck < COLD_RECOVERY_S + 5, f"{stage} did not come back"
        await asyncio.sleep(0.002)
    ready_s = time.monotonic() - struck
    await feed
    pipeline.close_session(session.session_id)
    return {"failed_s": failed_s, "ready_s": ready_s, "error": sink.errors[0][1]}


@pytest.mark.parametrize("how", ["kill", "stop"])
@pytest.mark.parametrize("stage", ["asr", "llm", "tts"])
def test_a_stage_lost_mid_turn_fails_that_turn_and_the_next_one_works(running, stage, how):
    """Issue 8: the supervisor replaces the stage, the session gets an error for the turn
    it was on, the next turn works, and nothing is left behind (no stray or zombie
    process, the same fds, memfds and threads everywhere once the new standby loaded)."""
    thread, clip = running
    supervisor = thread.pipeline.supervisor
    before = _census(thread)
    victim = psutil.Process(supervisor.stage_pid(stage))
    standby = supervisor.standby_pid(stage)
    signum = signal.SIGKILL if how == "kill" else signal.SIGSTOP
    outcome = thread.call(_strike_mid_turn(thread.pipeline, clip, stage, signum))
    row = _turn_works(thread, clip)
    recovered_s = outcome["ready_s"]
    print(
        f"{how} {stage}: turn failed after {outcome['failed_s']:.3f} s, stage ready "
        f"{recovered_s:.3f} s after the fault, next turn TTFA {row['ttfa_ms']:.0f} ms"
    )
    error = str(outcome["error"])
    assert stage in error
    with pytest.raises(psutil.NoSuchProcess):
        victim.status()  # reaped: gone, not a zombie
    if standby is not None:
        assert supervisor.stage_pid(stage) == standby, "the standby did not take over"
    after = _census(thread)
    assert after == before, (before, after)
    limit = RECOVERY_S if supervisor.config.warm_standby else COLD_RECOVERY_S
    if how == "stop":  # the heartbeat timeout comes first
        limit = max(limit, supervisor.config.heartbeat_timeout_s + 0.5)
    assert recovered_s < limit, f"{stage} took {recovered_s:.2f} s to come back"


def test_a_full_input_ring_drops_and_counts_and_never_blocks(running):
    """The ASR stops reading (SIGSTOP): client audio piles up in its 4 MiB ring; sending
    never waits, what does not fit is dropped and counted; then the ASR is replaced."""
    thread, clip = running
    pipeline = thread.pipeline
    supervisor = pipeline.supervisor
    restarts = supervisor.restarts("asr")
    os.kill(supervisor.stage_pid("asr"), signal.SIGSTOP)
    silence = bytes(32_000)  # 1 s of 16 kHz PCM16 per record

    async def flood() -> tuple[int, float]:
        session = pipeline.router.open(NullSink(), "test")
        dropped, slowest = 0, 0.0
        for _ in range(200):  # 200 s of audio into a ring that holds ~130 s
            started = time.perf_counter()
            dropped += pipeline.send_audio(session.session_id, silence, 16_000)
            slowest = max(slowest, time.perf_counter() - started)
        pipeline.close_session(session.session_id)
        return dropped, slowest

    drops_before = supervisor.ring_drops()["audio_in"]
    dropped, slowest = thread.call(flood())
    assert dropped > 0 and dropped % len(silence) == 0
    assert supervisor.ring_drops()["audio_in"] - drops_before == dropped // len(silence)
    assert slowest < 0.05, f"a send took {slowest * 1000:.0f} ms"
    _wait_ready(thread, "asr", restarts + 1, timeout_s=30)
    # The new ASR first reads the ~130 s the flood left (a closed session's: dropped
    # unprocessed). A clip sent at once, faster than real time, would find the ring still
    # full and be dropped too, as designed; a live client's audio comes at 1x.
    deadline = time.monotonic() + 10
    while supervisor.audio_in.unread_bytes() > 0:
        assert time.monotonic() < deadline, "the new ASR does not drain its input ring"
        time.sleep(0.01)
    drops_before = supervisor.ring_drops()["audio_in"]
    _turn_works(thread, clip)
    assert supervisor.ring_drops()["audio_in"] == drops_before


class _TurnSink:
    def __init__(self) -> None:
        self.errors: list[tuple[int, str]] = []

    def on_audio(self, turn_id, pcm16, sample_rate):
        pass

    def on_text(self, turn_id, kind, text):
        pass

    def on_error(self, turn_id, message):
        self.errors.append((turn_id, message))

    def on_audio_end(self, turn_id: int) -> None:
        pass

    def on_turn_done(self, trace):
        pass

    def on_input_end(self, lost: bool) -> None:
        pass


def test_garbage_from_a_stage_is_dropped_and_a_corrupt_ring_restarts_it(running):
    """A misbehaving TTS: a STAMP whose body does not parse (dropped, counted), then a
    record whose length makes no sense (framing lost: TTS restarted, ring skipped)."""
    thread, clip = running
    supervisor = thread.pipeline.supervisor
    restarts = supervisor.restarts("tts")
    malformed = supervisor.malformed_records["tts"]
    ring = supervisor._stages["tts"].specs["events"].ring
    assert ring is not None

    async def misbehave() -> None:
        # The TTS is idle between turns, so writing as its producer here races nothing.
        peer = Producer(ring)
        session = thread.pipeline.router.open(NullSink(), "test")
        peer.send(RecordKind.STAMP, b"\x01", session_id=session.session_id)
        await asyncio.sleep(0.2)
        assert supervisor.malformed_records["tts"] == malformed + 1
        # The supervisor drains on this same loop: it sees the record only once we await,
        # after its length field has been overwritten with nonsense.
        peer.send(RecordKind.STAMP, b"\x00" * 16, session_id=session.session_id)
        start = (peer._head - 48) % peer.capacity  # 32-byte header + 16-byte body
        peer._data[start : start + 4] = (10**9).to_bytes(4, "little")
        peer.close()
        thread.pipeline.close_session(session.session_id)

    thread.call(misbehave())
    _wait_ready(thread, "tts", restarts + 1, timeout_s=30)
    assert supervisor.malformed_records["tts"] == malformed + 2
    _turn_works(thread, clip)


def test_a_client_that_does_not_read_loses_reply_audio_not_anyone_elses_time(running):
    """The output side: a WebSocket client that never reads. Its reply audio is dropped
    and counted at its own bounded queue; the event loop that routes every record never
    waits for it, and another session's turn is served meanwhile."""
    thread, clip = running
    pipeline = thread.pipeline

    async def start_server():
        server = VoiceServer(pipeline, ServerConfig(port=0, send_queue_audio_s=0.2))
        return server, await server.start()

    server, port = thread.call(start_server())
    lag = {"max": 0.0, "run": True}

    async def watch_loop() -> None:
        while lag["run"]:
            started = time.perf_counter()
            await asyncio.sleep(0.01)
            lag["max"] = max(lag["max"], time.perf_counter() - started - 0.01)

    watcher = asyncio.run_coroutine_threadsafe(watch_loop(), thread.loop)

    async def silent_client() -> None:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: window
        sock.connect(("127.0.0.1", port))
        url = f"ws://127.0.0.1:{port}/v1/voice?output_sample_rate=48000"
        async with connect(url, sock=sock, max_queue=1) as ws:
            for frame in clip.with_silence(0.5).frames(20):
                await ws.send(frame)
            await ws.send(json.dumps({"type": "input.end"}))
            deadline = time.monotonic() + 60
            while not any(
                c.outbox.dropped_audio_bytes and c.session.finished for c in server.clients.values()
            ):
                assert time.monotonic() < deadline, "no reply audio was dropped"
                await asyncio.sleep(0.05)
            client = next(iter(server.clients.values()))
            return client.outbox.dropped_audio_bytes, client.session.finished[0].to_dict()

    try:
        dropped, trace = asyncio.run(silent_client())
        row = _turn_works(thread, clip)  # another session, same stages
        metrics = thread.call(_scrape(server))
    finally:
        lag["run"] = False
        watcher.result(10)
        thread.call(server.stop())
    assert dropped > 0 and trace["error"] is None
    assert row["error"] is None
    assert metrics['voxrelay_client_dropped_audio_bytes_total{direction="reply"}'] >= dropped
    # Waiting on the client would hold the loop for seconds (the whole reply); on the
    # loaded 2-core box plain scheduling delays reach a few hundred ms.
    assert lag["max"] < 1.0, f"the routing loop stalled {lag['max'] * 1000:.0f} ms"


async def _scrape(server) -> dict[str, float]:
    body, _ = server.metrics.render()
    samples = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return samples
