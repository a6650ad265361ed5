"""Smart Turn v3.2: does the audio so far sound like the end of a turn?

An int8 Whisper-tiny encoder with a classifier head (Daily's Smart Turn, BSD-2-Clause;
the CPU export the pipecat-ai wheel bundles, provisioned as the `smart-turn` asset). It
hears the last 8 s of 16 kHz audio up to now, silence included, and returns the
probability that the speaker has finished: intonation, a drawn-out last syllable and
filled pauses tell an unfinished turn where the words alone cannot.

Input: Whisper's log-mel features of exactly 8 s, the audio left-padded with zeros and
normalised to zero mean and unit variance first, (1, 80, 800). faster-whisper's own
extractor computes the features (the same Slaney filters and log compression as
Whisper's), so no second implementation lives here.

The checksummed file is loaded as shipped and edited in memory (`float_softmax`): its
four attention softmaxes read the scores through an int8 quantize/dequantize pair, and
ORT's QLinearSoftmax took a quarter of the inference (docs/asr.md, "Session 16"). Fed the
float scores, the model runs in ~40 ms instead of ~57 on one thread, and hears the
pauses of `bench.turn_end` as well (docs/asr.md, "Session 17").
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from faster_whisper.feature_extractor import FeatureExtractor

SAMPLE_RATE = 16_000
WINDOW_S = 8
WINDOW_SAMPLES = WINDOW_S * SAMPLE_RATE
N_MELS = 80
HOP = 160
FRAMES = WINDOW_SAMPLES // HOP  # 800
NORM_EPS = 1e-7
ATTENTION_SOFTMAXES = 4  # Whisper-tiny's encoder: 4 layers, one softmax each


@dataclass(frozen=True, slots=True)
class TurnScore:
    probability: float  # P(the turn is over), from the audio alone
    compute_ms: float  # features + inference


class SmartTurn:
    """One ONNX session, shared by every stream of a process; `score` is thread-safe."""

    def __init__(self, model_path: Path, threads: int = 1, fast_softmax: bool = True) -> None:
        if not model_path.is_file():
            raise ValueError(
                f"Smart Turn model {model_path} not found; run `voxrelay models fetch smart-turn`"
            )
        model = onnx.load(str(model_path))
        if fast_softmax and (edited := float_softmax(model)) != ATTENTION_SOFTMAXES:
            raise ValueError(
                f"{model_path}: {edited} quantized softmaxes where Smart Turn v3.2 has "
                f"{ATTENTION_SOFTMAXES}; pass fast_softmax=False for another export"
            )
        options = ort.SessionOptions()
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.inter_op_num_threads = 1
        # One thread: the decision runs while Whisper's decode and the LLM's prefill
        # hold the other cores (docs/asr.md, "Learned end of turn" has the timings).
        options.intra_op_num_threads = threads
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self._session = ort.InferenceSession(
            model.SerializeToString(), sess_options=options, providers=["CPUExecutionProvider"]
        )
        inputs = self._session.get_inputs()
        if [i.name for i in inputs] != ["input_features"]:
            raise ValueError(f"{model_path} is not a Smart Turn v3 model (inputs {inputs})")
        self._features = FeatureExtractor(feature_size=N_MELS, hop_length=HOP, chunk_length=8)

    def score(self, audio: np.ndarray) -> TurnScore:
        """P(end of turn) for 16 kHz float32 `audio` ending now (only its last 8 s count)."""
        started = time.perf_counter_ns()
        features = self.features(audio)
        (probability,) = self._session.run(None, {"input_features": features})
        elapsed_ms = (time.perf_counter_ns() - started) / 1e6
        return TurnScore(float(np.asarray(probability).reshape(-1)[0]), elapsed_ms)

    def features(self, audio: np.ndarray) -> np.ndarray:
        """(1, 80, 800) float32 log-mel features of the last 8 s of `audio`."""
        assert audio.ndim == 1, audio.shape
        tail = audio[-WINDOW_SAMPLES:]
        window = np.zeros(WINDOW_SAMPLES, np.float32)
        window[WINDOW_SAMPLES - tail.size :] = tail
        window = (window - window.mean()) / np.sqrt(window.var() + NORM_EPS)
        log_mel = self._features(window, padding=0)  # (80, 800)
        assert log_mel.shape == (N_MELS, FRAMES), log_mel.shape
        return log_mel[None].astype(np.float32, copy=False)


def float_softmax(model: onnx.ModelProto) -> int:
    """Feed every Softmax that reads QuantizeLinear -> DequantizeLinear the float input
    of that pair instead, dropping the pair where nothing else reads it. Returns how
    many softmaxes changed (ORT then runs a float Softmax, not QLinearSoftmax)."""
    graph = model.graph
    producer = {output: node for node in graph.node for output in node.output}
    rewired: list[onnx.NodeProto] = []
    for node in graph.node:
        dequantize = producer.get(node.input[0]) if node.op_type == "Softmax" else None
        if dequantize is None or dequantize.op_type != "DequantizeLinear":
            continue
        quantize = producer.get(dequantize.input[0])
        if quantize is None or quantize.op_type != "QuantizeLinear":
            continue
        node.input[0] = quantize.input[0]
        rewired += [dequantize, quantize]
    for node in rewired:  # the dequantize first: then its quantize is read by no one
        if not any(output in _read(graph) for output in node.output):
            graph.node.remove(node)
    unread = [init for init in graph.initializer if init.name not in _read(graph)]
    for init in unread:  # the pairs' scales and zero points
        graph.initializer.remove(init)
    return len(rewired) // 2


def _read(graph: onnx.GraphProto) -> set[str]:
    return {name for node in graph.node for name in node.input} | {
        output.name for output in graph.output
    }
