"""The agent speaks up when the user goes quiet (`PipelineConfig.idle_prompt_s`).

A caller who stops answering hears "Are you still there?" after `idle_prompt_s` of
quiet, counted from when the agent's last audio finished playing (or the session
opened, or the user last spoke, or the last prompt was asked for). After `idle_prompts`
prompts in a row with no word from the user, the agent says `idle_goodbye` and gives up:
the session's `on_idle_end` (a phone call hangs up once the goodbye has played) is
called, and nothing more is prompted until the user speaks again. Any speech from the
user (a speech start, a partial, a typed turn) starts the count over. The prompts are
turns of the agent's own (`Pipeline.say`), so speech over one cuts it like a reply.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from voxrelay.pipeline.config import PipelineConfig

if TYPE_CHECKING:
    from voxrelay.pipeline.session import Session


@dataclass(slots=True)
class IdleState:
    """One session's run of unanswered prompts."""

    prompts: int = 0  # asked for since the user last spoke
    prompted_ns: int = 0  # when the last one was asked for
    gave_up: bool = False


class IdlePrompter:
    """`say(session, text)`: the agent speaks up (Pipeline.say). Checked by the
    pipeline's periodic task (`check`), a few times a second."""

    def __init__(self, config: PipelineConfig, say: Callable[[Session, str], None]) -> None:
        self._after_ns = int(config.idle_prompt_s * 1e9)
        self._prompt = config.idle_prompt
        self._max_prompts = config.idle_prompts
        self._goodbye = config.idle_goodbye
        self._say = say

    @property
    def enabled(self) -> bool:
        return self._after_ns > 0

    def check(self, session: Session, now_ns: int) -> None:
        state = session.idle
        if session.user_active_ns > state.prompted_ns:  # the user spoke: start over
            state.prompts, state.gave_up = 0, False
        quiet_since = max(
            session.opened_ns, session.playbacks.end_ns, session.user_active_ns, state.prompted_ns
        )
        if state.gave_up or now_ns - quiet_since < self._after_ns or session.replying():
            return
        state.prompted_ns = now_ns
        if state.prompts < self._max_prompts:
            state.prompts += 1
            self._say(session, self._prompt)
            return
        state.gave_up = True
        if self._goodbye:
            self._say(session, self._goodbye)
        if session.on_idle_end is not None:
            session.on_idle_end(session, bool(self._goodbye))
