"""`--mode naive`: the same models on their stock runtimes, one after another.

The chain a first build would be, and the one the brief's "naive chain" names: the same
Silero VAD and end-of-turn rule as the pipeline (so the endpoint wait is the same), then
faster-whisper's `transcribe()` on the utterance (its defaults: a 30 s window, beam
search of 5), HF transformers' `generate()` on the same GGUF for the whole reply (with
the pipeline's reply rules, no repeated 6-gram and two sentences, so it says the same
reply), and Piper's `synthesize()` of the whole reply; the first sample leaves when all
of it is done. `make bench` measures the streaming pipeline against it and against `--mode
sequential` (the pipeline's own engines, no streaming) in one run: the first ratio is
what the whole of voxrelay saves, the second what streaming alone saves.
"""

from __future__ import annotations

import contextlib
import io
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from voxrelay.asr.audio import AudioConverter
from voxrelay.asr.config import ASRConfig
from voxrelay.asr.endpoint import Endpointer, EndpointKind
from voxrelay.asr.models import load_asr
from voxrelay.asr.timeline import ArrivalClock
from voxrelay.asr.vad import WINDOW_SAMPLES, StreamingVAD
from voxrelay.ipc.records import Stamp
from voxrelay.llm.dialogue import Dialogue, llm_config
from voxrelay.llm.gguf_loader import GGUFFile, read_tokenizer_data
from voxrelay.llm.repeats import banned_tokens
from voxrelay.llm.sentences import within
from voxrelay.llm.tokenizer import ChatTokenizer
from voxrelay.pipeline.audio_io import Clip
from voxrelay.pipeline.config import PipelineConfig
from voxrelay.pipeline.models import asset_path
from voxrelay.pipeline.run import FRAME_MS, ClipResult
from voxrelay.pipeline.sequential import SequentialPipeline, whole_reply_out
from voxrelay.pipeline.trace import TurnTrace

SAMPLE_RATE = 16_000


class _NoRepeats:
    """The engine's ban on repeated n-grams of the reply (llm/repeats.py) as a
    transformers logits processor, so both chains say the same replies."""

    def __init__(self, prompt_tokens: int, n: int) -> None:
        self.prompt_tokens = prompt_tokens
        self.n = n

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        banned = banned_tokens(input_ids[0, self.prompt_tokens :].tolist(), self.n)
        if banned:
            scores[0, banned] = float("-inf")
        return scores


class _EnoughSentences:
    """transformers stopping criterion: the reply went past the LLM stage's sentence
    limit (llm/sentences.py)."""

    def __init__(self, tokenizer: ChatTokenizer, prompt_tokens: int, max_sentences: int) -> None:
        self.tokenizer = tokenizer
        self.prompt_tokens = prompt_tokens
        self.max_sentences = max_sentences

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **_: Any) -> torch.Tensor:
        reply = self.tokenizer.decode(input_ids[0, self.prompt_tokens :].tolist())
        return torch.tensor([within(reply, self.max_sentences)[1]])


