"""`--mode sequential`: the same models, one after another, no streaming at all.

Whole transcript after the endpoint (no partials, no speculation), then the whole
reply, then the whole synthesis; the first sample leaves when all of it is done. This
is the yardstick `make bench` measures the streaming pipeline against, so it runs in
one process with nothing in between that streaming would not also pay. Its engines are
the pipeline's own (pipeline/naive.py is the same chain on the stock runtimes).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from voxrelay.asr.config import ASRConfig
from voxrelay.asr.events import Final
from voxrelay.asr.models import load_asr
from voxrelay.asr.stream import ASRStream
from voxrelay.ipc.records import Stamp
from voxrelay.llm.dialogue import Dialogue, llm_config
from voxrelay.llm.engine import LLMEngine
from voxrelay.llm.native_backend import NativeBackend
from voxrelay.llm.sentences import SentenceLimit
from voxrelay.pipeline.audio_io import Clip
from voxrelay.pipeline.config import PipelineConfig
from voxrelay.pipeline.models import asset_path
from voxrelay.pipeline.run import FRAME_MS, ClipResult
from voxrelay.pipeline.trace import TurnTrace
from voxrelay.tts.config import TTSConfig
from voxrelay.tts.voice import Voice


class SequentialPipeline:
    def __init__(
        self,
        asr: dict[str, Any] | None = None,
        llm: dict[str, Any] | None = None,
        tts: dict[str, Any] | None = None,
    ) -> None:
        asr_settings = dict(asr or {})
        end_silence = int(asr_settings.get("end_silence_ms", ASRConfig().end_silence_ms))
        # No transcript before the end of turn, so no hold on unfinished words either.
        asr_settings.update(partial_interval_ms=0, speculative_silence_ms=end_silence)
        self.asr_config = ASRConfig(**asr_settings).alone()
        self.asr_models = load_asr(self.asr_config)
        self.llm_config = llm_config(llm or {})
        self.engine = LLMEngine(self.llm_config)
        # Prompts are fitted to the context as the stage fits them (Dialogue.prompt_text).
        self.backend = NativeBackend(self.llm_config, self.engine)
        tts_settings = {"voice_dir": asset_path("joe"), **(tts or {})}
        self.voice = Voice(TTSConfig(**tts_settings))
        self._request_ids = 0
        self._sessions = 0
        # Named in every trace as the streaming pipeline names them.
        self._models = PipelineConfig(
            asr={"model": self.asr_config.model}, llm=llm or {}, tts=tts or {}
        ).model_names()

    def run_clip(
        self, clip: Clip, realtime: bool = True, trailing_silence_s: float = 1.0
    ) -> ClipResult:
        self._sessions += 1
        stream = ASRStream(self.asr_config, self.asr_models)
        dialogue = Dialogue()
        traces: list[TurnTrace] = []
        audio: list[np.ndarray] = []
        for frame, arrival_ns in clip.with_silence(trailing_silence_s).paced(FRAME_MS, realtime):
            events = stream.feed(frame, clip.sample_rate, clip.channels, arrival_ns)
            for event in events:
                if isinstance(event, Final):
                    traces.append(self._turn(event, dialogue, audio))
        for event in stream.flush(time.perf_counter_ns()):
            if isinstance(event, Final):
                traces.append(self._turn(event, dialogue, audio))
        pcm = np.concatenate(audio) if audio else np.zeros(0, dtype=np.int16)
        return ClipResult(traces, pcm.tobytes(), self.voice.sample_rate)

    def _turn(self, final: Final, dialogue: Dialogue, audio: list[np.ndarray]) -> TurnTrace:
        asr_model, llm_model, tts_voice = self._models
        trace = TurnTrace(
            self._sessions,
            final.utterance_id,
            "file",
            "sequential",
            asr_model=asr_model,
            llm_model=llm_model,
            tts_voice=tts_voice,
        )
        trace.mark(Stamp.SPEECH_END, final.speech_end_ns)
        trace.mark(Stamp.ASR_FINAL, time.perf_counter_ns())
        trace.transcript = final.text
        trace.asr_decode_ms = final.decode_ms
        prompt = dialogue.prompt_text(self.backend, self.llm_config, final.text)
        ids = self.engine.tokenizer.encode(prompt)
        trace.prefill_tokens = len(ids)
        self._request_ids += 1
        self.engine.add_request(self._request_ids, ids)
        limit = SentenceLimit(self.llm_config.max_sentences)  # as the LLM stage stops
        while self.engine.has_unfinished():
            for output in self.engine.step():
                if Stamp.LLM_FIRST_TOKEN not in trace.stamps:
                    trace.mark(Stamp.LLM_FIRST_TOKEN, time.perf_counter_ns())
                if limit.admit(output.text)[1]:
                    self.engine.abort(self._request_ids)
        trace.mark(Stamp.LLM_DONE, time.perf_counter_ns())
        trace.reply_text = limit.text.strip()
        dialogue.exchanges.append((final.text, trace.reply_text))
        chunks = [c.pcm for c in self.voice.synthesize(trace.reply_text, final=True)]
        audio.append(whole_reply_out(trace, chunks, self.voice.sample_rate))
        return trace


def whole_reply_out(trace: TurnTrace, chunks: list[np.ndarray], sample_rate: int) -> np.ndarray:
    """A yardstick's reply audio, all synthesized: its first sample leaves now."""
    reply = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int16)
    done = time.perf_counter_ns()
    trace.mark(Stamp.TTS_FIRST_AUDIO, done)
    trace.mark(Stamp.TTS_DONE, done)
    trace.first_audio_out_ns = done
    trace.audio_out_samples = len(reply)
    trace.audio_out_rate = sample_rate
    return reply
