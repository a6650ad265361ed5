"""`voxrelay mic`: talk to the pipeline through the local microphone and speakers.

Capture: the default (or chosen) input at 16 kHz mono PCM16 in 20 ms blocks. PortAudio
calls back on its own thread; each block is handed to the event loop, which owns the
pipeline (the input ring has one producer). Playback: reply audio is converted to the
output device's rate and queued (bounded); the output callback drains the queue and
plays silence when it is empty.

Echo: with loudspeakers the microphone hears the reply, and the ASR would answer it.
Half-duplex (the default) drops microphone blocks while reply audio is playing and for
`echo_tail_ms` after, which covers the device's output latency. `--full-duplex` keeps
the microphone open (for a headset): speech then interrupts the reply (barge-in).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from voxrelay.pipeline.audio_io import OutputResampler
from voxrelay.pipeline.config import PipelineConfig
from voxrelay.pipeline.run import Pipeline
from voxrelay.pipeline.trace import TurnTrace, format_trace

CAPTURE_RATE = 16_000
FRAME_MS = 20
CAPTURE_BLOCK = CAPTURE_RATE * FRAME_MS // 1000  # 320 samples


@dataclass(frozen=True, slots=True)
class MicConfig:
    """Devices (PortAudio index or name substring; None: the default) and echo policy."""

    input_device: int | str | None = None
    output_device: int | str | None = None
    full_duplex: bool = False
    echo_tail_ms: int = 200  # microphone stays closed this long after the last reply sample
    max_queued_reply_s: float = 60.0  # reply audio waiting to be played; more is dropped

    def __post_init__(self) -> None:
        if self.echo_tail_ms < 0:
            raise ValueError(f"echo_tail_ms must be >= 0, got {self.echo_tail_ms}")
        if self.max_queued_reply_s <= 0:
            raise ValueError(f"max_queued_reply_s must be positive, got {self.max_queued_reply_s}")


def device_arg(text: str | None) -> int | str | None:
    """`--input-device 3` is an index, anything else a name (substring) PortAudio matches."""
    if text is None or text == "":
        return None
    return int(text) if text.isdigit() else text


class Speaker:
    """Reply audio queued for the output callback, which runs on PortAudio's thread."""

    def __init__(self, device_rate: int, max_queued_s: float) -> None:
        self.device_rate = device_rate
        self._max_bytes = int(max_queued_s * device_rate) * 2
        self._chunks: deque[bytes] = deque()
        self._queued_bytes = 0
        self._offset = 0  # bytes of _chunks[0] already played
        self._lock = threading.Lock()
        self.last_sound_ns = 0  # when the callback last played reply audio
        self.dropped_bytes = 0
        self.paused = False  # the user's speech may cut the reply: hold it, play silence

    def push(self, pcm16: bytes) -> None:
        with self._lock:
            if self._queued_bytes + len(pcm16) > self._max_bytes:
                self.dropped_bytes += len(pcm16)
                return
            self._chunks.append(pcm16)
            self._queued_bytes += len(pcm16)

    def clear(self) -> None:
        with self._lock:
            self._chunks.clear()
            self._queued_bytes = self._offset = 0
            self.paused = False

    def busy(self, tail_ns: int) -> bool:
        """Reply audio is queued, or was played less than `tail_ns` ago."""
        return self._queued_bytes > 0 or time.perf_counter_ns() - self.last_sound_ns < tail_ns

    def fill(self, out: memoryview) -> None:
        """The output callback: `out` is the device buffer (PCM16 bytes), filled in place."""
        wanted, written = len(out), 0
        with self._lock:
            while written < wanted and self._chunks and not self.paused:
                chunk = self._chunks[0]
                take = min(wanted - written, len(chunk) - self._offset)
                out[written : written + take] = chunk[self._offset : self._offset + take]
                written += take
                self._offset += take
                self._queued_bytes -= take
                if self._offset == len(chunk):
                    self._chunks.popleft()
                    self._offset = 0
        if written:
            self.last_sound_ns = time.perf_counter_ns()
        out[written:] = bytes(wanted - written)


