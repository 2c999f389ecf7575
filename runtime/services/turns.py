"""The turn part of the Runtime facade for tasks: sending (with attachments), answering approvals, questions and
plans, the queue, Stop, subscriptions (runtime/api.py). The owner-generic part is `host.TurnHost`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from ..attachments import excerpt
from ..config import split_model_ref
from ..engine.stream_buffer import BufferState
from ..errors import ConfigError, RequestNotFound
from ..events import Event
from ..infos import MessageInfo, TurnHandle
from ..kits.task import UNKNOWN_CONTEXT_TOKENS
from ..workspace import copy_attachments

if TYPE_CHECKING:
    from ..engine.host import TurnHost
    from ..engine.stream_buffer import BufferRegistry
    from ..kits.task import AgentKit
    from ..store.repo import Store


class TurnsMixin:
    """Tasks' turns: what only tasks have (attachments in the workspace, approvals, plans) around the host."""

    store: Store
    kit: AgentKit
    buffers: BufferRegistry
    task_turns: TurnHost

    async def send(self, task_id: str, text: str, attachments: Iterable[str | Path] = (),
                   client_msg_id: str | None = None, queue: bool = False) -> TurnHandle:
        attachments = list(attachments)
        if not text.strip() and not attachments:
            raise ConfigError("A message needs some text or an attachment.")
        parts: list[dict] = [{"type": "text", "text": text}] if text.strip() else []
        return await self._send(task_id, parts, attachments, client_msg_id, queue)

    async def continue_task(self, task_id: str, client_msg_id: str | None = None) -> TurnHandle:
        """Carry on the last answer where it stopped (after an interruption, a Stop, an error or the length
        limit): no new text from the person; the model sees its partial answer and is asked to go on."""
        return await self._send(task_id, [{"type": "continue"}], (), client_msg_id, False)

    async def retry(self, task_id: str, client_msg_id: str | None = None) -> TurnHandle:
        """A new answer to the last input: the model sees the conversation as it was when that input came."""
        last = await self.task_turns.last_input(task_id)
        return await self._send(task_id, [{"type": "retry", "message_id": last}], (), client_msg_id, False)

    async def edit_last(self, task_id: str, text: str, client_msg_id: str | None = None) -> TurnHandle:
        """Replace the last input with `text` and answer that instead (the earlier attempt stays visible)."""
        if not text.strip():
            raise ConfigError("An edited message needs some text.")
        last = await self.task_turns.last_input(task_id)
        parts = [{"type": "text", "text": text}, {"type": "edit", "message_id": last}]
        return await self._send(task_id, parts, (), client_msg_id, False)

    async def answer(self, task_id: str, request_id: str, answer: str, remember: bool = False,
                     plan: list[str] | None = None, rule_command: str | None = None) -> TurnHandle:
        """Reply to a question (any text), an approval ("approve" / "deny", or "approve_network" when the request
        offers it) or a plan ("approve", with the edited steps in `plan` if the person changed them, or any other
        text to reject it with that reason); starts the next turn. `remember` keeps an approval's decision as a
        rule of the task, for the whole tool or, with `rule_command` (a run_shell approval's `suggested_rule`),
        for commands starting with it."""
        self._writable()
        row = await self._task_row(task_id)
        req = row["pending_request"]
        if not req or req["request_id"] != request_id:
            existing = await self.store.find_client_message(task_id, f"answer:{request_id}")
            if existing is not None:
                return self.task_turns.duplicate(existing)
            raise RequestNotFound(task_id, request_id)
        if req["kind"] == "approval":
            answers = ("approve", "deny", "approve_network") if req.get("network_offer") else ("approve", "deny")
            if answer not in answers:
                raise ConfigError(f"An approval is answered with {' or '.join(repr(a) for a in answers)}, "
                                  f"not {answer!r}.")
            if remember:
                await self._add_rule(req["tool_name"], "deny" if answer == "deny" else "allow", rule_command, task_id)
        if req["kind"] == "plan":
            await self._decide_plan(task_id, req, answer, plan)
        parts = [{"type": "answer", "request": req, "answer": answer}]
        return await self._send(task_id, parts, (), f"answer:{request_id}", False)

    async def _decide_plan(self, task_id: str, req: dict, answer: str, steps: list[str] | None) -> None:
        """An approved plan becomes the task's todo list before the next turn starts (which then has every
        tool); a rejected one leaves the task planning."""
        if answer.strip().lower() != "approve":
            await self.store.update_task(task_id, plan_status="rejected")
            return
        steps = [s.strip() for s in (steps if steps is not None else req.get("plan") or []) if s.strip()]
        if not steps:
            raise ConfigError("An approved plan needs at least one step.")
        await self.store.update_task(task_id, plan_status="approved",
                                     todos=[{"content": s, "status": "pending"} for s in steps])

    async def _send(self, task_id: str, parts: list[dict], attachments: Iterable[str | Path],
                    client_msg_id: str | None, queue: bool) -> TurnHandle:
        files = list(attachments)

        async def with_attachments(task: dict, parts: list[dict]) -> list[dict]:
            """Copy attachments into the workspace; their text (up to a quarter of the task model's context
            window, shared: ~4 characters a token) travels in the message for the model to read."""
            provider_id, model = split_model_ref(task["model"])
            budget = await self.kit.window_tokens(self.kit.provider(provider_id), model) or UNKNOWN_CONTEXT_TOKENS
            return parts + await asyncio.to_thread(_attachment_parts, Path(task["workspace"]), files, budget)

        return await self.task_turns.send(task_id, parts, client_msg_id, queue, with_attachments if files else None)

    async def run_queued(self, task_id: str) -> TurnHandle | None:
        """"Send now" for inputs left queued (e.g. by a quit or a crash): runs them in order. None when
        nothing is queued; a no-op while a turn runs (they follow it)."""
        return await self.task_turns.run_queued(task_id)

    async def queued(self, task_id: str) -> list[MessageInfo]:
        """The task's inputs waiting for their turn, oldest first."""
        return [m for m in await self.messages(task_id) if m.status == "queued"]

    async def discard_queued(self, task_id: str, message_id: int) -> bool:
        """Delete a queued input before it runs; False when it is not queued (any more)."""
        return await self.task_turns.discard_queued(task_id, message_id)

    async def stop(self, task_id: str) -> None:
        """Stop the running turn, or end the task's wait for an approval or an answer (it ends `aborted`, the call
        that asked is `stopped`): idempotent, a no-op when nothing runs or waits."""
        await self.task_turns.stop(task_id)

    async def wait_idle(self, task_id: str) -> None:
        """Wait until the task's current (and queued) turns are finalized and cleaned up."""
        await self.task_turns.wait_idle(task_id)

    def subscribe(self, task_id: str, after_seq: int = 0, turn_id: str | None = None,
                  follow: bool = False, deltas: bool = True) -> AsyncGenerator[Event, None]:
        """Replay the current/last turn's events after `after_seq`, then live ones, and end after its terminal
        event; ends at once when nothing is in memory (read `messages()` then). With `follow=True` it goes on
        with every later turn of the task (each from seq 1) until the runtime closes. `deltas=False` leaves
        text and reasoning deltas out (cheap for a status view)."""
        return self.task_turns.subscribe(task_id, after_seq, turn_id, follow, deltas)

    async def events(self) -> AsyncGenerator[Event, None]:
        """Every task's and chat's events except text deltas, from now on, until the runtime closes: what a task
        list, a tray or notifications follow (one subscription for all, nothing polled). An event's `task_id`
        is its owner's id: a task's, or a chat's."""
        async for event in self.buffers.feed():
            yield event

    def stream_state(self, task_id: str) -> BufferState:
        return self.buffers.state(task_id)


def _attachment_parts(workspace: Path, files: list, budget: int) -> list[dict]:
    parts = []
    for name in copy_attachments(workspace, files):
        part: dict = {"type": "attachment", "name": name}
        found = excerpt(workspace / name, budget) if budget > 0 else None
        if found is not None:
            part.update(text=found.text, chars=found.total_chars, kind=found.kind)
            budget -= len(found.text)
        parts.append(part)
    return parts
