"""The Runtime facade: the one front door for the app, the CLI, tests and outside checks (DESIGN §3).

Decisions where DESIGN is silent:
- The abort flag lives on the per-turn slot that `send()` registers before its first await; a new send
  makes a new slot, so a stale flag can never leak into the next turn.
- `send()` with a `client_msg_id` seen before returns the original turn's handle (`duplicate=True`)
  instead of raising `TaskBusy`, whether that turn still runs or has ended.
- `send()` to a task that waits for an answer starts a normal turn; the unanswered call is shown to the
  model as not run.
- `answer()` is idempotent per request (it uses `answer:<request_id>` as the client message id).
- `subscribe(..., turn_id=...)` starts from the beginning when the buffer now holds another turn, so a
  panel that remembers a seq from an older turn never skips the new one.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from .config import ProviderConfig, Settings, load_settings, resolve_home, split_model_ref
from .errors import ConfigError, ProviderError, RequestNotFound, TaskBusy, TaskNotFound
from .events import Aborted, EndReason, Event
from .jobs import JobQueue
from .keys import SecretStore
from .locks import TaskLocks
from .parts import text_of
from .providers import build_provider
from .providers.base import Provider
from .providers.presets import PRESETS, Preset
from .settings_api import SettingsMixin
from .store.repo import Store
from .stream_buffer import BufferRegistry, BufferState
from .tools.approvals import APPROVAL_MODES
from .tools.base import Tool
from .tools.builtin import builtin_tools
from .tools.interactive import interactive_tools
from .tools.mcp_consent import MCPConsents
from .turn import DEFAULT_CONTEXT_TOKENS, run_turn
from .workspace import copy_attachments, workspace_for

log = logging.getLogger(__name__)

__all__ = [
    "PRESETS", "BufferState", "ConfigError", "EndReason", "Event", "MessageInfo", "Preset", "ProviderConfig",
    "ProviderError", "RequestNotFound", "Runtime", "Settings", "TaskBusy", "TaskInfo", "TaskNotFound", "TurnHandle",
]


class TaskInfo(BaseModel):
    id: str
    title: str | None
    model: str
    approval: str
    planning: bool
    knowledge: list
    workspace: str
    state: str
    last_reason: str | None
    last_error: str | None
    pending_request: dict | None
    input_tokens: int
    output_tokens: int
    created_at: float
    updated_at: float


class MessageInfo(BaseModel):
    id: int
    role: str
    parts: list[dict]
    status: str
    turn_id: str | None
    created_at: float

    @property
    def text(self) -> str:
        return text_of(self.parts)


@dataclass
class TurnHandle:
    task_id: str
    turn_id: str | None
    message_id: int
    duplicate: bool = False
    queued: bool = False


@dataclass(eq=False)
class _Slot:
    """What `send()` registers for the task's current turn, before its first await."""

    task_id: str
    turn_id: str
    client_msg_id: str | None
    input_message_id: int = 0
    output_message_id: int = 0
    controller: Any = None
    abort_reason: EndReason | None = None
    aborted_published: bool = False
    done: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class Runtime(SettingsMixin):
    def __init__(self, home: Path, settings: Settings, store: Store, providers: dict[str, Provider],
                 tools: Iterable[Tool]):
        self.home = home
        self.settings = settings
        self.store = store
        self.keys = SecretStore(home)
        self.mcp_consents = MCPConsents(home)
        self.buffers = BufferRegistry()
        self.locks = TaskLocks()
        self.jobs = JobQueue(store.record_job)
        self.contexts: dict[str, Any] = {}  # turn id -> TurnContext while it runs
        self._providers: dict[str, Provider] = dict(providers)
        self._extra_tools = list(tools)
        self._active: dict[str, _Slot] = {}
        self._runs: set[asyncio.Task] = set()
        self._queued: dict[str, int] = {}
        self._closed = False

    @classmethod
    async def open(cls, home: str | Path | None = None, *, providers: dict[str, Provider] | None = None,
                   tools: Iterable[Tool] = (), settings: Settings | None = None) -> Runtime:
        """Open the data dir: settings, SQLite (migrated), then startup recovery."""
        home = resolve_home(home)
        settings = settings or load_settings(home)
        store = await Store.open(home)
        recovered = await store.recover()
        if recovered:
            log.info("recovered %d interrupted turn(s)", len(recovered))
        rt = cls(home, settings, store, providers or {}, tools)
        if settings.mcp_servers:
            # So the first turn's connect timeouts measure the servers, not our own import of the SDK.
            from .tools.mcp import import_sdk

            rt.jobs.submit("mcp_preload", None, asyncio.to_thread(import_sdk))
        return rt

    # -- tasks --

    async def create_task(self, title: str | None = None, model: str | None = None, approval: str = "ask",
                          planning: bool = False, knowledge: Iterable[str] = ()) -> TaskInfo:
        model = model or self.settings.default_model
        provider_id, _ = split_model_ref(model)
        if provider_id not in self._providers:
            self.settings.provider(provider_id)  # raises ConfigError naming the configured ones
        if approval not in APPROVAL_MODES:
            raise ConfigError(f"Approval mode must be one of {', '.join(APPROVAL_MODES)}, not {approval!r}.")
        task_id = uuid.uuid4().hex
        row = await self.store.create_task(
            id=task_id, title=title, model=model, approval=approval, planning=planning,
            knowledge=list(knowledge), workspace=str(workspace_for(self.home, task_id)), tool_rules={},
        )
        return TaskInfo.model_validate(row)

    async def _task_row(self, task_id: str) -> dict:
        row = await self.store.get_task(task_id)
        if row is None:
            raise TaskNotFound(task_id)
        return row

    async def get_task(self, task_id: str) -> TaskInfo:
        return TaskInfo.model_validate(await self._task_row(task_id))

    async def list_tasks(self) -> list[TaskInfo]:
        return [TaskInfo.model_validate(r) for r in await self.store.list_tasks()]

    async def messages(self, task_id: str) -> list[MessageInfo]:
        await self._task_row(task_id)
        return [MessageInfo.model_validate(r) for r in await self.store.messages(task_id)]

    async def turns(self, task_id: str) -> list[dict]:
        await self._task_row(task_id)
        return await self.store.turns(task_id)

    async def rename_task(self, task_id: str, title: str) -> None:
        await self._task_row(task_id)
        await self.store.update_task(task_id, title=title.strip() or None)

    async def delete_task(self, task_id: str) -> None:
        if task_id in self._active:
            await self.stop(task_id)
            await self.wait_idle(task_id)
        await self.store.delete_task(task_id)

    def is_running(self, task_id: str) -> bool:
        return task_id in self._active

    # -- turns --

    async def send(self, task_id: str, text: str, attachments: Iterable[str | Path] = (),
                   client_msg_id: str | None = None, queue: bool = False) -> TurnHandle:
        parts: list[dict] = [{"type": "text", "text": text}] if text else []
        return await self._send(task_id, parts, attachments, client_msg_id, queue)

    async def answer(self, task_id: str, request_id: str, answer: str, remember: bool = False) -> TurnHandle:
        """Reply to a question (any text) or an approval ("approve" / "deny"); starts the next turn."""
        row = await self._task_row(task_id)
        req = row["pending_request"]
        if not req or req["request_id"] != request_id:
            existing = await self.store.find_client_message(task_id, f"answer:{request_id}")
            if existing is not None:
                return TurnHandle(task_id, existing["turn_id"], existing["id"], duplicate=True)
            raise RequestNotFound(task_id, request_id)
        if req["kind"] == "approval":
            if answer not in ("approve", "deny"):
                raise ConfigError(f"An approval is answered with 'approve' or 'deny', not {answer!r}.")
            if remember:
                rule = "always" if answer == "approve" else "never"
                rules = dict(row["tool_rules"] or {}, **{req["tool_name"]: rule})
                await self.store.update_task(task_id, tool_rules=rules)
        parts = [{"type": "answer", "request": req, "answer": answer}]
        return await self._send(task_id, parts, (), f"answer:{request_id}", False)

    async def _send(self, task_id: str, parts: list[dict], attachments: Iterable[str | Path],
                    client_msg_id: str | None, queue: bool) -> TurnHandle:
        if self._closed:
            raise ConfigError("The runtime is shut down.")
        slot = self._active.get(task_id)
        if slot is not None:
            if client_msg_id is not None and slot.client_msg_id == client_msg_id:
                return TurnHandle(task_id, slot.turn_id, slot.input_message_id, duplicate=True)
            if not queue:
                raise TaskBusy(task_id)
            return await self._enqueue(task_id, parts, attachments, client_msg_id)
        # Registered before the first await: a concurrent send sees it and gets TaskBusy.
        slot = self._active[task_id] = _Slot(task_id, uuid.uuid4().hex, client_msg_id)
        try:
            task = await self._task_row(task_id)
            if client_msg_id is not None:
                seen = await self.store.find_client_message(task_id, client_msg_id)
                if seen is not None:
                    self.release_slot(slot)
                    return TurnHandle(task_id, seen["turn_id"], seen["id"], duplicate=True)
            parts = parts + self._attach(task, attachments)
            slot.input_message_id, slot.output_message_id = await self.store.add_user_message(
                task_id, parts, client_msg_id=client_msg_id, turn_id=slot.turn_id
            )
        except BaseException:
            self.release_slot(slot)
            raise
        self._launch(slot, task, parts)
        return TurnHandle(task_id, slot.turn_id, slot.input_message_id)

    def _attach(self, task: dict, attachments: Iterable[str | Path]) -> list[dict]:
        names = copy_attachments(Path(task["workspace"]), list(attachments)) if attachments else []
        return [{"type": "attachment", "name": n} for n in names]

    async def _enqueue(self, task_id: str, parts: list[dict], attachments: Iterable[str | Path],
                       client_msg_id: str | None) -> TurnHandle:
        task = await self._task_row(task_id)
        parts = parts + self._attach(task, attachments)
        msg_id, _ = await self.store.add_user_message(task_id, parts, client_msg_id=client_msg_id, turn_id=None)
        self._queued[task_id] = self._queued.get(task_id, 0) + 1
        if task_id not in self._active:  # the running turn ended while we were writing
            self.after_turn(task_id)
        return TurnHandle(task_id, None, msg_id, queued=True)

    def _launch(self, slot: _Slot, task: dict, parts: list[dict]) -> None:
        self.buffers.reset(slot.task_id, slot.turn_id)
        run = asyncio.ensure_future(run_turn(self, slot, task, parts))
        self._runs.add(run)
        run.add_done_callback(self._runs.discard)

    def release_slot(self, slot: _Slot) -> None:
        if self._active.get(slot.task_id) is slot:
            del self._active[slot.task_id]
        if not slot.done.done():
            slot.done.set_result(None)

    def after_turn(self, task_id: str) -> None:
        """Start the next queued input, if any (registered now so wait_idle keeps waiting)."""
        if not self._queued.get(task_id) or task_id in self._active or self._closed:
            return
        self._queued[task_id] -= 1
        slot = self._active[task_id] = _Slot(task_id, uuid.uuid4().hex, None)
        job = asyncio.ensure_future(self._start_queued(slot))
        self._runs.add(job)
        job.add_done_callback(self._runs.discard)

    async def _start_queued(self, slot: _Slot) -> None:
        try:
            task = await self._task_row(slot.task_id)
            msg = await self.store.next_queued(slot.task_id)
            if msg is None:
                self.release_slot(slot)
                return
            slot.input_message_id = msg["id"]
            slot.output_message_id = await self.store.start_queued_turn(slot.task_id, msg["id"], slot.turn_id)
        except BaseException:
            self.release_slot(slot)
            raise
        self._launch(slot, task, msg["parts"])

    async def stop(self, task_id: str) -> None:
        """Stop the running turn: idempotent, a no-op when nothing runs."""
        slot = self._active.get(task_id)
        if slot is not None:
            self._abort(slot, EndReason.aborted)

    def _abort(self, slot: _Slot, reason: EndReason) -> None:
        if slot.abort_reason is None:
            slot.abort_reason = reason
        if slot.controller is not None:
            slot.controller.abort(reason)
        buffer = self.buffers.get(slot.task_id)
        if (reason == EndReason.aborted and slot.abort_reason == reason and not slot.aborted_published
                and buffer is not None and buffer.turn_id == slot.turn_id):
            slot.aborted_published = True
            buffer.publish(Aborted(task_id=slot.task_id, turn_id=slot.turn_id))

    async def wait_idle(self, task_id: str) -> None:
        """Wait until the task's current (and queued) turns are finalized and cleaned up."""
        while (slot := self._active.get(task_id)) is not None:
            await asyncio.shield(slot.done)

    async def subscribe(self, task_id: str, after_seq: int = 0, turn_id: str | None = None) -> AsyncIterator[Event]:
        """Replay the current/last turn's events after `after_seq`, then live ones; ends after the
        terminal event. Ends at once when nothing is in memory (read `messages()` then)."""
        buffer = self.buffers.get(task_id)
        if buffer is None:
            await self._task_row(task_id)
            return
        if turn_id is not None and turn_id != buffer.turn_id:
            after_seq = 0
        async for event in buffer.subscribe(after_seq):
            yield event

    def stream_state(self, task_id: str) -> BufferState:
        return self.buffers.state(task_id)

    # -- parts the turn uses --

    def provider(self, provider_id: str) -> Provider:
        provider = self._providers.get(provider_id)
        if provider is None:
            provider = self._providers[provider_id] = build_provider(self.settings.provider(provider_id), self.keys)
        return provider

    def tools_for(self, task: dict) -> dict[str, Tool]:
        tools = [*builtin_tools(), *interactive_tools(), *self._extra_tools]
        return {t.name: t for t in tools}

    def mcp_sessions(self, cwd: Path):
        """This turn's MCP sessions, or None when no server is configured."""
        if not self.settings.mcp_servers:
            return None
        from .tools.mcp import MCPTurnSessions

        return MCPTurnSessions(
            self.settings.mcp_servers, approved=self.mcp_consents.is_approved,
            connect_timeout=self.settings.mcp_connect_timeout, cwd=cwd,
        )

    def context_budget(self, provider: Provider) -> int:
        return int(getattr(provider, "context_tokens", DEFAULT_CONTEXT_TOKENS) * 0.75)

    async def make_title(self, task_id: str) -> None:
        """Background job: a title from the first input when the person gave none."""
        messages = await self.store.messages(task_id)
        first = next((text_of(m["parts"]) for m in messages if m["role"] == "user" and text_of(m["parts"])), "")
        line = " ".join(first.split())
        if line and not (await self._task_row(task_id))["title"]:
            await self.store.update_task(task_id, title=line[:60] + ("…" if len(line) > 60 else ""))

    # -- shutdown --

    async def aclose(self) -> None:
        """Interrupt running turns, finalize them as `interrupted`, drain jobs, close the database."""
        if self._closed:
            return
        self._closed = True
        for slot in list(self._active.values()):
            self._abort(slot, EndReason.interrupted)
        while self._runs:
            await asyncio.gather(*list(self._runs), return_exceptions=True)
        await self.jobs.drain()
        for provider in self._providers.values():
            try:
                await provider.aclose()
            except Exception:
                log.exception("closing provider %s failed", getattr(provider, "id", "?"))
        await self.store.aclose()