class MicSession:
    """The Sink of the microphone session: plays replies and prints each finished turn."""

    def __init__(self, pipeline: Pipeline, speaker: Speaker, config: MicConfig) -> None:
        self.pipeline = pipeline
        self.speaker = speaker
        self.config = config
        self._resamplers: dict[int, OutputResampler] = {}
        self._last_final_turn = -1
        self.dropped_input_bytes = 0
        self.echo_dropped_frames = 0
        self.session_id = pipeline.open_session(self, "mic").session_id

    def on_frame(self, pcm16: bytes) -> None:
        """One captured 20 ms block, on the event loop."""
        if not self.config.full_duplex and self.speaker.busy(self.config.echo_tail_ms * 1_000_000):
            self.echo_dropped_frames += 1
            return
        self.dropped_input_bytes += self.pipeline.send_audio(self.session_id, pcm16, CAPTURE_RATE)

    def on_audio(self, turn_id: int, pcm16: bytes, sample_rate: int) -> None:
        resampler = self._resamplers.get(turn_id)
        if resampler is None:
            resampler = self._resamplers[turn_id] = OutputResampler(
                sample_rate, self.speaker.device_rate
            )
        self.speaker.push(resampler.convert(pcm16))

    def on_text(self, turn_id: int, kind: str, text: str) -> None:
        if kind == "transcript.final":
            self._last_final_turn = max(self._last_final_turn, turn_id)
        elif kind == "response.audio.clear":  # the pipeline's rule cut the reply
            self._stop_replies(turn_id)
        elif kind in ("response.audio.pause", "response.audio.resume"):  # words decide
            self.speaker.paused = kind == "response.audio.pause"
        elif (
            kind == "speech.started"
            and self.config.full_duplex
            and self.speaker.busy(0)
            # With words to wait for, the pipeline decides (a "mm-hmm" cuts nothing).
            and not self.pipeline.supervisor.config.barge_in_min_words
        ):
            self.barge_in()

    def barge_in(self) -> None:
        # Replies exist only for finalized turns: stop those, keep the one being spoken.
        floor = self._last_final_turn + 1
        self.pipeline.new_turn(self.session_id, floor, speech=True)
        self._stop_replies(floor)

    def _stop_replies(self, floor: int) -> None:
        """The speaker stops; the replies of turns before `floor` are dropped."""
        self.speaker.clear()
        for turn in [t for t in self._resamplers if t < floor]:
            del self._resamplers[turn]

    def on_error(self, turn_id: int, message: str) -> None:
        print(f"turn {turn_id} failed: {message}", file=sys.stderr, flush=True)

    def on_audio_end(self, turn_id: int) -> None:
        resampler = self._resamplers.pop(turn_id, None)
        if resampler is not None:
            self.speaker.push(resampler.convert(b"", last=True))

    def on_turn_done(self, trace: TurnTrace) -> None:
        self.on_audio_end(trace.turn_id)  # a failed or cut turn: whatever is left
        row = trace.to_dict()
        print(f"you: {row['transcript']}", flush=True)
        if row["backchannel"]:
            print("voxrelay: (a backchannel over the reply: it plays on)", flush=True)
        elif not row["error"]:
            print(f"voxrelay: {row['reply_text']}", flush=True)
        print(f"trace: turn {row['turn']}  {format_trace(row)}", flush=True)

    def on_input_end(self, lost: bool) -> None:
        pass  # a microphone's input never ends while the demo runs


def _sounddevice() -> Any:
    try:
        import sounddevice
    except OSError as exc:  # the PortAudio library itself is missing
        raise ValueError(
            f"PortAudio is not available ({exc}); install it (Debian: apt-get install "
            "libportaudio2)"
        ) from None
    return sounddevice


def _device_rate(sd: Any, device: int | str | None, kind: str) -> int:
    try:
        info = sd.query_devices(device, kind=kind)
    except ValueError as exc:
        flag = "--input-device" if kind == "input" else "--output-device"
        raise ValueError(
            f"no usable {kind} device ({exc}); pick one with {flag} from:\n{sd.query_devices()}"
        ) from None
    return int(info["default_samplerate"])


async def run_mic(config: MicConfig, pipeline_config: PipelineConfig, trace: Path | None) -> None:
    """Body of `voxrelay mic`: runs until SIGINT (Ctrl-C) or SIGTERM."""
    sd = _sounddevice()
    _device_rate(sd, config.input_device, "input")
    output_rate = _device_rate(sd, config.output_device, "output")
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    async with Pipeline(pipeline_config, trace, transport_name="mic") as pipeline:
        speaker = Speaker(output_rate, config.max_queued_reply_s)
        session = MicSession(pipeline, speaker, config)

        def captured(indata: Any, frames: int, at: Any, status: Any) -> None:
            loop.call_soon_threadsafe(session.on_frame, bytes(indata))

        def play(outdata: Any, frames: int, at: Any, status: Any) -> None:
            speaker.fill(memoryview(outdata).cast("B"))

        with contextlib.ExitStack() as streams:
            try:
                # Entering a stream starts it; leaving stops and closes it.
                streams.enter_context(
                    sd.RawInputStream(
                        samplerate=CAPTURE_RATE,
                        blocksize=CAPTURE_BLOCK,
                        channels=1,
                        dtype="int16",
                        device=config.input_device,
                        callback=captured,
                    )
                )
                streams.enter_context(
                    sd.RawOutputStream(
                        samplerate=output_rate,
                        channels=1,
                        dtype="int16",
                        device=config.output_device,
                        latency="low",
                        callback=play,
                    )
                )
            except sd.PortAudioError as exc:
                raise ValueError(f"cannot open the audio device: {exc}") from None
            mode = "full duplex" if config.full_duplex else "half duplex"
            print(
                f"voxrelay: listening ({mode}, playback at {output_rate} Hz); Ctrl-C to stop",
                flush=True,
            )
            await stop.wait()
        pipeline.close_session(session.session_id)
        if speaker.dropped_bytes or session.dropped_input_bytes:
            print(
                f"voxrelay: dropped {session.dropped_input_bytes} input and "
                f"{speaker.dropped_bytes} reply bytes",
                file=sys.stderr,
            )
