"""What an ASR process loads once and all its streams share: the Whisper model(s), the
Silero VAD and, for a learned end of turn that asks for it, Smart Turn."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

import numpy as np
from faster_whisper import WhisperModel
from faster_whisper.vad import SileroVADModel
from threadpoolctl import threadpool_limits

from voxrelay.asr.config import ASRConfig
from voxrelay.asr.decoder import SAMPLE_RATE, WhisperDecoder
from voxrelay.asr.encoder import amx_available, load_audio_encoder
from voxrelay.asr.textdecoder import load_text_decoder
from voxrelay.asr.turn_model import SmartTurn
from voxrelay.asr.vad import load_vad_model

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ASRModels:
    """What an ASR process loads once and all its streams share."""

    whisper: dict[str, WhisperModel]  # by name: the config's one, or both for "auto"
    vad: SileroVADModel
    turn: SmartTurn | None = None  # loaded when the config's learned end asks for it


def load_asr(config: ASRConfig) -> ASRModels:
    """Load the config's Whisper model(s) and the Silero VAD once; share them across
    ASRStreams.

    Also limits numpy's BLAS to one thread in this process: the log-mel's matmul is small,
    and OpenBLAS's second thread, once woken, busy-waits ~0.1 s on a core, which is the
    whole encoder call that follows it (measured: the encoder then gets one core, 78 vs
    102 ms a pause decode; docs/asr.md, "The encoder after an idle spell").
    """
    from voxrelay.pipeline.models import asset_path

    threadpool_limits(limits=1, user_api="blas")
    whisper: dict[str, WhisperModel] = {}
    for name in config.whisper_models:
        whisper[name] = WhisperModel(
            str(asset_path(name)),
            device="cpu",
            compute_type=config.compute_type,
            cpu_threads=config.cpu_threads,
        )
        if config.text_decoder == "native":
            load_text_decoder(str(asset_path(name)))  # cached: streams share it
        if config.encoder == "bfloat16":
            load_audio_encoder(str(asset_path(name)))  # cached too
    if config.encoder == "bfloat16" and not amx_available():
        logger.warning(
            "[asr] encoder = 'bfloat16' on a CPU without AMX: bfloat16 is emulated there "
            "and slower than encoder = 'ctranslate2'"
        )
    wants_turn = config.learns_end and config.turn_audio_model == "smart-turn"
    turn = SmartTurn(asset_path("smart-turn") / "model.onnx") if wants_turn else None
    return ASRModels(whisper, load_vad_model(), turn)


def warm_up(models: ASRModels, config: ASRConfig) -> None:
    """One decode per Whisper model (half a second of faint noise) before the process says
    it is ready. Each model's runtime starts its threads on its first decode, and "auto"
    first decodes with tiny.en only once two sessions share the process: that would be
    in a user's turn, with threads asr/threads.py never learned to pin apart. After this
    the process's threads are fixed."""
    noise = np.random.default_rng(0).normal(0, 1e-3, SAMPLE_RATE // 2).astype(np.float32)
    for name, model in models.whisper.items():
        WhisperDecoder(model, replace(config, model=name)).decode(noise)
    if models.turn is not None:
        models.turn.score(noise)
