"""When the user's speech over a reply cuts it: the barge-in rule of one session.

The ASR's speech start already needs `min_speech_ms` of voiced audio, which keeps
clicks and most coughs out. `min_words > 0` also waits for the ASR to hear that many
words (a partial, or the final transcript at the latest), so a cough or a short "mhm"
does not cut the reply; the price is up to one partial interval of extra delay.

With words to wait for, a listener's backchannel ("mm-hmm", "yeah", "right", "I see")
is no interruption: its words do not count, and an utterance over the reply made of
nothing else is dismissed, neither cutting the reply nor answered as a turn (a speaker
who heard "uh-huh" goes on, and says nothing to it).
"""

from __future__ import annotations

from dataclasses import dataclass

# What a listener says to keep the speaker going: continuers, acknowledgements and
# hesitations, as Whisper writes them (lowercased, split at spaces and hyphens, the
# punctuation around them dropped). "yes" and "no" are left out: said over a question
# they are its answer.
BACKCHANNELS = frozenset(
    {
        ("mhm",), ("mm",), ("mmm",), ("hmm",), ("hm",), ("mm", "hmm"), ("mmhmm",),
        ("uh", "huh"), ("uhhuh",), ("uh",), ("um",), ("ah",), ("oh",), ("aha",),
        ("yeah",), ("yep",), ("yup",), ("okay",), ("ok",), ("right",), ("alright",),
        ("all", "right"), ("sure",), ("i", "see"), ("got", "it"), ("wow",), ("cool",),
    }
)  # fmt: skip
_LONGEST = max(len(phrase) for phrase in BACKCHANNELS)


def _tokens(text: str) -> list[str]:
    """The words of `text` as `BACKCHANNELS` spells them; a bracketed or starred noise
    ("(coughs)", "*cough*") is none."""
    words = []
    for token in text.split():
        if not any(ch.isalnum() for ch in token) or token[0] in "([*" or token[-1] in ")]*":
            continue
        for part in token.lower().split("-"):
            if word := "".join(ch for ch in part if ch.isalnum() or ch == "'"):
                words.append(word)
    return words


def _spoken(text: str) -> list[tuple[str, bool]]:
    """Every word of `text`, with whether it belongs to a backchannel phrase (the longest
    one that starts there)."""
    words, marked, index = _tokens(text), [], 0
    while index < len(words):
        length = next(
            (n for n in range(_LONGEST, 0, -1) if tuple(words[index : index + n]) in BACKCHANNELS),
            0,
        )
        step = max(length, 1)
        marked += [(word, length > 0) for word in words[index : index + step]]
        index += step
    return marked


def check_min_words(words: object) -> int:
    """`barge_in_min_words` as given (a config, a client's `session.update`), checked."""
    if isinstance(words, bool) or not isinstance(words, int) or not 0 <= words <= 20:
        raise ValueError(f"barge_in_min_words must be an integer in 0..20 (0 = off), got {words!r}")
    return words


def interrupting_words(text: str) -> int:
    """The words of `text` that are not a backchannel's ("Yeah, hold on" has two)."""
    return sum(not backchannel for _, backchannel in _spoken(text))


def is_backchannel(text: str) -> bool:
    """Whether `text` holds words and every one is a backchannel's ("Mm-hmm.", "Oh, okay.")."""
    spoken = _spoken(text)
    return bool(spoken) and all(backchannel for _, backchannel in spoken)


@dataclass(slots=True)
class BargeInRule:
    """Decides, per session, whether the user's turn cuts the reply now.

    The caller checks that a reply is still pending or playing; this only says whether
    what the user has said so far counts as an interruption.
    """

    min_words: int = 0
    pending_turn: int | None = None  # spoke over a reply; not enough words yet

    def __post_init__(self) -> None:
        check_min_words(self.min_words)

    def speech_started(self, turn_id: int) -> bool:
        if self.min_words == 0:
            return True
        self.pending_turn = turn_id
        return False

    def dismisses(self, turn_id: int, final_text: str) -> bool:
        """The final transcript of a turn spoken over a reply: True when it is a
        backchannel, whole (the reply goes on, and the turn gets none)."""
        if self.pending_turn != turn_id or not is_backchannel(final_text):
            return False
        self.pending_turn = None
        return True

    def discarded(self, turn_id: int) -> None:
        """The turn's speech held no words (a cough): it cuts nothing."""
        if self.pending_turn == turn_id:
            self.pending_turn = None

    def heard(self, turn_id: int, text: str, final: bool) -> bool:
        """A partial (or the final) transcript of `turn_id`; True: cut the reply now."""
        if self.pending_turn is None or turn_id != self.pending_turn:
            return False
        if interrupting_words(text) >= self.min_words:
            self.pending_turn = None
            return True
        if final:  # too short to interrupt ("He was"): a turn, answered after the reply
            self.pending_turn = None
        return False
