"""voxrelay: a streaming voice pipeline (ASR -> LLM -> TTS) built for the lowest time to
first audio. The stage packages live under this namespace: `voxrelay.asr`,
`voxrelay.llm`, `voxrelay.tts`, `voxrelay.ipc`, `voxrelay.pipeline`."""

__version__ = "0.1.0"
