"""Streaming speech recognition: audio frames in, SpeechStart/Partial/.../Final events out.

Import from the submodules (`asr.stream`, `asr.config`, ...): this package stays light so
that reading a config does not load faster-whisper.
"""
