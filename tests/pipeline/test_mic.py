"""`voxrelay mic` as a real process, with a fake microphone and speaker made of ALSA.

A private `$HOME/.asoundrc` makes the default ALSA device a `file` plugin over `null`:
capture reads a FIFO, playback writes another. `null` has no clock, so the threads here
give the timing a sound card would: one writes the speech clip (then silence) into the
microphone FIFO at real-time pace, the other drains the speaker FIFO at a bounded rate.
Each restarts when the FIFO is reopened (PortAudio opens every device once to probe it).
"""

import contextlib
import ctypes.util
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import jiwer
import numpy as np
import pytest

from voxrelay.pipeline.audio_io import read_clip
from voxrelay.pipeline.mic import Speaker
from voxrelay.pipeline.models import voxrelay_home

EXPECTED = "he was not an ill disposed young man"
FRAME_BYTES = 640  # 20 ms of 16 kHz PCM16

pytestmark = pytest.mark.slow

ASOUNDRC = """
pcm.!default {{ type asym capture.pcm "fakemic" playback.pcm "fakespeaker" }}
pcm.fakemic {{
    type file
    slave.pcm "null"
    file "/dev/null"
    infile "{mic}"
    format "raw"
}}
pcm.fakespeaker {{
    type file
    slave.pcm "null"
    file "{speaker}"
    format "raw"
}}
"""


def _normalise(text: str) -> str:
    return " ".join(jiwer.RemovePunctuation()(text.lower().replace("-", " ")).split())


