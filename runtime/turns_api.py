"""The turn part of the Runtime facade: sending, answering, the queue, Stop, subscriptions (runtime/api.py).

`send()` does only what must happen before the work could disappear (runtime/ARCHITECTURE.md, "A turn"); the
turn itself runs in `turn.run_turn` on the ports of `TurnServices`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from .abort import AbortRegistry, TurnSlot
from .attachments import excerpt
from .config import split_model_ref
from .errors import ConfigError, RequestNotFound, TaskBusy
from .events import EndReason, Event, TurnStarted
from .infos import MessageInfo, TurnHandle
from .kit import DEFAULT_CONTEXT_TOKENS
from .parts import text_of
from .store.repo import DuplicateMessage
from .stream_buffer import BufferState
from .turn import run_turn
from .workspace import copy_attachments

if TYPE_CHECKING:
    from .kit import AgentKit
    from .ports import TurnServices
    from .providers.base import Provider
    from .store.repo import Store
    from .stream_buffer import BufferRegistry

TITLE_CHARS = 60


class TurnsMixin:
    store: Store
    aborts: AbortRegistry
    buffers: BufferRegistry
    kit: AgentKit
    _services: TurnServices
    _runs: set[asyncio.Task]
    _has_queue: set[str]
    _sending: dict[tuple[str, str], asyncio.Future]
    _closed: bool

    async def send(self, task_id: str, text: str, attachments: Iterable[str | Path] = (),
                   client_msg_id: str | None = None, queue: bool = False) -> TurnHandle:
        parts: list[dict] = [{"type": "text", "text": text}] if text else []
        return await self._send(task_id, parts, attachments, client_msg_id, queue)

    async def continue_task(self, task_id: str, client_msg_id: str | None = None) -> TurnHandle:
        """Carry on the last answer where it stopped (after an interruption, a Stop, an error or the length
        limit): no new text from the person; the model sees its partial answer and is asked to go on."""
        return await self._send(task_id, [{"type": "continue"}], (), client_msg_id, False)

    async def retry(self, task_id: str, client_msg_id: str | None = None) -> TurnHandle:
        """A new answer to the last input: the model sees the conversation as it was when that input came."""
        last = await self._last_input(task_id)
        return await self._send(task_id, [{"type": "retry", "message_id": last}], (), client_msg_id, False)

    async def edit_last(self, task_id: str, text: str, client_msg_id: str | None = None) -> TurnHandle:
        """Replace the last input with `text` and answer that instead (the earlier attempt stays visible)."""
        if not text.strip():
            raise ConfigError("An edited message needs some text.")
        last = await self._last_input(task_id)
        parts = [{"type": "text", "text": text}, {"type": "edit", "message_id": last}]
        return await self._send(task_id, parts, (), client_msg_id, False)

    async def _last_input(self, task_id: str) -> int:
        """The newest input the person typed (not a Continue, a retry or an answer)."""
        for msg in reversed(await self.store.messages(task_id, limit=200)):
            if msg["role"] == "user" and msg["status"] == "complete" and text_of(msg["parts"]) and not any(
                    p.get("type") in ("retry", "continue") for p in msg["parts"]):
                return msg["id"]
        raise ConfigError("There is no message of yours to answer again yet.")

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
                return _duplicate(existing)
            raise RequestNotFound(task_id, request_id)
        if req["kind"] == "approval":
            answers = ("approve", "deny", "approve_network") if req.get("network_offer") else ("approve", "deny")
            if answer not in answers:
                raise ConfigError(f"An approval is answered with {' or '.join(repr(a) for a in answers)}, "
                                  f"not {answer!r}.")
            if remember:
                await self.add_permission_rule(req["tool_name"], "deny" if answer == "deny" else "allow",
                                               command=rule_command, task_id=task_id)
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
        self._writable()
        if client_msg_id is None:
            return await self._send_once(task_id, parts, attachments, None, queue)
        # The same input retried while its first send is still being written waits for that one: a storm of
        # 1,000 retries costs one write, not 1,000 reads.
        key = (task_id, client_msg_id)
        first = self._sending.get(key)
        if first is not None:
            handle = await asyncio.shield(first)
            return dataclasses.replace(handle, duplicate=True)
        first = self._sending[key] = asyncio.get_running_loop().create_future()
        try:
            handle = await self._send_once(task_id, parts, attachments, client_msg_id, queue)
        except asyncio.CancelledError:
            first.cancel()
            raise
        except BaseException as exc:
            first.set_exception(exc)
            first.exception()  # retrieved here; waiters re-raise it
            raise
        finally:
            del self._sending[key]
        first.set_result(handle)
        return handle

    async def _send_once(self, task_id: str, parts: list[dict], attachments: Iterable[str | Path],
                         client_msg_id: str | None, queue: bool) -> TurnHandle:
        slot = self.aborts.get(task_id)
        if slot is not None:
            if client_msg_id is not None and slot.client_msg_id == client_msg_id:
                return TurnHandle(task_id, slot.turn_id, slot.input_message_id, duplicate=True)
            if not queue:
                raise TaskBusy(task_id)
            return await self._enqueue(task_id, parts, attachments, client_msg_id)
        # Registered before the first await: a concurrent send sees it and gets TaskBusy (or queues).
        slot = TurnSlot(task_id, uuid.uuid4().hex, client_msg_id)
        self.aborts.register(slot)
        try:
            task = await self._task_row(task_id)
            if client_msg_id is not None and (seen := await self.store.find_client_message(task_id, client_msg_id)):
                self.aborts.release(slot)
                return _duplicate(seen)
            parts = parts + await self._attach(task, attachments)
            try:
                msg_id, started = await self.store.add_input(
                    task_id, parts, client_msg_id=client_msg_id, turn_id=slot.turn_id, title=_title(task, parts)
                )
            except DuplicateMessage as dup:
                self.aborts.release(slot)
                return _duplicate(dup.row)
        except BaseException:
            self.aborts.release(slot)
            raise
        input_id, input_parts, slot.output_message_id = started
        slot.input_message_id = input_id
        self._launch(slot, task, input_parts)
        if input_id != msg_id:  # older queued inputs go first; this one waits behind them
            self._has_queue.add(task_id)
            return TurnHandle(task_id, None, msg_id, queued=True)
        return TurnHandle(task_id, slot.turn_id, msg_id)

    async def _attach(self, task: dict, attachments: Iterable[str | Path]) -> list[dict]:
        """Copy attachments into the workspace; their text (up to a quarter of the model's context window,
        shared) travels in the message for the model to read."""
        files = list(attachments)
        if not files:
            return []
        provider = self.kit.provider(split_model_ref(task["model"])[0])
        return await asyncio.to_thread(_attachment_parts, Path(task["workspace"]), files, provider)

    async def _enqueue(self, task_id: str, parts: list[dict], attachments: Iterable[str | Path],
                       client_msg_id: str | None) -> TurnHandle:
        task = await self._task_row(task_id)
        if client_msg_id is not None and (seen := await self.store.find_client_message(task_id, client_msg_id)):
            return _duplicate(seen)
        parts = parts + await self._attach(task, attachments)
        try:
            msg_id, _ = await self.store.add_input(task_id, parts, client_msg_id=client_msg_id, turn_id=None)
        except DuplicateMessage as dup:
            return _duplicate(dup.row)
        self._has_queue.add(task_id)
        if task_id not in self.aborts:  # the running turn ended while we were writing
            self._after_turn(task_id)
        return TurnHandle(task_id, None, msg_id, queued=True)

    async def run_queued(self, task_id: str) -> TurnHandle | None:
        """"Send now" for inputs left queued (e.g. by a quit or a crash): runs them in order. None when
        nothing is queued; a no-op while a turn runs (they follow it)."""
        self._writable()
        await self._task_row(task_id)
        self._has_queue.add(task_id)
        if task_id in self.aborts:
            return None
        slot, starting = self._start_next(task_id)
        await asyncio.shield(starting)
        if not slot.input_message_id:
            return None
        return TurnHandle(task_id, slot.turn_id, slot.input_message_id)

    async def queued(self, task_id: str) -> list[MessageInfo]:
        """The task's inputs waiting for their turn, oldest first."""
        return [m for m in await self.messages(task_id) if m.status == "queued"]

    async def discard_queued(self, task_id: str, message_id: int) -> bool:
        """Delete a queued input before it runs; False when it is not queued (any more)."""
        self._writable()
        await self._task_row(task_id)
        return await self.store.discard_queued(task_id, message_id)

    def _launch(self, slot: TurnSlot, task: dict, parts: list[dict]) -> None:
        buffer = self.buffers.reset(slot.task_id, slot.turn_id)
        buffer.publish(TurnStarted(task_id=slot.task_id, turn_id=slot.turn_id,
                                   input_message_id=slot.input_message_id))
        slot.attach(buffer.publish)
        self._spawn(run_turn(self._services, slot, task, parts))

    def _spawn(self, coro) -> asyncio.Task:
        run = asyncio.ensure_future(coro)
        self._runs.add(run)
        run.add_done_callback(self._runs.discard)
        return run

    def _after_turn(self, task_id: str) -> None:
        """A turn is over: start the task's next queued input, if this process has any waiting."""
        if task_id in self._has_queue and task_id not in self.aborts and not self._closed:
            self._start_next(task_id)

    def _start_next(self, task_id: str) -> tuple[TurnSlot, asyncio.Task]:
        # Registered now, so wait_idle keeps waiting and a concurrent send queues behind it.
        slot = TurnSlot(task_id, uuid.uuid4().hex, None)
        self.aborts.register(slot)
        return slot, self._spawn(self._start_queued(slot))

    async def _start_queued(self, slot: TurnSlot) -> None:
        try:
            task = await self._task_row(slot.task_id)
            started = await self.store.start_queued_turn(slot.task_id, slot.turn_id)
        except BaseException:
            self.aborts.release(slot)
            raise
        if started is None:
            self._has_queue.discard(slot.task_id)
            self.aborts.release(slot)
            return
        slot.input_message_id, parts, slot.output_message_id = started
        self._launch(slot, task, parts)

    async def stop(self, task_id: str) -> None:
        """Stop the running turn: idempotent, a no-op when nothing runs."""
        slot = self.aborts.get(task_id)
        if slot is not None:
            slot.abort(EndReason.aborted)

    async def wait_idle(self, task_id: str) -> None:
        """Wait until the task's current (and queued) turns are finalized and cleaned up."""
        while (slot := self.aborts.get(task_id)) is not None:
            await asyncio.shield(slot.done)

    async def subscribe(self, task_id: str, after_seq: int = 0, turn_id: str | None = None,
                        follow: bool = False, deltas: bool = True) -> AsyncIterator[Event]:
        """Replay the current/last turn's events after `after_seq`, then live ones, and end after its terminal
        event; ends at once when nothing is in memory (read `messages()` then). With `follow=True` it goes on
        with every later turn of the task (each from seq 1) until the runtime closes. `deltas=False` leaves
        text and reasoning deltas out (cheap for a status view)."""
        buffer = self.buffers.get(task_id)
        if buffer is None:
            await self._task_row(task_id)
        while True:
            if buffer is not None:
                if turn_id is not None and turn_id != buffer.turn_id:
                    after_seq = 0
                async for event in buffer.subscribe(after_seq, deltas):
                    yield event
            if not follow:
                return
            after_seq, turn_id = 0, None
            buffer = await self.buffers.next_buffer(task_id, buffer)
            if buffer is None:
                return

    async def events(self) -> AsyncIterator[Event]:
        """Every task's events except text deltas, from now on, until the runtime closes: what a task list,
        a tray or notifications follow (one subscription for all tasks, nothing polled)."""
        async for event in self.buffers.feed():
            yield event

    def stream_state(self, task_id: str) -> BufferState:
        return self.buffers.state(task_id)


def _attachment_parts(workspace: Path, files: list, provider: Provider) -> list[dict]:
    budget = int(getattr(provider, "context_tokens", DEFAULT_CONTEXT_TOKENS))  # a quarter, ~4 chars a token
    parts = []
    for name in copy_attachments(workspace, files):
        part: dict = {"type": "attachment", "name": name}
        found = excerpt(workspace / name, budget) if budget > 0 else None
        if found is not None:
            part.update(text=found.text, chars=found.total_chars, kind=found.kind)
            budget -= len(found.text)
        parts.append(part)
    return parts


def _title(task: dict, parts: list[dict]) -> str | None:
    """A provisional title from the first input, given at once when the person gave none."""
    if task["title"]:
        return None
    line = " ".join(text_of(parts).split())
    return (line[:TITLE_CHARS] + ("…" if len(line) > TITLE_CHARS else "")) or None


def _duplicate(row: dict) -> TurnHandle:
    return TurnHandle(row["task_id"], row["turn_id"], row["id"], duplicate=True, queued=row["status"] == "queued")
