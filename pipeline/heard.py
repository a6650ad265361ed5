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
from collections.abc import Callable, Iterable, Iterator
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


class Playbacks:
    """A session's reply audio by turn, as its sink got it, until surely played: when the
    audio sent so far ends playing, and what of each reply a cut leaves unheard."""

    def __init__(self) -> None:
        self._by_turn: dict[int, Playback] = {}
        self.end_ns = 0  # when the reply audio sent so far ends playing (1x from the first)
        # A barge-in pause (pipeline/interrupts.py): since when the sink holds the reply
        # audio, and for which turn's speech. Nothing plays while it lasts.
        self.paused_ns = 0
        self.paused_for = -1
        # Set by a transport that queues after the sink (WebSocket): the samples of a turn
        # (at the reply's rate) that actually left for the client.
        self.sent_samples: Callable[[int], int] | None = None

    def __contains__(self, turn_id: int) -> bool:
        return turn_id in self._by_turn

    def __iter__(self) -> Iterator[int]:
        return iter(self._by_turn)

    def __getitem__(self, turn_id: int) -> Playback:
        return self._by_turn[turn_id]

    def get(self, turn_id: int) -> Playback | None:
        return self._by_turn.get(turn_id)

    def of(self, turn_id: int) -> Playback:
        """The turn's playback, begun if it has none."""
        if turn_id not in self._by_turn:
            self._by_turn[turn_id] = Playback()
        return self._by_turn[turn_id]

    def audio(self, turn_id: int, samples: int, rate: int, first_audio_ns: int) -> None:
        """`samples` more of the turn's reply went to the sink."""
        playback = self.of(turn_id)
        playback.on_audio(samples, rate, first_audio_ns)
        self.end_ns = max(self.end_ns, playback.end_ns())

    @property
    def paused(self) -> bool:
        return bool(self.paused_ns)

    def clock(self, now_ns: int) -> int:
        """How far the replies have played by `now_ns`, as a time on their timeline: a
        pause stops it."""
        return min(now_ns, self.paused_ns) if self.paused_ns else now_ns

    def pause(self, turn_id: int, now_ns: int) -> bool:
        """The sink holds the reply audio from `now_ns` on, for `turn_id`'s speech (which
        may still turn out no interruption). False: paused already, and now for this
        later speech: the earlier one's words no longer end the pause."""
        self.paused_for = turn_id
        if self.paused_ns:
            return False
        self.paused_ns = now_ns
        return True

    def resume(self, now_ns: int) -> bool:
        """The held audio plays on from where it stopped: the timeline of every reply
        not played out before the pause moves by it (one whose first sample came during
        it starts now). False: there was no pause."""
        if not self.paused_ns:
            return False
        for playback in self._by_turn.values():
            if playback.first_audio_ns and playback.end_ns() > self.paused_ns:
                playback.first_audio_ns += now_ns - max(self.paused_ns, playback.first_audio_ns)
        self.end_ns = max((playback.end_ns() for playback in self._by_turn.values()), default=0)
        self.paused_ns, self.paused_for = 0, -1
        return True

    def complete(self, turn_id: int, now_ns: int) -> None:
        """The turn's audio is all out (AUDIO_END); replies surely played are forgotten."""
        now_ns = self.clock(now_ns)
        for turn, playback in list(self._by_turn.items()):
            if playback.complete and playback.end_ns() < now_ns:
                del self._by_turn[turn]
        if turn_id in self._by_turn:
            self._by_turn[turn_id].complete = True

    def drop(self, turn_id: int) -> None:
        """The turn's audio was never played (retracted) or no longer counts (failed)."""
        self._by_turn.pop(turn_id, None)

    def cut_before(self, turn_id: int) -> None:
        """A barge-in: the replies of older turns stop playing (a pause ends with them)."""
        self.end_ns = self.paused_ns = 0
        self.paused_for = -1
        for turn in [t for t in self._by_turn if t < turn_id]:
            del self._by_turn[turn]

    def turns_before(self, turn_id: int) -> set[int]:
        return {t for t in self._by_turn if t < turn_id}

    def heard(self, turns: Iterable[int], now_ns: int) -> list[tuple[int, str]]:
        """(turn, heard text) for each of `turns` whose reply a cut at `now_ns` leaves
        unheard in part: none of it at the sink yet, or its audio still playing."""
        now_ns = self.clock(now_ns)
        heard: list[tuple[int, str]] = []
        for turn in sorted(turns):
            playback = self._by_turn.get(turn)
            if playback is None:  # nothing of it reached the sink
                heard.append((turn, CUT_MARK))
                continue
            sent = self.sent_samples(turn) if self.sent_samples is not None else None
            if not playback.fully_played(now_ns, sent):
                played = playback.played_samples(now_ns, sent)
                heard.append((turn, heard_text(playback.fragments, played)))
        return heard


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
