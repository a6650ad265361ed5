"""Give freed heap memory back to the OS.

glibc keeps large freed blocks in its heap for reuse, so a process that frees a lot
(an LLM engine dropping the plain weights it packed, an ASR process dropping a closed
session's buffers and resampler) keeps its RSS. Measured: a loaded LLM engine 1947 ->
1507 MB (docs/llm.md); 200 ASR streams opened and closed in turn grew RSS 192 -> 226
MB without a trim, and stayed within 168-201 MB with one after each (docs/asr.md).
"""

from __future__ import annotations

import contextlib
import ctypes


def release_freed_memory() -> None:
    """`malloc_trim(0)`; a no-op where the C library has none (not glibc)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