def load_hf_model() -> torch.nn.Module:
    """SmolLM2 from the bundled GGUF through HF transformers (dequantized to float32)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        from transformers import AutoModelForCausalLM
        from transformers.utils import logging
    except ImportError as exc:
        raise RuntimeError(
            "the naive chain runs the LLM on HF transformers: pip install transformers"
        ) from exc
    logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    # The GGUF converter draws its own tqdm bar on stderr; keep the output readable.
    with contextlib.redirect_stderr(io.StringIO()):
        model: torch.nn.Module = AutoModelForCausalLM.from_pretrained(
            asset_path("smollm2"), gguf_file="model.gguf", dtype=torch.float32
        )
    model.train(False)  # inference: no dropout
    return model


class _Prompts:
    """What `Dialogue.prompt_text` needs of a backend: the chat template and a count."""

    def __init__(self, tokenizer: ChatTokenizer) -> None:
        self.tokenizer = tokenizer

    def render(self, messages: Sequence[Mapping[str, str]]) -> str:
        return str(self.tokenizer.apply_chat_template(messages, add_generation_prompt=True))

    def count_tokens(self, prompt: str) -> int:
        return len(self.tokenizer.encode(prompt))


class NaivePipeline:
    def __init__(
        self, asr: dict[str, Any] | None = None, tts: dict[str, Any] | None = None
    ) -> None:
        from piper import PiperVoice

        self.asr_config = ASRConfig(**(asr or {})).alone()
        models = load_asr(self.asr_config)
        self.whisper, self.vad_model = models.whisper[self.asr_config.model], models.vad
        self.llm_config = llm_config({})
        self.tokenizer = ChatTokenizer(read_tokenizer_data(GGUFFile(self.llm_config.model_path)))
        self.prompts = _Prompts(self.tokenizer)
        self.model: Any = load_hf_model()  # transformers' generate() is untyped
        voice_dir = asset_path(str((tts or {}).get("voice", "joe")))
        self.voice = PiperVoice.load(voice_dir / "voice.onnx")
        self._pad = self.asr_config.speech_pad_ms * SAMPLE_RATE // 1000
        self._sessions = 0
        self._models = PipelineConfig(
            asr={"model": self.asr_config.model}, tts=tts or {}
        ).model_names()

    def run_clip(
        self, clip: Clip, realtime: bool = True, trailing_silence_s: float = 1.0
    ) -> ClipResult:
        self._sessions += 1
        converter = AudioConverter(clip.sample_rate, clip.channels)
        vad = StreamingVAD(self.vad_model)
        endpointer = Endpointer(self.asr_config)
        clock = ArrivalClock()
        chunks: list[np.ndarray] = []  # the input at 16 kHz: a yardstick keeps it all
        dialogue = Dialogue()
        traces: list[TurnTrace] = []
        audio: list[np.ndarray] = []
        start = 0

        def on_end(end_sample: int) -> None:
            speech = np.concatenate(chunks)[max(start - self._pad, 0) : end_sample + self._pad]
            trace = self._turn(speech, clock.arrival_ns(end_sample), dialogue, audio)
            if trace is not None:
                traces.append(trace)

        for frame, arrival_ns in clip.with_silence(trailing_silence_s).paced(FRAME_MS, realtime):
            before = converter.input_frames
            chunks.append(converter.convert(frame))
            clock.record(converter.input_frames - before, clip.sample_rate, arrival_ns)
            for prob in vad.push(chunks[-1]):
                for event in endpointer.push(prob):
                    if event.kind is EndpointKind.START:
                        start = event.sample
                    elif event.kind is EndpointKind.END:
                        on_end(event.sample)
        for event in endpointer.finish(vad.windows_done * WINDOW_SAMPLES):
            on_end(event.sample)
        pcm = np.concatenate(audio) if audio else np.zeros(0, dtype=np.int16)
        return ClipResult(traces, pcm.tobytes(), self.voice.config.sample_rate)

    def _turn(
        self, speech: np.ndarray, speech_end_ns: int, dialogue: Dialogue, audio: list[np.ndarray]
    ) -> TurnTrace | None:
        asr_model, llm_model, tts_voice = self._models
        turn = len(dialogue.exchanges)
        trace = TurnTrace(self._sessions, turn, "file", "naive", asr_model=asr_model,
                          llm_model=llm_model, tts_voice=tts_voice)  # fmt: skip
        trace.mark(Stamp.SPEECH_END, speech_end_ns)
        segments, _info = self.whisper.transcribe(speech, language="en")
        text = " ".join(segment.text.strip() for segment in segments).strip()
        trace.mark(Stamp.ASR_FINAL, time.perf_counter_ns())
        if not text:
            return None  # the VAD fired on no words: no turn, as in the pipeline
        trace.transcript = text
        prompt = dialogue.prompt_text(self.prompts, self.llm_config, text)
        ids = self.tokenizer.encode(prompt)
        trace.prefill_tokens = len(ids)
        trace.mark(Stamp.LLM_START, time.perf_counter_ns())
        eos = self.tokenizer.eos_id
        with torch.inference_mode():
            out = self.model.generate(
                torch.tensor([ids]),
                max_new_tokens=self.llm_config.max_new_tokens,
                logits_processor=[_NoRepeats(len(ids), self.llm_config.no_repeat_ngram)],
                stopping_criteria=[
                    _EnoughSentences(self.tokenizer, len(ids), self.llm_config.max_sentences)
                ],
                do_sample=False,
                eos_token_id=eos,
                pad_token_id=eos,
            )
        reply_ids = [t for t in out[0, len(ids) :].tolist() if t != eos]
        trace.mark(Stamp.LLM_DONE, time.perf_counter_ns())
        reply, _ = within(self.tokenizer.decode(reply_ids), self.llm_config.max_sentences)
        trace.reply_text = reply.strip()
        dialogue.exchanges.append((text, trace.reply_text))
        chunks = [c.audio_int16_array for c in self.voice.synthesize(trace.reply_text)]
        audio.append(whole_reply_out(trace, chunks, self.voice.config.sample_rate))
        return trace


def yardstick(mode: str) -> SequentialPipeline | NaivePipeline:
    """The chain `--mode` names: "sequential" (voxrelay's engines) or "naive"."""
    if mode not in ("sequential", "naive"):
        raise ValueError(f"no yardstick called {mode!r}: 'sequential' or 'naive'")
    return SequentialPipeline() if mode == "sequential" else NaivePipeline()
