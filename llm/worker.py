"""The LLM stage process: transcript records in, one TOKEN record per sampled token out.

Each session keeps its dialogue (bounded: the oldest exchanges are dropped first when
the prompt would not leave room for a full reply). A committed transcript (FINAL)
becomes a request; every engine step's tokens go to TTS at once. A reply cut by
barge-in stays in the dialogue as what the user heard of it: the supervisor sends that
text (HEARD) right behind the NEW_TURN that aborted it.

Incremental prefill (llm/open_prompts.py): each session's open request holds system
prompt + dialogue + the user's header from before the turn begins, and every PARTIAL
with a longer stable prefix extends it with the stable words, so their KV is computed
before the user stops. At FINAL the open request is completed with whatever the final
transcript adds, or, if the transcript revised a stable word, replaced in place: the
request keeps the K/V of what the two prompts share, so a rollback costs only the
tokens after the divergence.

Speculative start: at SPECULATIVE_END (a short silence) the reply starts decoding from
the ASR's best transcript, uncommitted. RESUME (the user spoke on) aborts it and sends
RESUME on, so TTS and the sink drop what it made; the prefilled KV stays cached. At
FINAL a reply started from the same text is committed (COMMIT goes on and the sink
plays what it held); a different text retracts it and starts over. Only a committed
reply enters the dialogue history.

COMMIT takes the events ring straight to the supervisor when the turn never had a reply
retracted: every audio record of the turn is then the committed reply's, so the commit
may overtake them, and it does not wait behind the fragment TTS is synthesizing (~40 ms
of TTFA when the reply was ready before the end of the turn, docs/pipeline.md). After a
retraction it travels behind the data it must not overtake: the retracted reply's audio
and its RESUME.
"""

from __future__ import annotations

import itertools
import json
import logging
import time
from collections.abc import Callable
from typing import Any

from voxrelay.ipc.channel import Sender
from voxrelay.ipc.records import (
    CONTROL_BODY,
    FINAL_INFO,
    PROB_SCALE,
    ControlOp,
    Record,
    RecordKind,
    Stamp,
    split_text_pair,
)
from voxrelay.llm.backend import NO_TOKEN_ID, create_backend
from voxrelay.llm.core_yield import CoreYield
from voxrelay.llm.dialogue import Dialogue, llm_config
from voxrelay.llm.open_prompts import OpenPrompts
from voxrelay.llm.reply import Reply, ReplyOut
from voxrelay.llm.sentences import SentenceLimit
from voxrelay.pipeline.worker import Events, TableHandler

log = logging.getLogger("voxrelay.llm")