class FakeMicrophone(threading.Thread):
    """Writes the clip and then silence into the FIFO at 16 kHz real time."""

    def __init__(self, fifo: Path, pcm16: bytes, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.fifo, self.pcm16, self.stop = fifo, pcm16, stop

    def run(self) -> None:
        while not self.stop.is_set():
            with contextlib.suppress(BrokenPipeError), open(self.fifo, "wb", buffering=0) as pipe:
                start = time.perf_counter()
                for index in range(1_000_000):
                    if self.stop.is_set():
                        return
                    delay = start + index * 0.02 - time.perf_counter()
                    if delay > 0:
                        time.sleep(delay)
                    frame = self.pcm16[index * FRAME_BYTES : (index + 1) * FRAME_BYTES]
                    pipe.write(frame.ljust(FRAME_BYTES, b"\0"))


class FakeSpeaker(threading.Thread):
    """Drains the FIFO at about 2x real time (48 kHz PCM16) and keeps what was played."""

    def __init__(self, fifo: Path, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.fifo, self.stop = fifo, stop
        self.played = bytearray()

    def run(self) -> None:
        while not self.stop.is_set():
            with open(self.fifo, "rb", buffering=0) as pipe:
                while chunk := pipe.read(4096):
                    self.played += chunk
                    time.sleep(0.02)

    def loudest_sample(self) -> int:
        samples = np.frombuffer(bytes(self.played[: len(self.played) // 2 * 2]), dtype="<i2")
        return int(np.abs(samples.astype(np.int32)).max()) if len(samples) else 0


def _process_group_members(pgid: int) -> list[int]:
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                members.append(int(stat.parent.name))
    return members


@pytest.fixture
def fake_audio_home(clips_dir, tmp_path):
    if ctypes.util.find_library("portaudio") is None:
        pytest.skip("libportaudio2 is missing (apt-get install libportaudio2; `make system-deps`)")
    if ctypes.util.find_library("asound") is None:
        pytest.skip("alsa-lib (libasound2) is missing")
    mic, speaker = tmp_path / "mic.fifo", tmp_path / "speaker.fifo"
    os.mkfifo(mic)
    os.mkfifo(speaker)
    (tmp_path / ".asoundrc").write_text(ASOUNDRC.format(mic=mic, speaker=speaker))
    clip = read_clip(clips_dir / "librivox/0880.wav")
    assert (clip.sample_rate, clip.channels) == (16000, 1)
    stop = threading.Event()
    microphone = FakeMicrophone(mic, clip.pcm16.astype("<i2").tobytes(), stop)
    loudspeaker = FakeSpeaker(speaker, stop)
    microphone.start()
    loudspeaker.start()
    yield tmp_path, loudspeaker
    stop.set()
    # Threads blocked in open() on a FIFO wake when the other end opens.
    for fifo, flags in ((mic, os.O_RDONLY), (speaker, os.O_WRONLY)):
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, flags | os.O_NONBLOCK))


def test_mic_transcribes_replies_and_stops_cleanly_on_ctrl_c(fake_audio_home):
    home, loudspeaker = fake_audio_home
    env = {**os.environ, "HOME": str(home), "VOXRELAY_HOME": str(voxrelay_home())}
    trace_path = home / "traces.jsonl"
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "voxrelay.pipeline.cli", "mic", "--trace", str(trace_path)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, as a shell job would have
    )
    assert process.stdout is not None
    lines: list[str] = []
    transcript = trace_line = None
    deadline = time.monotonic() + 180
    try:
        while trace_line is None and time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith("you: "):
                transcript = line[len("you: ") :].strip()
            elif line.startswith("trace: ") and "ttfa_ms=" in line:
                trace_line = line
        output = "".join(lines)
        assert trace_line is not None, f"no trace line; output:\n{output}"
        assert transcript is not None and jiwer.wer(EXPECTED, _normalise(transcript)) <= 0.3
        ttfa_ms = float(re.search(r"ttfa_ms=(\d+)ms", trace_line).group(1))
        assert 0 < ttfa_ms < 10_000, trace_line
        first_turn_s = time.monotonic() - started
        # Let the reply play out through the fake speaker before Ctrl-C.
        time.sleep(3)
        stage_pids = _process_group_members(process.pid)
        assert len(stage_pids) >= 4, stage_pids  # the CLI and its three stage processes

        os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C at a terminal does
        stopping = time.monotonic()
        rest, _ = process.communicate(timeout=10)
        stop_s = time.monotonic() - stopping
    finally:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    output += rest
    assert process.returncode in (0, 130), output
    assert "Traceback" not in output, output
    time.sleep(0.5)
    assert _process_group_members(process.pid) == [], "stage processes left behind"
    assert loudspeaker.loudest_sample() > 1000, "no reply audio reached the speaker"
    assert trace_path.read_text().count("\n") >= 1
    print(
        f"\ntranscript: {transcript!r}  {trace_line.strip()}  first turn after "
        f"{first_turn_s:.1f} s; stopped in {stop_s:.1f} s; "
        f"speaker got {len(loudspeaker.played)} bytes"
    )


def test_the_speaker_plays_silence_while_paused_and_keeps_the_reply_for_the_resume():
    speaker = Speaker(device_rate=8000, max_queued_s=10)
    speaker.push(b"\x01\x00" * 100)
    out = bytearray(80)
    speaker.fill(memoryview(out))
    assert out == b"\x01\x00" * 40
    speaker.paused = True  # response.audio.pause
    speaker.fill(memoryview(out))
    assert out == bytes(80) and speaker.busy(0)  # silence; the rest of the reply kept
    speaker.paused = False  # response.audio.resume: on from where it stopped
    speaker.fill(memoryview(out))
    assert out == b"\x01\x00" * 40
    speaker.paused = True
    speaker.clear()  # a cut ends the pause
    assert not speaker.paused and not speaker.busy(0)


def test_mic_without_portaudio_device_says_so(tmp_path):
    """An input device that does not exist gives a one-line error, not a traceback."""
    if ctypes.util.find_library("portaudio") is None:
        pytest.skip("libportaudio2 is missing")
    env = {**os.environ, "HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "voxrelay.pipeline.cli", "mic", "--input-device", "no-such-device"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done
    assert "no usable input device" in done.stderr and "Traceback" not in done.stderr
