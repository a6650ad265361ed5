"""G.711 mu-law (PCMU) and A-law (PCMA) through 256/65536-entry numpy tables.

Decoding is one table lookup per byte. Encoding is one lookup per 16-bit sample into
a 64 KiB table built once from the ITU-T G.711 segment rules, so a 20 ms packet costs a
single `take` (no per-sample Python, and no `audioop`, gone in Python 3.13).
"""

from __future__ import annotations

import numpy as np

MULAW_BIAS = 33  # on 14-bit magnitudes (0x84 >> 2)
MULAW_CLIP = 8159


def _mulaw_encode_reference(samples: np.ndarray) -> np.ndarray:
    """Vectorised G.711 mu-law over int16 samples, on 14-bit magnitudes as in the ITU
    reference code (the table is built from this)."""
    pcm = samples.astype(np.int32) >> 2
    mask = np.where(pcm < 0, 0x7F, 0xFF)
    magnitude = np.minimum(np.abs(pcm), MULAW_CLIP) + MULAW_BIAS  # 33..8192
    segment = np.floor(np.log2(magnitude)).astype(np.int32) - 5  # 0..7
    mantissa = (magnitude >> (segment + 1)) & 0x0F
    code = np.where(segment > 7, 0x7F, (segment << 4) | mantissa)  # past the top segment
    return (code ^ mask).astype(np.uint8)


def _mulaw_decode_reference(codes: np.ndarray) -> np.ndarray:
    code = ~codes.astype(np.int32) & 0xFF
    exponent = (code >> 4) & 0x07
    mantissa = code & 0x0F
    magnitude = (((mantissa << 3) + 0x84) << exponent) - 0x84
    return np.where(code & 0x80, -magnitude, magnitude).astype(np.int16)


def _alaw_encode_reference(samples: np.ndarray) -> np.ndarray:
    pcm = samples.astype(np.int32) >> 3  # A-law works on 13-bit magnitudes
    sign = np.where(pcm >= 0, 0x80, 0)
    magnitude = np.where(pcm >= 0, pcm, -pcm - 1)
    magnitude = np.minimum(magnitude, 0x0FFF)
    exponent = np.where(
        magnitude < 32, 0, np.floor(np.log2(np.maximum(magnitude, 1))).astype(np.int32) - 4
    )
    mantissa = np.where(exponent == 0, magnitude >> 1, magnitude >> exponent) & 0x0F
    code: np.ndarray = ((sign | (exponent << 4) | mantissa) ^ 0x55).astype(np.uint8)
    return code


def _alaw_decode_reference(codes: np.ndarray) -> np.ndarray:
    code = codes.astype(np.int32) ^ 0x55
    exponent = (code >> 4) & 0x07
    mantissa = code & 0x0F
    magnitude = np.where(
        exponent == 0, (mantissa << 4) + 8, ((mantissa << 4) + 0x108) << np.maximum(exponent - 1, 0)
    )
    return np.where(code & 0x80, magnitude, -magnitude).astype(np.int16)


_ALL_SAMPLES = np.arange(-32768, 32768, dtype=np.int32).astype(np.int16)
_ALL_CODES = np.arange(256, dtype=np.uint8)
# Encode tables are indexed by the sample's uint16 bit pattern.
_ENCODE: dict[str, np.ndarray] = {
    "PCMU": np.empty(65536, dtype=np.uint8),
    "PCMA": np.empty(65536, dtype=np.uint8),
}
_ENCODE["PCMU"][_ALL_SAMPLES.view(np.uint16)] = _mulaw_encode_reference(_ALL_SAMPLES)
_ENCODE["PCMA"][_ALL_SAMPLES.view(np.uint16)] = _alaw_encode_reference(_ALL_SAMPLES)
_DECODE: dict[str, np.ndarray] = {
    "PCMU": _mulaw_decode_reference(_ALL_CODES),
    "PCMA": _alaw_decode_reference(_ALL_CODES),
}
CODECS = tuple(_ENCODE)


def _check(codec: str) -> None:
    if codec not in _ENCODE:
        raise ValueError(f"unknown G.711 codec {codec!r}; use one of {CODECS}")


def encode(pcm16: bytes, codec: str) -> bytes:
    """Little-endian PCM16 -> one G.711 byte per sample."""
    _check(codec)
    samples = np.frombuffer(pcm16, dtype="<i2")
    return bytes(_ENCODE[codec][samples.view(np.uint16)].tobytes())


def decode(payload: bytes, codec: str) -> bytes:
    """G.711 bytes -> little-endian PCM16."""
    _check(codec)
    codes = np.frombuffer(payload, dtype=np.uint8)
    return bytes(_DECODE[codec][codes].astype("<i2").tobytes())


def silence(codec: str) -> int:
    """The byte that decodes to (near) zero: 0xFF for mu-law, 0xD5 for A-law."""
    _check(codec)
    return int(_ENCODE[codec][0])