class LLMHandler(TableHandler):
    def __init__(self, config: dict[str, Any], out: Sender, events: Events) -> None:
        self.config = llm_config(config)
        self.backend = create_backend(self.config)
        self.core_yield = CoreYield(self.config.yield_core_after_tokens, _cpu_threads(self.backend))
        self.events = events
        self.reply_out = ReplyOut(out, events)  # the replies' records; `out` is its data path
        self.dialogues: dict[int, Dialogue] = {}
        self.replies: dict[int, Reply] = {}
        self.pending_end: set[int] = set()  # sessions whose END_OF_INPUT waits for replies
        self.retracted_turn: dict[int, int] = {}  # by session: its latest turn with a RESUME
        self.cut: dict[tuple[int, int], str] = {}  # (session, turn) aborted -> transcript
        # By session: turns dismissed as backchannels before their FINAL came (DISMISS
        # rides the control ring, which is read first)
        self.dismissed: dict[int, set[int]] = {}
        self._request_ids = itertools.count(1)
        self.prompts = OpenPrompts(
            self.backend, self.config, lambda: next(self._request_ids), lambda: len(self.replies)
        )
        self._dispatch: dict[RecordKind, Callable[[Record], None]] = {
            RecordKind.PARTIAL: self._on_partial,
            RecordKind.ROLLBACK: self._on_rollback,
            RecordKind.SPECULATIVE_END: self._on_speculative_end,
            RecordKind.RESUME: self._on_resume,
            RecordKind.FINAL: self._on_final,
            RecordKind.END_OF_INPUT: self._on_end_of_input,
            RecordKind.CONTROL: self._on_control,
        }
        self._controls: dict[ControlOp, Callable[[Record, int], None]] = {
            ControlOp.SYSTEM_PROMPT: self._on_system_prompt,
            ControlOp.SESSION_OPEN: self._on_session_open,
            ControlOp.HEARD: self._on_heard,
            ControlOp.GREET: self._on_greet,
            ControlOp.NEW_TURN: self._on_new_turn,
            ControlOp.DISMISS: self._on_dismiss,
            ControlOp.SESSION_CLOSE: self._on_session_close,
        }

    @property
    def out(self) -> Sender:
        """The data path to the TTS: the replies' records and END_OF_INPUT."""
        return self.reply_out.out

    @out.setter
    def out(self, sender: Sender) -> None:
        self.reply_out.out = sender

    def _on_partial(self, record: Record) -> None:
        stable, _unstable = split_text_pair(record.payload)
        dialogue = self._dialogue(record.session_id)
        self.prompts.warm(record.session_id, record.turn_id, dialogue, stable)

    def _on_rollback(self, record: Record) -> None:
        # Stable words were revised: the open prompt goes back to the words that hold
        # (the request keeps the K/V of what the two prompts share).
        session_id = record.session_id
        if self.prompts.turn_of(session_id) != record.turn_id:
            return
        dialogue = self._dialogue(session_id)
        if not self.prompts.warm(session_id, record.turn_id, dialogue, record.text()):
            self.prompts.drop(session_id)

    def _ahead(self, session_id: int) -> None:
        """Open the session's next prompt through the user's header, once no reply of the
        session can still change the history it holds."""
        if not any(r.session_id == session_id for r in self.replies.values()):
            self.prompts.ahead(session_id, self._dialogue(session_id))

    def _turn_reply(self, session_id: int, turn_id: int) -> tuple[int, Reply] | None:
        for request_id, reply in self.replies.items():
            if reply.session_id == session_id and reply.turn_id == turn_id:
                return request_id, reply
        return None

    def _on_speculative_end(self, record: Record) -> None:
        text = record.text().strip()
        if record.turn_id in self.dismissed.get(record.session_id, ()):
            return
        if text and self._turn_reply(record.session_id, record.turn_id) is None:
            self._start_reply(record, text, committed=False)

    def _on_resume(self, record: Record) -> None:
        found = self._turn_reply(record.session_id, record.turn_id)
        if found is not None and not found[1].committed:
            self._retract(*found)

    def _retract(self, request_id: int, reply: Reply) -> None:
        """Drop an uncommitted reply here and, through TTS, at the sink."""
        if not reply.finish_reason:
            self.backend.abort(request_id)
        del self.replies[request_id]
        self.retracted_turn[reply.session_id] = reply.turn_id
        self.reply_out.retract(reply.session_id, reply.turn_id)

    def _commit(self, request_id: int, reply: Reply) -> None:
        reply.committed = True
        if reply.finish_reason:  # generation ended while speculative: it counts only now
            self.reply_out.done(reply)
        retracted = self.retracted_turn.get(reply.session_id) == reply.turn_id
        self.reply_out.commit(reply, behind_data=retracted)
        if reply.finish_reason:
            self._settle(request_id, reply)

    def _on_final(self, record: Record) -> None:
        text = record.payload[FINAL_INFO.size :].decode("utf-8", errors="replace").strip()
        dismissed = self.dismissed.get(record.session_id, set())
        if record.turn_id in dismissed:
            dismissed.discard(record.turn_id)
            text = ""  # a backchannel: answered by nothing, as a turn without words
        found = self._turn_reply(record.session_id, record.turn_id)
        if found is not None:
            if found[1].user_text == text:
                self._commit(*found)
                return
            self._retract(*found)  # the final transcript differs from the speculative one
        if not text:  # no words after all: the prompt goes back for the next turn
            self.prompts.rewind(record.session_id, self._dialogue(record.session_id))
            self._ahead(record.session_id)
            return
        self._commit(*self._start_reply(record, text, committed=True))

    def _start_reply(self, record: Record, text: str, committed: bool) -> tuple[int, Reply]:
        dialogue = self._dialogue(record.session_id)
        # With Whisper's closing mark: the probe of P(end of turn) is read before it
        # (asr/turn_end.py `probe_text`), and without it SmolLM2 answers a statement by
        # repeating it ("He was not an ill-disposed young man" -> the same words).
        prompt = dialogue.prompt_text(self.backend, self.config, text)
        reply = Reply(record.session_id, record.turn_id, record.origin_ns, text)
        reply.committed = committed
        reply.limit = SentenceLimit(self.config.max_sentences)
        self.events.stamp(record.session_id, record.turn_id, Stamp.LLM_START)
        if log.isEnabledFor(logging.DEBUG):
            history = json.dumps(dialogue.messages())
            log.debug("session %d turn %d history %s", record.session_id, record.turn_id, history)
            user = json.dumps(dialogue.user_text(text))
            log.debug("session %d turn %d user %s", record.session_id, record.turn_id, user)
        open_request = self.prompts.take(record.session_id, record.turn_id)
        if open_request is not None:
            # Completed with what the final transcript adds, or replaced where it revised
            # a stable word (the backend decides; the shared part's K/V stays).
            request_id = open_request
            reply.early_tokens = self.backend.prefilled_tokens(request_id)
        else:
            self.prompts.make_room()
            request_id = next(self._request_ids)
        reply.probed = self.backend.probes_end_of_turn
        self.backend.submit(request_id, prompt)
        if not committed and not reply.probed:
            # No probability will come: the ASR need not wait for one (asr/turn_end.py).
            self.events.stamp(record.session_id, record.turn_id, Stamp.TURN_END_PROB, -1)
        self.replies[request_id] = reply
        reply.prompt_tokens = self.backend.count_tokens(prompt)
        return request_id, reply

    def _on_end_of_input(self, record: Record) -> None:
        if any(r.session_id == record.session_id for r in self.replies.values()):
            self.pending_end.add(record.session_id)
        else:
            self.out.send(RecordKind.END_OF_INPUT, session_id=record.session_id)

    def _dialogue(self, session_id: int) -> Dialogue:
        if session_id not in self.dialogues:
            self.dialogues[session_id] = Dialogue()
        return self.dialogues[session_id]

    def _on_control(self, record: Record) -> None:
        op, argument = CONTROL_BODY.unpack_from(record.payload)
        handler = self._controls.get(op)
        if handler is not None:
            handler(record, int(argument))

    def _on_system_prompt(self, record: Record, _argument: int) -> None:
        self._dialogue(record.session_id).system_prompt = record.text(CONTROL_BODY.size)
        self.prompts.drop(record.session_id)  # prefilled under the old prompt
        self._ahead(record.session_id)

    def _on_session_open(self, record: Record, _argument: int) -> None:
        self._ahead(record.session_id)

    def _on_heard(self, record: Record, continued: int) -> None:
        # continued 1: the user went on with that turn
        heard = record.text(CONTROL_BODY.size)
        user = self.cut.pop((record.session_id, record.turn_id), None)
        self._dialogue(record.session_id).heard(record.turn_id, heard, user, bool(continued))
        self.prompts.drop(record.session_id)  # prefilled over the old history
        self._ahead(record.session_id)

    def _on_greet(self, record: Record, verbatim: int) -> None:
        """A reply of the agent's own, with no user words before it (the opening, or the
        agent speaking up later): spoken as written (`verbatim`), or written by the model
        from the history and the system prompt (or this reply's instructions)."""
        session_id, turn_id = record.session_id, record.turn_id
        self.prompts.drop(session_id)  # opened ahead over a history without the opening
        reply = Reply(session_id, turn_id, time.perf_counter_ns(), user_text="")
        reply.limit = SentenceLimit(self.config.max_sentences)
        request_id = next(self._request_ids)
        self.events.stamp(session_id, turn_id, Stamp.LLM_START)
        self.replies[request_id] = reply
        if verbatim:
            self._commit(request_id, reply)
            self.events.stamp(session_id, turn_id, Stamp.LLM_FIRST_TOKEN)
            self.reply_out.text(reply, NO_TOKEN_ID, record.text(CONTROL_BODY.size).strip())
            self._finish(request_id, reply, "greeting")
            return
        instructions = record.text(CONTROL_BODY.size).strip()
        prompt = self._dialogue(session_id).opening_prompt(self.backend, self.config, instructions)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("session %d turn %d agent prompt %s", session_id, turn_id, json.dumps(prompt))
        self.prompts.make_room()
        self.backend.submit(request_id, prompt, probe=False)
        reply.prompt_tokens = self.backend.count_tokens(prompt)
        self._commit(request_id, reply)

    def _on_new_turn(self, record: Record, _argument: int) -> None:
        for request_id, reply in self._session_replies(record.session_id, record.turn_id):
            self.backend.abort(request_id)
            del self.replies[request_id]
            # HEARD follows: what of it the user heard
            self.cut[(reply.session_id, reply.turn_id)] = reply.user_text
        # An interrupt after the end of input: the END_OF_INPUT held for the aborted
        # replies goes on now, or the session waiting for it never hears of it.
        self._release_end(record.session_id)
        self.prompts.drop_before(record.session_id, record.turn_id)

    def _on_dismiss(self, record: Record, _argument: int) -> None:
        """The turn's words were a backchannel said over a reply ("mm-hmm"): the reply to
        it is dropped wherever it has got to, and the exchange leaves the history."""
        session_id, turn_id = record.session_id, record.turn_id
        found = self._turn_reply(session_id, turn_id)
        if found is not None:
            request_id, reply = found
            if not reply.finish_reason:
                self.backend.abort(request_id)
            del self.replies[request_id]
            final_to_come = not reply.committed  # a speculative reply's FINAL
        else:  # in the history already, or its FINAL (and reply) still to come
            final_to_come = not self._dialogue(session_id).forget(turn_id)
        if final_to_come:
            self.dismissed.setdefault(session_id, set()).add(turn_id)
        self.reply_out.retract(session_id, turn_id)  # the TTS drops what it holds of it
        self._release_end(session_id)
        self._ahead(session_id)

    def _on_session_close(self, record: Record, _argument: int) -> None:
        session_id = record.session_id
        for request_id, _reply in self._session_replies(session_id, 1 << 32):
            self.backend.abort(request_id)
            del self.replies[request_id]
        self.prompts.drop(session_id)
        self.dialogues.pop(session_id, None)
        self.retracted_turn.pop(session_id, None)
        self.dismissed.pop(session_id, None)
        self.pending_end.discard(session_id)  # the stages drop its records
        for key in [k for k in self.cut if k[0] == session_id]:
            del self.cut[key]

    def _session_replies(self, session_id: int, before_turn: int) -> list[tuple[int, Reply]]:
        return [
            (request_id, reply)
            for request_id, reply in self.replies.items()
            if reply.session_id == session_id and reply.turn_id < before_turn
        ]

    def step(self) -> bool:
        if not self.backend.has_pending_work():
            return False
        generating = [len(r.parts) for r in self.replies.values() if not r.finish_reason]
        self.core_yield.before_step(generating, prefilling=self.prompts.prefilling())
        for output in self.backend.step():
            reply = self.replies.get(output.request_id)
            if reply is None:
                continue
            if not reply.parts:
                self.events.stamp(reply.session_id, reply.turn_id, Stamp.LLM_FIRST_TOKEN)
                if output.probe_prob is not None:
                    # The ASR ends a learned pause on it (asr/turn_end.py), via the supervisor.
                    value = round(output.probe_prob * PROB_SCALE)
                    self.events.stamp(reply.session_id, reply.turn_id, Stamp.TURN_END_PROB, value)
                elif not reply.committed and reply.probed:
                    # The probe could not be read (a remote one failed, came late, or was
                    # refused, which turns the backend's probing off): the ASR decides the
                    # pause now instead of waiting out text_hint_wait_ms.
                    self.events.stamp(reply.session_id, reply.turn_id, Stamp.TURN_END_PROB, -1)
                # Ready before the end of the turn: prefilled from partials, or served by
                # the prefix cache (system prompt, dialogue, shared partial blocks).
                early = max(reply.early_tokens, output.num_cached_tokens)
                self.events.stamp(reply.session_id, reply.turn_id, Stamp.LLM_PREFILL,
                                  reply.prompt_tokens, text=str(early))  # fmt: skip
            text, enough = reply.limit.admit(output.text)
            if text or not enough:
                self.reply_out.text(reply, output.token_id, text)
            if output.finished:
                self._finish(output.request_id, reply, str(output.finish_reason))
            elif enough:
                self.backend.abort(output.request_id)  # its KV stays in the prefix cache
                self._finish(output.request_id, reply, "sentences")
        return bool(self.backend.has_pending_work())

    def _finish(self, request_id: int, reply: Reply, reason: str) -> None:
        reply.finish_reason = reason
        if reply.committed:
            self.reply_out.done(reply)
        self.reply_out.end(reply)
        if reply.committed:
            self._settle(request_id, reply)

    def _settle(self, request_id: int, reply: Reply) -> None:
        """A committed reply that has ended: into the history; pending END_OF_INPUT out."""
        del self.replies[request_id]
        dialogue = self._dialogue(reply.session_id)
        dialogue.add(reply.turn_id, reply.user_text, reply.text)
        self._release_end(reply.session_id)
        self._ahead(reply.session_id)

    def _release_end(self, session_id: int) -> None:
        """The session's pending END_OF_INPUT out, once it has no reply left."""
        if session_id in self.pending_end and not any(
            r.session_id == session_id for r in self.replies.values()
        ):
            self.pending_end.discard(session_id)
            self.out.send(RecordKind.END_OF_INPUT, session_id=session_id)


def _cpu_threads(backend: object) -> int:
    """Threads of a native engine on the CPU; 1 (nothing to yield) for anything else."""
    engine = getattr(backend, "engine", None)
    if engine is None or engine.state.device.type != "cpu":
        return 1
    return int(engine.state.num_threads)
