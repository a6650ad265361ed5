"""Piper's model cut in two at the vocoder's input, so a sentence's audio comes out in
chunks: the first ~0.19 s is ready after a fraction of the sentence's vocoder time.

A Piper (VITS) voice is one ONNX graph: text encoder, duration predictor and flow turn
phoneme ids into latent frames (channels, frames), one frame per 256 output samples; the
HiFi-GAN vocoder (`dec`) turns those frames into audio. The vocoder is convolutional: an
output sample depends only on the frames near it, so decoding frames [a, b) with 10
frames of context on each side gives the same samples as decoding the whole sentence
(measured on two sentences: within 7e-7 of a peak of ~0.5; with 8 frames 9e-4, with 4
frames 4e-2). The first chunk is small because the listener waits for it; later chunks
double, since they only have to be ready before the audio ahead of them has played (the
vocoder runs ~10x real time). docs/tts.md, "The vocoder in chunks".
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
from onnx.utils import Extractor

# ONNX node names from Piper's export (PyTorch module paths): the vocoder's first layer.
_VOCODER_FIRST_NODE = "/dec/conv_pre/Conv"
CONTEXT_FRAMES = 10
# The last chunk is at least this long, so that a sentence's trailing silence (Piper adds
# 100-200 ms, ~9-17 frames) falls inside it and is trimmed whole.
MIN_LAST_CHUNK_FRAMES = 24


def chunk_bounds(frames: int, first_chunk_frames: int) -> list[tuple[int, int]]:
    """[start, stop) frame ranges covering `frames`: the first `first_chunk_frames` long,
    each next one twice the last, the last one at least MIN_LAST_CHUNK_FRAMES (a short
    remainder joins the chunk before it). first_chunk_frames=0: one chunk."""
    if first_chunk_frames <= 0 or frames <= first_chunk_frames + MIN_LAST_CHUNK_FRAMES:
        return [(0, frames)]
    bounds: list[tuple[int, int]] = []
    start, size = 0, first_chunk_frames
    while frames - start > size + MIN_LAST_CHUNK_FRAMES:
        bounds.append((start, start + size))
        start, size = start + size, size * 2
    bounds.append((start, frames))
    return bounds


def onnx_session(model: Path | onnx.ModelProto, num_threads: int) -> onnxruntime.InferenceSession:
    """A CPU session pinned to `num_threads` (the machine is shared with the ASR and LLM
    workers; PiperVoice.load takes no session options)."""
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = num_threads
    options.inter_op_num_threads = 1
    source = str(model) if isinstance(model, Path) else model.SerializeToString()
    return onnxruntime.InferenceSession(
        source, sess_options=options, providers=["CPUExecutionProvider"]
    )


class SplitVoiceModel:
    """The two halves of one Piper ONNX file, each in its own onnxruntime session."""

    def __init__(self, model_path: Path, num_threads: int) -> None:
        model = onnx.load(str(model_path))
        first = [node for node in model.graph.node if node.name == _VOCODER_FIRST_NODE]
        if len(first) != 1:
            raise ValueError(
                f"{model_path} has no node {_VOCODER_FIRST_NODE!r}: not a Piper VITS export "
                "this stage can split; set TTSConfig.first_chunk_frames=0 to run it whole"
            )
        latent = first[0].input[0]
        inputs = [tensor.name for tensor in model.graph.input]
        outputs = [tensor.name for tensor in model.graph.output]
        extractor = Extractor(model)
        self.front_session = onnx_session(extractor.extract_model(inputs, [latent]), num_threads)
        self._vocoder = onnx_session(extractor.extract_model([latent], outputs[:1]), num_threads)
        self._latent_name = latent

    def latents(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        """(1, channels, frames) float32 for one sentence's Piper inputs."""
        latents = self.front_session.run(None, feeds)[0]
        assert isinstance(latents, np.ndarray) and latents.ndim == 3, type(latents)
        return latents

    def audio(
        self, latents: np.ndarray, first_chunk_frames: int
    ) -> Iterator[tuple[np.ndarray, bool]]:
        """The sentence's audio (float32, mono), chunk by chunk (see chunk_bounds), each
        with whether it is the last."""
        frames = latents.shape[2]
        bounds = chunk_bounds(frames, first_chunk_frames)
        for index, (start, stop) in enumerate(bounds):
            lo, hi = max(0, start - CONTEXT_FRAMES), min(frames, stop + CONTEXT_FRAMES)
            window = np.ascontiguousarray(latents[:, :, lo:hi])
            audio = self._vocoder.run(None, {self._latent_name: window})[0].reshape(-1)
            hop = audio.size // (hi - lo)  # 256 samples per frame
            yield audio[(start - lo) * hop : (stop - lo) * hop], index == len(bounds) - 1
