"""Streaming Silero VAD (the ONNX model faster-whisper bundles; no torch).

Silero v6 at 16 kHz scores 512-sample (32 ms) windows, each prefixed by the last 64
samples of the previous window, with an LSTM state (h, c) carried from window to window.
One ONNX session is shared by every stream; the state lives here, one per stream.
"""

from __future__ import annotations

import numpy as np
from faster_whisper.vad import SileroVADModel, get_vad_model

WINDOW_SAMPLES = 512
CONTEXT_SAMPLES = 64
STATE_SHAPE = (1, 1, 128)


def load_vad_model() -> SileroVADModel:
    """The bundled Silero model; cached, so every caller shares one ONNX session."""
    return get_vad_model()


class StreamingVAD:
    """Push 16 kHz float32 samples of any length; get one speech probability per window."""

    def __init__(self, vad_model: SileroVADModel) -> None:
        self._session = vad_model.session
        # (1, 64 + 512): context then window, the layout the model was exported with.
        self._window = np.zeros((1, CONTEXT_SAMPLES + WINDOW_SAMPLES), np.float32)
        self._filled = 0  # samples of the current window received so far
        self._h = np.zeros(STATE_SHAPE, np.float32)
        self._c = np.zeros(STATE_SHAPE, np.float32)
        self.windows_done = 0

    def push(self, samples: np.ndarray) -> list[float]:
        """Speech probability of every window that `samples` completed, oldest first."""
        assert samples.dtype == np.float32 and samples.ndim == 1, samples.dtype
        probs: list[float] = []
        offset = 0
        while offset < samples.size:
            take = min(WINDOW_SAMPLES - self._filled, samples.size - offset)
            start = CONTEXT_SAMPLES + self._filled
            self._window[0, start : start + take] = samples[offset : offset + take]
            self._filled += take
            offset += take
            if self._filled == WINDOW_SAMPLES:
                probs.append(self._run_window())
        return probs

    def pad_and_finish(self) -> list[float]:
        """End of input: score the partial last window padded with silence, if any."""
        if self._filled == 0:
            return []
        self._window[0, CONTEXT_SAMPLES + self._filled :] = 0.0
        return [self._run_window()]

    def _run_window(self) -> float:
        prob, self._h, self._c = self._session.run(
            None, {"input": self._window, "h": self._h, "c": self._c}
        )
        # The next window's context is the tail of this one.
        self._window[0, :CONTEXT_SAMPLES] = self._window[0, -CONTEXT_SAMPLES:]
        self._filled = 0
        self.windows_done += 1
        return float(np.asarray(prob).reshape(-1)[0])
