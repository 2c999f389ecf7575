"""Tasks and their turns (`rt.tasks`): create, read, rename, fork and delete tasks; send (with attachments), carry
on, retry, edit, answer approvals, questions and plans, the queue, Stop and subscriptions. The owner-generic part
of a turn is `engine/host.TurnHost`; what only tasks have (a workspace for attachments, approvals that become
rules, plans) is here. `Runtime` keeps the design's names (`create_task`, `send`, …) as thin delegates.
"""

from __future__ import annotations

import asyncio
import builtins  # `Tasks.list` hides the builtin in the annotations below it
import os
import shutil
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable
from pathlib import Path

from ..attachments import excerpt
from ..config import split_model_ref
from ..engine.stream_buffer import BufferState
from ..errors import ConfigError, RequestNotFound, TaskNotFound
from ..events import Event, TaskActivity
from ..infos import MessageInfo, TaskInfo, TurnHandle
from ..kits.task import UNKNOWN_CONTEXT_TOKENS, AgentKit
from ..knowledge.library import Knowledge
from ..tools.approvals import APPROVAL_MODES
from ..tools.deliver import delivery_folder
from ..tools.shell.background import READ_LIMIT, read_log
from ..workspace import copy_attachments, workspace_for
from .core import Core
from .permissions import Permissions


