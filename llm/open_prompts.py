"""Each session's open prompt: the reply's prompt, computed before the user's turn ends.

While the user speaks, every PARTIAL with longer stable words extends the session's
open request (`prompt_complete=False`): system prompt + dialogue + the stable words, so
their KV is computed before the user stops. A revised stable word (ROLLBACK, or a final
transcript that differs) makes the backend replace the prompt in place: the native
engine keeps the K/V of what the two share (`LLMEngine.replace_prompt`).

Ahead of the turn's first word the open prompt already holds everything up to the
user's header ("...<|im_start|>user\\n"). It is opened as soon as that text is known: when
the session opens, when a reply joins the history, when a barge-in's HEARD rewrites it.
The prefix cache keeps only full blocks (16 tokens), so without it every turn computed
the tokens past the last full block of the system prompt and dialogue, the last reply's
close and the user's header at the end of the turn, with the words: ~7-16 more tokens
(~2.4 ms each on the 2 cores) on every turn whose words were not stable before its
pause (a few words; a quiet line whose words keep being revised; docs/llm.md,
"Session 27"). A turn that heard no words gives the prompt back to the next one.

An idle prompt holds one of the engine's `max_num_seqs` sequences: one opened ahead
gives its place up to a turn's prompt or a reply that needs it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from voxrelay.llm.backend import REPLY_HEADER, LLMBackend
from voxrelay.llm.config import LLMConfig
from voxrelay.llm.dialogue import Dialogue

AHEAD = -1  # the turn id of a prompt opened before the session's next turn began


@dataclass(slots=True)
class OpenPrompt:
    request_id: int
    turn_id: int  # AHEAD until a turn's words take it
    prompt: str  # ChatML text without REPLY_HEADER
    tokens: int


class OpenPrompts:
    def __init__(
        self,
        backend: LLMBackend,
        config: LLMConfig,
        next_request_id: Callable[[], int],
        busy: Callable[[], int],
    ) -> None:
        """`busy`: the engine sequences the stage holds besides open prompts (replies)."""
        self.backend = backend
        self.config = config
        self._next_request_id = next_request_id
        self._busy = busy
        self.by_session: dict[int, OpenPrompt] = {}

    def warm(self, session_id: int, turn_id: int, dialogue: Dialogue, stable: str) -> bool:
        """Open or extend the session's prompt for turn `turn_id` to end with `stable`;
        False if there is nothing to warm."""
        # Whisper often punctuates the end of what it has heard so far ("consider how.")
        # and drops it once more words come; a prefix without it stays a prefix.
        stable = stable.strip().rstrip(".,?!;:")
        if not stable and not self.config.open_prompt_ahead:
            return False
        # No stable word yet (or none left after a revision): through the user's header.
        return self._open(session_id, turn_id, dialogue, stable)

    def ahead(self, session_id: int, dialogue: Dialogue) -> None:
        """Open the session's next prompt through the user's header, unless it has an open
        prompt or the engine has no sequence to spare."""
        if not self.config.open_prompt_ahead or session_id in self.by_session:
            return
        if self._busy() + len(self.by_session) >= self.config.max_num_seqs:
            return
        self._open(session_id, AHEAD, dialogue, "")

    def rewind(self, session_id: int, dialogue: Dialogue) -> None:
        """Take the session's open prompt back to the user's header for its next turn
        (this one heard no words), keeping the K/V the two share; else drop it."""
        current = self.by_session.get(session_id)
        if current is None:
            return
        if not self.config.open_prompt_ahead or not self._open(session_id, AHEAD, dialogue, ""):
            self.drop(session_id)

    def take(self, session_id: int, turn_id: int) -> int | None:
        """The request id of the session's open prompt if turn `turn_id` may complete it
        (its own, or one opened ahead), else None (a stale one is dropped)."""
        current = self.by_session.pop(session_id, None)
        if current is None:
            return None
        if current.turn_id in (turn_id, AHEAD):
            return current.request_id
        self.backend.abort(current.request_id)
        return None

    def turn_of(self, session_id: int) -> int | None:
        current = self.by_session.get(session_id)
        return None if current is None else current.turn_id

    def drop(self, session_id: int) -> None:
        stale = self.by_session.pop(session_id, None)
        if stale is not None:
            self.backend.abort(stale.request_id)  # computed blocks stay in the prefix cache

    def drop_before(self, session_id: int, turn_id: int) -> None:
        """Drop the session's prompt of a turn older than `turn_id` (one opened ahead
        stays: no turn took it, and the history it holds has not changed)."""
        current = self.by_session.get(session_id)
        if current is not None and current.turn_id != AHEAD and current.turn_id < turn_id:
            self.drop(session_id)

    def make_room(self) -> None:
        """Give up prompts opened ahead, oldest first, until a new sequence fits."""
        for session_id, current in list(self.by_session.items()):
            if self._busy() + len(self.by_session) < self.config.max_num_seqs:
                return
            if current.turn_id == AHEAD:
                self.drop(session_id)

    def prefilling(self) -> bool:
        """Whether an open prompt still has tokens to compute (its last one is held
        back until the prompt completes: the reply's first forward needs one)."""
        return any(
            self.backend.prefilled_tokens(p.request_id) + 1 < p.tokens
            for p in self.by_session.values()
        )

    def _open(self, session_id: int, turn_id: int, dialogue: Dialogue, words: str) -> bool:
        prompt = dialogue.prompt_text(self.backend, self.config, words)
        if not prompt.endswith(REPLY_HEADER):
            return False  # not a ChatML prompt: nothing sensible to warm
        prompt = prompt[: -len(REPLY_HEADER)]
        current = self.by_session.get(session_id)
        if current is not None and (turn_id == AHEAD or current.turn_id in (turn_id, AHEAD)):
            # A turn's words take the prompt opened ahead; `rewind` gives one back.
            current.turn_id = turn_id
            if prompt != current.prompt:  # a revised word is replaced by the backend
                self.backend.extend(current.request_id, prompt)
                current.prompt, current.tokens = prompt, self.backend.count_tokens(prompt)
            return True
        self.drop(session_id)
        self.make_room()
        request_id = self._next_request_id()
        self.backend.open(request_id, prompt)
        tokens = self.backend.count_tokens(prompt)
        self.by_session[session_id] = OpenPrompt(request_id, turn_id, prompt, tokens)
        return True
