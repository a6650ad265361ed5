"""Settings of the LLM stage and one session's dialogue memory (shared by the stage
process, the sequential yardstick and the tests)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from voxrelay.llm.backend import LLMBackend
from voxrelay.llm.config import LLMConfig, OpenAIBackendConfig, VLLMBackendConfig
from voxrelay.pipeline.models import asset_path


def llm_config(settings: dict[str, Any]) -> LLMConfig:
    values = dict(settings)
    model = str(values.pop("model", "smollm2"))
    # A bundled model is looked up only when no file is named: a host that points the
    # stage at its own GGUF need not have fetched SmolLM2.
    if "model_path" not in values:
        values["model_path"] = asset_path(model) / "model.gguf"
    values["model_path"] = Path(values["model_path"])
    # Backend settings arrive as JSON objects: {"backend": "openai", "openai": {...}}.
    if isinstance(values.get("openai"), dict):
        values["openai"] = OpenAIBackendConfig(**values["openai"])
    if isinstance(values.get("vllm"), dict):
        values["vllm"] = VLLMBackendConfig(**values["vllm"])
    return LLMConfig(**values)


# A history that outgrows the context is cut to this share of the prompt budget.
HISTORY_LOW_WATER = 0.6


class Dialogue:
    """One session's conversation memory with a clear truncation rule."""

    def __init__(self, system_prompt: str | None = None) -> None:
        # None: the stage's configured prompt; a client may set its own (SYSTEM_PROMPT).
        self.system_prompt = system_prompt
        self.exchanges: list[tuple[str, str]] = []  # (user, assistant)
        # Turn id -> its exchange (that very tuple): a cut reply is replaced by what the
        # user heard of it. Only recent turns can be cut, so only those are kept.
        self._by_turn: dict[int, tuple[str, str]] = {}
        # The words of a turn the user went on with after its reply was cut (`heard`,
        # continued): the next user turn starts with them.
        self.carried = ""

    def user_text(self, text: str) -> str:
        """The user's turn as the prompt and the history hold it: `text` after the words
        carried from a turn the user went on with (without Whisper's closing period,
        which was the pause, not the sentence's end)."""
        if not self.carried:
            return text
        carried = self.carried.strip()
        if carried.endswith("."):
            carried = carried.rstrip(". ")
        return f"{carried} {text}" if text else carried

    def add(self, turn_id: int, user: str, assistant: str) -> None:
        user, self.carried = self.user_text(user), ""
        exchange = (user, assistant)
        self.exchanges.append(exchange)
        self._by_turn[turn_id] = exchange
        for old in sorted(self._by_turn)[:-4]:
            del self._by_turn[old]

    def forget(self, turn_id: int) -> bool:
        """Turn `turn_id`'s exchange leaves the history (its words were a backchannel);
        False where the history holds none for it."""
        old = self._by_turn.pop(turn_id, None)
        index = next((i for i, e in enumerate(self.exchanges) if e is old), None)
        if index is None:
            return False
        del self.exchanges[index]
        return True

    def heard(self, turn_id: int, heard: str, user: str | None, continued: bool = False) -> None:
        """Turn `turn_id`'s reply was cut: the history keeps what the user heard of it.
        `user`: the turn's transcript when its reply was aborted before it finished.
        `continued`: the user went on with that turn, so its words open the next user
        turn and the cut reply leaves the history."""
        old = self._by_turn.get(turn_id)
        index = next((i for i, e in enumerate(self.exchanges) if e is old), None)
        if continued:
            if index is not None and old is not None:
                del self.exchanges[index]
                del self._by_turn[turn_id]
                self.carried = old[0]  # it already holds what was carried into it
            elif user is not None:
                self.carried = self.user_text(user)
            return
        if index is not None and old is not None:
            self.exchanges[index] = self._by_turn[turn_id] = (old[0], heard)
        elif user is not None:
            self.add(turn_id, user, heard)

    def messages(self) -> list[dict[str, str]]:
        out: list[dict[str, str]] = []
        for user, assistant in self.exchanges:
            if user:  # empty: the agent's opening, spoken before the user said a word
                out.append({"role": "user", "content": user})
            out.append({"role": "assistant", "content": assistant})
        return out

    def opening_prompt(self, backend: LLMBackend, config: LLMConfig, instructions: str = "") -> str:
        """The ChatML prompt for a reply of the agent's own (the opening, or the agent
        speaking up later): the system prompt, or this reply's `instructions` in its
        place, and the history so far (none at a session's start, fitted as
        `prompt_text` fits it), then the assistant's header."""
        return self._fitted(backend, config, None, instructions)

    def prompt_text(self, backend: LLMBackend, config: LLMConfig, user_text: str) -> str:
        """The ChatML prompt for a new user turn, fitted to leave room for a full reply:
        the oldest exchanges go first, then the oldest words of an overlong turn.

        A full history is cut down to HISTORY_LOW_WATER of the budget, not just under
        it: the prompt's head then stays the same for the next several turns, so the
        prefix cache keeps serving it. Dropping one exchange per turn would move the
        head every turn and re-prefill the whole ~2k-token history each time.
        """
        return self._fitted(backend, config, user_text)

    def _fitted(
        self,
        backend: LLMBackend,
        config: LLMConfig,
        user_text: str | None,
        instructions: str = "",
    ) -> str:
        """The prompt (a user turn, or None: the agent's own), fitted to the budget."""
        budget = config.max_context_tokens - config.max_new_tokens
        text = self._render(backend, config, user_text, instructions)
        tokens = backend.count_tokens(text)
        if tokens > budget:
            over = tokens - int(budget * HISTORY_LOW_WATER)
            while over > 0 and self.exchanges:
                user, assistant = self.exchanges.pop(0)
                over -= backend.count_tokens(user) + backend.count_tokens(assistant)
            text = self._render(backend, config, user_text, instructions)
            tokens = backend.count_tokens(text)
        while tokens > budget:
            if self.exchanges:
                self.exchanges.pop(0)
            else:
                words = (user_text or "").split()
                if len(words) < 2:
                    return text  # the backend rejects it with a ValueError the stage reports
                user_text = " ".join(words[max(1, len(words) // 4) :])
            text = self._render(backend, config, user_text, instructions)
            tokens = backend.count_tokens(text)
        return text

    def _render(
        self, backend: LLMBackend, config: LLMConfig, user_text: str | None, instructions: str
    ) -> str:
        messages = [self._system(config, instructions), *self.messages()]
        if user_text is not None:
            messages.append({"role": "user", "content": self.user_text(user_text)})
        return backend.render(messages)

    def _system(self, config: LLMConfig, instructions: str = "") -> dict[str, str]:
        content = instructions or self.system_prompt or config.system_prompt
        return {"role": "system", "content": content}