class Tasks:
    def __init__(self, core: Core, kit: AgentKit, library: Knowledge, permissions: Permissions):
        self._core = core
        self._kit = kit
        self._library = library  # a new task's documents are added to it
        self._permissions = permissions  # an approval answered with "remember" becomes a rule
        self._turns = core.host(core.store, kit, self._row, factory=core.task_hosts)
        # What else goes with a deleted task (rt.changes.sweep: its turns' kept contents), set once built.
        self.after_delete: Callable[[], Awaitable[None]] | None = None

    async def _row(self, task_id: str) -> dict:
        row = await self._core.store.get_task(task_id)
        if row is None:
            raise TaskNotFound(task_id)
        return row

    # -- tasks --

    async def create(self, title: str | None = None, model: str | None = None, approval: str = "ask",
                     planning: bool = False, knowledge: Iterable[str] = (), memory: bool = True,
                     network: bool = False, owner_id: str | None = None) -> TaskInfo:
        """A new task. Its settings are bound for its life: model, approval mode, planning, the documents and
        folders it works from (`knowledge`: added to the library, indexed in the background, the only ones its
        search_knowledge sees), `memory` (False: this task neither uses nor saves the person's memories) and
        `network` (its shell commands may use the network; off by default, see `rt.permissions.set_task_sandbox`).
        `owner_id`: the server host's user it belongs to (the desktop's tasks have none)."""
        self._core.writable()
        model = self._core.check_model(model)
        if approval not in APPROVAL_MODES:
            raise ConfigError(f"Approval mode must be one of {', '.join(APPROVAL_MODES)}, not {approval!r}.")
        bound = real_paths(knowledge)
        if bound:
            await self._library.add(bound)  # ConfigError naming a path that is not there, before the task exists
        task_id = uuid.uuid4().hex
        row = await self._core.store.create_task(
            id=task_id, title=title, model=model, approval=approval, planning=planning, memory=bool(memory),
            knowledge=bound, workspace=str(workspace_for(self._core.home, task_id)), network=bool(network),
            owner_id=owner_id,
        )
        return TaskInfo.model_validate(row)

    async def get(self, task_id: str, owner_id: str | None = None) -> TaskInfo:
        """The task; with `owner_id`, only if it is that user's (TaskNotFound otherwise, as for no such task)."""
        store = self._core.store
        row = await (self._row(task_id) if owner_id is None else store.get_owned_task(task_id, owner_id))
        if row is None:
            raise TaskNotFound(task_id)
        wakes = await store.wakeups(task_id)
        return TaskInfo.model_validate({**row, "wake": wakes[0] if wakes else None})

    async def list(self, owner_id: str | None = None) -> builtins.list[TaskInfo]:
        """The tasks, newest first: the desktop's, or with `owner_id` that user's; each with its wake-up."""
        store = self._core.store
        wakes = {w["task_id"]: w for w in await store.wakeups()}
        return [TaskInfo.model_validate({**r, "wake": wakes.get(r["id"])}) for r in await store.list_tasks(owner_id)]

    async def rename(self, task_id: str, title: str) -> None:
        self._core.writable()
        await self._row(task_id)
        await self._core.store.update_task(task_id, title=title.strip() or None, title_provisional=False)

    async def delete(self, task_id: str) -> None:
        """Delete the task, its conversation and its deliverables (stopping its turn first); its workspace stays."""
        self._core.writable()
        if task_id in self._core.aborts:
            await self.stop(task_id)
        await self.wait_idle(task_id)  # also a turn whose end is announced and whose cleanup goes on
        await self._core.background.forget(task_id)  # its commands stopped, their logs removed
        await self._core.store.delete_task(task_id)
        # Its deliverables go with it (the window's and the CLI's confirmation say how many); its workspace stays.
        await asyncio.to_thread(shutil.rmtree, delivery_folder(self._core.home, task_id), ignore_errors=True)
        if self.after_delete is not None:
            await self.after_delete()

    async def fork(self, task_id: str, model: str, title: str | None = None) -> TaskInfo:
        """A new task bound to `model` that starts with a copy of this task's conversation (its workspace files
        stay where they are). What "Continue in a new task with another model" does."""
        source = await self.get(task_id)
        task = await self.create(title=title or source.title, model=model, approval=source.approval,
                                 planning=source.planning, knowledge=source.knowledge, memory=source.memory,
                                 network=source.network)
        await self._core.store.copy_messages(task_id, task.id)
        return await self.get(task.id)

    # -- what a task holds --

    async def messages(self, task_id: str, *, before: int | None = None, after: int | None = None,
                       limit: int | None = None) -> builtins.list[MessageInfo]:
        """The task's messages in order; a page with `limit`: the newest ones (before message id `before`), or
        the oldest ones after message id `after`. A long task opens at its last page at once."""
        await self._row(task_id)
        rows = await self._core.store.messages(task_id, before=before, after=after, limit=limit)
        return [MessageInfo.model_validate(r) for r in rows]

    async def turns(self, task_id: str, turn_ids: Iterable[str] | None = None) -> builtins.list[dict]:
        """Turn rows (reason, error, usage, times, `changed_files`: how many workspace files the turn changed);
        only those in `turn_ids` when given."""
        await self._row(task_id)
        rows = await self._core.store.turns(task_id, None if turn_ids is None else list(turn_ids))
        counts = await self._core.store.change_counts(row["id"] for row in rows)
        return [{**row, "changed_files": counts.get(row["id"], 0)} for row in rows]

    async def turn_details(self, task_id: str, turn_id: str) -> dict:
        """A turn's records: its model steps (times, tokens, finish reason, tool calls) and the helpers it ran."""
        await self._row(task_id)
        store = self._core.store
        return {"steps": await store.steps(turn_id), "subagents": await store.subagents(turn_id)}

    async def background(self, task_id: str) -> builtins.list[dict]:
        """The task's background commands, newest first: `id`, `command`, `status` (running, exited, stopped,
        interrupted), `exit_code`, `started_at`, `ended_at`, `output_bytes`."""
        await self._row(task_id)
        return await self._core.background.list(task_id)

    async def background_output(self, task_id: str, command_id: str, offset: int = -8192,
                                limit: int = READ_LIMIT) -> str:
        """A piece of a background command's output (a negative offset counts from the end)."""
        row = await self._core.background.get(task_id, command_id)
        if row is None:
            raise ConfigError(f"This task has no background command {command_id!r}.")
        return read_log(row["log_path"], offset, limit).text

    async def stop_background(self, task_id: str, command_id: str) -> bool:
        """Stop one background command of the task (and everything it started); False when it was not running."""
        self._core.writable()
        return await self._core.background.stop(task_id, command_id)

    def is_running(self, task_id: str) -> bool:
        return task_id in self._core.aborts

    def running(self) -> builtins.list[str]:
        """Ids of the tasks with a turn running (or about to start from the queue)."""
        return [slot.task_id for slot in self._core.aborts.slots()]

    def working(self) -> builtins.list[str]:
        """Ids of the tasks a quit would interrupt: a turn running, or a background command."""
        return sorted(set(self.running()) | self._core.background.tasks())

    # -- turns --

    async def send(self, task_id: str, text: str, attachments: Iterable[str | Path] = (),
                   client_msg_id: str | None = None, queue: bool = False) -> TurnHandle:
        attachments = list(attachments)
        if not text.strip() and not attachments:
            raise ConfigError("A message needs some text or an attachment.")
        parts: builtins.list[dict] = [{"type": "text", "text": text}] if text.strip() else []
        return await self._send(task_id, parts, attachments, client_msg_id, queue)

    async def continue_task(self, task_id: str, client_msg_id: str | None = None) -> TurnHandle:
        """Carry on the last answer where it stopped (after an interruption, a Stop, an error or the length
        limit): no new text from the person; the model sees its partial answer and is asked to go on."""
        return await self._send(task_id, [{"type": "continue"}], (), client_msg_id, False)

    async def retry(self, task_id: str, client_msg_id: str | None = None) -> TurnHandle:
        """A new answer to the last input: the model sees the conversation as it was when that input came."""
        last = await self._turns.last_input(task_id)
        return await self._send(task_id, [{"type": "retry", "message_id": last}], (), client_msg_id, False)

    async def edit_last(self, task_id: str, text: str, client_msg_id: str | None = None) -> TurnHandle:
        """Replace the last input with `text` and answer that instead (the earlier attempt stays visible)."""
        if not text.strip():
            raise ConfigError("An edited message needs some text.")
        last = await self._turns.last_input(task_id)
        parts: builtins.list[dict] = [{"type": "text", "text": text}, {"type": "edit", "message_id": last}]
        return await self._send(task_id, parts, (), client_msg_id, False)

    async def answer(self, task_id: str, request_id: str, answer: str, remember: bool = False,
                     plan: builtins.list[str] | None = None, rule_command: str | None = None) -> TurnHandle:
        """Reply to a question (any text), an approval ("approve" / "deny", or "approve_network" when the request
        offers it) or a plan ("approve", with the edited steps in `plan` if the person changed them, or any other
        text to reject it with that reason); starts the next turn. `remember` keeps an approval's decision as a
        rule of the task, for the whole tool or, with `rule_command` (a run_shell approval's `suggested_rule`),
        for commands starting with it."""
        self._core.writable()
        row = await self._row(task_id)
        req = row["pending_request"]
        if not req or req["request_id"] != request_id:
            existing = await self._core.store.find_client_message(task_id, f"answer:{request_id}")
            if existing is not None:
                return self._turns.duplicate(existing)
            raise RequestNotFound(task_id, request_id)
        if req["kind"] == "approval":
            answers = ("approve", "deny", "approve_network") if req.get("network_offer") else ("approve", "deny")
            if answer not in answers:
                raise ConfigError(f"An approval is answered with {' or '.join(repr(a) for a in answers)}, "
                                  f"not {answer!r}.")
            if remember:
                await self._permissions.approval_rule(req["tool_name"], "deny" if answer == "deny" else "allow",
                                                      rule_command, task_id)
        if req["kind"] == "plan":
            await self._decide_plan(task_id, req, answer, plan)
        parts = [{"type": "answer", "request": req, "answer": answer}]
        return await self._send(task_id, parts, (), f"answer:{request_id}", False)

    async def _decide_plan(self, task_id: str, req: dict, answer: str, steps: builtins.list[str] | None) -> None:
        """An approved plan becomes the task's todo list before the next turn starts (which then has every
        tool); a rejected one leaves the task planning."""
        if answer.strip().lower() != "approve":
            await self._core.store.update_task(task_id, plan_status="rejected")
            return
        steps = [s.strip() for s in (steps if steps is not None else req.get("plan") or []) if s.strip()]
        if not steps:
            raise ConfigError("An approved plan needs at least one step.")
        await self._core.store.update_task(task_id, plan_status="approved",
                                           todos=[{"content": s, "status": "pending"} for s in steps])

    async def wake(self, task_id: str, text: str, client_msg_id: str) -> TurnHandle:
        """The input of a wake-up (services/wakeups.py): sent as the person's are, without cancelling it, marked
        with a `wake` part (the window and `hearth show` say Hearth sent it; it is not the person's to edit)."""
        parts: builtins.list[dict] = [{"type": "wake"}, {"type": "text", "text": text}]
        return await self._turns.send(task_id, parts, client_msg_id, False)

    async def _send(self, task_id: str, parts: builtins.list[dict], attachments: Iterable[str | Path],
                    client_msg_id: str | None, queue: bool) -> TurnHandle:
        files = list(attachments)
        kit = self._kit

        async def with_attachments(task: dict, parts: builtins.list[dict]) -> builtins.list[dict]:
            """Copy attachments into the workspace; their text (up to a quarter of the task model's context
            window, shared: ~4 characters a token) travels in the message for the model to read."""
            provider_id, model = split_model_ref(task["model"])
            budget = await kit.window_tokens(kit.provider(provider_id), model) or UNKNOWN_CONTEXT_TOKENS
            return parts + await asyncio.to_thread(_attachment_parts, Path(task["workspace"]), files, budget)

        handle = await self._turns.send(task_id, parts, client_msg_id, queue, with_attachments if files else None)
        # The person's input ends a wait for a wake-up; after the send, which takes the owner before any await (a
        # wake-up firing meanwhile finds the task busy, waits for it and then finds itself cancelled).
        await cancel_wakeup(self._core, task_id)
        return handle

    async def run_queued(self, task_id: str) -> TurnHandle | None:
        """"Send now" for inputs left queued (e.g. by a quit or a crash): runs them in order. None when
        nothing is queued; a no-op while a turn runs (they follow it)."""
        return await self._turns.run_queued(task_id)

    async def queued(self, task_id: str) -> builtins.list[MessageInfo]:
        """The task's inputs waiting for their turn, oldest first."""
        return [m for m in await self.messages(task_id) if m.status == "queued"]

    async def discard_queued(self, task_id: str, message_id: int) -> bool:
        """Delete a queued input before it runs; False when it is not queued (any more)."""
        return await self._turns.discard_queued(task_id, message_id)

    async def stop(self, task_id: str) -> None:
        """Stop the running turn, or end the task's wait for an approval or an answer (it ends `aborted`, the call
        that asked is `stopped`): idempotent, a no-op when nothing runs or waits. Its background commands are
        stopped and its wait for a wake-up cancelled too."""
        await self._turns.stop(task_id)
        if not self._core.read_only:
            await cancel_wakeup(self._core, task_id)
        await self._core.background.stop_task(task_id)

    async def wait_idle(self, task_id: str) -> None:
        """Wait until the task's current (and queued) turns are finalized and cleaned up."""
        await self._turns.wait_idle(task_id)

    def subscribe(self, task_id: str, after_seq: int = 0, turn_id: str | None = None,
                  follow: bool = False, deltas: bool = True) -> AsyncGenerator[Event, None]:
        """Replay the current/last turn's events after `after_seq`, then live ones, and end after its terminal
        event; ends at once when nothing is in memory (read `messages()` then). With `follow=True` it goes on
        with every later turn of the task (each from seq 1) until the runtime closes. `deltas=False` leaves
        text and reasoning deltas out (cheap for a status view)."""
        return self._turns.subscribe(task_id, after_seq, turn_id, follow, deltas)

    async def stream_state(self, task_id: str) -> BufferState:
        """Whether the task's current or last turn can be subscribed to: active, completed, or missing (nothing
        buffered: read `messages()`)."""
        return await self._turns.stream_state(task_id)

    async def clear_stop(self, task_id: str) -> None:
        """A new input is about to be sent: a Stop requested before it is stale (a server keeps a Stop as a flag
        that a run starting later still honours; the desktop keeps none)."""
        await self._turns.clear_stop(task_id)


async def cancel_wakeup(core: Core, task_id: str) -> bool:
    """Drop the task's wake-up (services/wakeups.py) and tell observers; False when it had none. Looked for first:
    every input the person sends comes here, and most tasks wait for nothing (a read takes no write lock)."""
    if not await core.store.wakeups(task_id) or not await core.store.delete_wakeup(task_id):
        return False
    core.buffers.announce(TaskActivity(task_id=task_id, turn_id="", what="wake_cancelled",
                                       detail="The wait was cancelled."))
    return True


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


def real_paths(paths: Iterable[str | os.PathLike]) -> list[str]:
    """Knowledge paths as a task binds them: real, absolute, in the order given, without repeats."""
    return list(dict.fromkeys(os.path.realpath(Path(p).expanduser()) for p in paths))
