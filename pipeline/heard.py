"""What the user heard of a reply cut by barge-in: played samples mapped back to words.

The TTS stamps every fragment it synthesizes with its text and sample count
(`Stamp.FRAGMENT`), so a turn's reply audio is a sequence of spans. Given how many
samples were played before the cut, the heard text is every fully played fragment plus
the share of the playing one that the elapsed samples cover (by characters, which track
speaking time better than words do), and a cut mark. The LLM stores that, not what it
generated, as the assistant's part of the exchange (`ControlOp.HEARD`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

CUT_MARK = "…"  # ends a reply the user did not hear to its end
_WORD = re.compile(r"\S+")


@dataclass(slots=True)
class Playback:
    """One turn's reply audio as its sink got it, kept until it has surely been played.

    What was played is bounded twice: the sink cannot have played more than it got, and
    it plays at 1x from the first sample on, so no more than the time since then. Both
    are upper bounds of what a listener heard (a network client may still have buffered
    or lost some); `sent_samples` from a transport that queues after the sink (WebSocket)
    tightens the first.
    """

    rate: int = 0
    first_audio_ns: int = 0
    delivered_samples: int = 0
    fragments: list[tuple[str, int]] = field(default_factory=list)  # (text, samples)
    complete: bool = False  # AUDIO_END arrived: the fragments are the whole reply

    def on_audio(self, samples: int, rate: int, now_ns: int) -> None:
        if not self.first_audio_ns:
            self.first_audio_ns = now_ns
        self.rate = rate
        self.delivered_samples += samples

    def end_ns(self) -> int:
        if not self.rate:
            return 0
        return self.first_audio_ns + self.delivered_samples * 1_000_000_000 // self.rate

    def played_samples(self, now_ns: int, sent_samples: int | None = None) -> int:
        if not self.first_audio_ns or not self.rate:
            return 0
        elapsed = (now_ns - self.first_audio_ns) * self.rate // 1_000_000_000
        played = min(self.delivered_samples, max(0, elapsed))
        return played if sent_samples is None else min(played, sent_samples)

    def fully_played(self, now_ns: int, sent_samples: int | None = None) -> bool:
        # The fragments' stamps come on the TTS events ring and may lag the audio (and its
        # AUDIO_END) on the data ring: what was delivered bounds the reply from below.
        total = max(sum(samples for _, samples in self.fragments), self.delivered_samples)
        return self.complete and self.played_samples(now_ns, sent_samples) >= total


def heard_text(fragments: list[tuple[str, int]], played_samples: int) -> str:
    """The words of `fragments` (in order) that `played_samples` covered, with CUT_MARK.

    Fragments played to their end count whole; the playing one contributes the words
    that end within the played share of its characters.
    """
    words: list[str] = []
    start = 0
    for text, samples in fragments:
        end = start + samples
        if played_samples >= end:
            words += text.split()
        elif played_samples > start:
            share = (played_samples - start) / samples
            words += [m.group() for m in _WORD.finditer(text) if m.end() <= share * len(text)]
            break
        else:
            break
        start = end
    return _with_cut_mark(" ".join(words))


def _with_cut_mark(text: str) -> str:
    if not text:
        return CUT_MARK
    if text[-1] in ".?!":
        return f"{text} {CUT_MARK}"
    return text.rstrip(",;:—–-") + CUT_MARK
