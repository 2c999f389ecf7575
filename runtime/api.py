"""The Runtime facade: the one front door for the app, the CLI, tests and outside checks
(runtime/ARCHITECTURE.md describes what stands behind it).

Decisions where the design is silent:
- One process owns a data folder (`locks.DataFolderLock`): a second `Runtime.open()` raises `DataFolderBusy`.
  `Runtime.open(home, read_only=True)` opens beside the owner for reading (the CLI's `tasks` and `show`):
  no recovery, no migration, and every change raises `ReadOnlyRuntime`.
- `send()` with a `client_msg_id` seen before returns the original input's handle (`duplicate=True`)
  instead of raising, whether its turn still runs, has ended or is still queued.
- Queued inputs live in SQLite (status `queued`), never only in memory. While this process runs they start
  one after another when the turn before them ends. After a restart they wait, shown as queued, until the
  person sends them (`run_queued`), discards them (`discard_queued`) or sends a new input, which is queued
  behind them: a new input never overtakes an older queued one.
- `send()` to a task that waits for an answer starts a normal turn; the unanswered call is shown to the
  model as not run.
- `answer()` is idempotent per request (it uses `answer:<request_id>` as the client message id).
- `subscribe(..., turn_id=...)` starts from the beginning when the buffer now holds another turn, so a
  panel that remembers a seq from an older turn never skips the new one. `follow=True` goes on across
  the task's later turns and only ends when the runtime closes.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from .abort import AbortRegistry, TurnSlot
from .config import ProviderConfig, Settings, load_settings, resolve_home, split_model_ref
from .errors import (
    ConfigError,
    DataFolderBusy,
    DownloadCancelled,
    ModelError,
    ProviderError,
    ReadOnlyRuntime,
    RequestNotFound,
    TaskBusy,
    TaskNotFound,
)
from .events import EndReason, Event, TurnStarted
from .jobs import JobQueue
from .keys import SecretStore
from .kit import AgentKit
from .locks import DataFolderLock, TaskLocks
from .models.library import ModelLibrary
from .models.progress import DownloadProgress, format_progress
from .models_api import CatalogModel, InstalledModel, ModelsMixin
from .parts import is_truncated, text_of
from .ports import TurnServices
from .providers.base import Provider
from .providers.presets import PRESETS, Preset
from .settings_api import SettingsMixin
from .store.repo import DuplicateMessage, Store
from .stream_buffer import BufferRegistry, BufferState
from .tools.approvals import APPROVAL_MODES
from .tools.base import Tool
from .tools.mcp_consent import MCPConsents
from .turn import run_turn
from .workspace import copy_attachments, workspace_for

log = logging.getLogger(__name__)

__all__ = [
    "PRESETS", "BufferState", "CatalogModel", "ConfigError", "DataFolderBusy", "DownloadCancelled",
    "DownloadProgress", "EndReason", "Event", "InstalledModel", "MessageInfo", "ModelError", "Preset",
    "ProviderConfig", "ProviderError", "ReadOnlyRuntime", "RequestNotFound", "Runtime", "Settings", "TaskBusy",
    "TaskInfo", "TaskNotFound", "TurnHandle", "format_progress",
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
    status: str  # complete | streaming (a running turn's answer) | queued (an input waiting for its turn)
    turn_id: str | None
    created_at: float

    @property
    def text(self) -> str:
        return text_of(self.parts)

    @property
    def truncated(self) -> bool:
        """The answer stopped at the model's length limit."""
        return is_truncated(self.parts)


@dataclass
class TurnHandle:
    task_id: str
    turn_id: str | None  # None while the input is queued
    message_id: int
    duplicate: bool = False
    queued: bool = False


class Runtime(SettingsMixin, ModelsMixin):
    def __init__(self, home: Path, settings: Settings, store: Store, providers: dict[str, Provider],
                 tools: Iterable[Tool], *, folder_lock: DataFolderLock | None = None, read_only: bool = False):
        self.home = home
        self.settings = settings
        self.store = store
        self.keys = SecretStore(home)
        self.mcp_consents = MCPConsents(home)
        self.buffers = BufferRegistry()
        self.locks = TaskLocks()
        self.aborts = AbortRegistry()
        self.jobs = JobQueue(store.record_job)
        self.models = ModelLibrary(home)
        self._pulls = {}
        self._providers: dict[str, Provider] = dict(providers)
        self.kit = AgentKit(lambda: self.settings, self.keys, self._providers, list(tools), self.mcp_consents, store,
                            self.models)
        self._services = TurnServices(
            storage=store, locks=self.locks, aborts=self.aborts, streams=self.buffers, jobs=self.jobs,
            agent=self.kit, on_turn_done=self._after_turn,
        )
        self._runs: set[asyncio.Task] = set()
        self._has_queue: set[str] = set()  # tasks whose queued inputs this process runs one after another
        self._folder_lock = folder_lock
        self.read_only = read_only
        self._closed = False

    @classmethod
    async def open(cls, home: str | Path | None = None, *, providers: dict[str, Provider] | None = None,
                   tools: Iterable[Tool] = (), settings: Settings | None = None, read_only: bool = False) -> Runtime:
        """Open the data dir: take it (one process per folder), settings, SQLite (migrated), startup recovery."""
        home = resolve_home(home)
        folder_lock = None if read_only else DataFolderLock.acquire(home)
        try:
            settings = settings or load_settings(home)
            store = await Store.open(home, migrate=not read_only)
            if not read_only:
                recovered = await store.recover()
                if recovered:
                    log.info("recovered %d interrupted turn(s)", len(recovered))
        except BaseException:
            if folder_lock is not None:
                folder_lock.release()
            raise
        rt = cls(home, settings, store, providers or {}, tools, folder_lock=folder_lock, read_only=read_only)
        if settings.mcp_servers and not read_only:
            # So the first turn's connect timeouts measure the servers, not our own import of the SDK.
            from .tools.mcp import import_sdk

            rt.jobs.submit("mcp_preload", None, asyncio.to_thread(import_sdk))
        return rt

    def _writable(self) -> None:
        if self._closed:
            raise ConfigError("The runtime is shut down.")
        if self.read_only:
            raise ReadOnlyRuntime()

    # -- tasks --

    async def create_task(self, title: str | None = None, model: str | None = None, approval: str = "ask",
                          planning: bool = False, knowledge: Iterable[str] = ()) -> TaskInfo:
        self._writable()
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
        self._writable()
        await self._task_row(task_id)
        await self.store.update_task(task_id, title=title.strip() or None)

    async def delete_task(self, task_id: str) -> None:
        self._writable()
        if task_id in self.aborts:
            await self.stop(task_id)
            await self.wait_idle(task_id)
        await self.store.delete_task(task_id)

    def is_running(self, task_id: str) -> bool:
        return task_id in self.aborts

    def provider(self, provider_id: str) -> Provider:
        return self.kit.provider(provider_id)

    # -- turns --

    async def send(self, task_id: str, text: str, attachments: Iterable[str | Path] = (),
                   client_msg_id: str | None = None, queue: bool = False) -> TurnHandle:
        parts: list[dict] = [{"type": "text", "text": text}] if text else []
        return await self._send(task_id, parts, attachments, client_msg_id, queue)

    async def answer(self, task_id: str, request_id: str, answer: str, remember: bool = False) -> TurnHandle:
        """Reply to a question (any text) or an approval ("approve" / "deny"); starts the next turn."""
        self._writable()
        row = await self._task_row(task_id)
        req = row["pending_request"]
        if not req or req["request_id"] != request_id:
            existing = await self.store.find_client_message(task_id, f"answer:{request_id}")
            if existing is not None:
                return _duplicate(existing)
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
        self._writable()
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
                    task_id, parts, client_msg_id=client_msg_id, turn_id=slot.turn_id
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
        files = list(attachments)
        if not files:
            return []
        names = await asyncio.to_thread(copy_attachments, Path(task["workspace"]), files)
        return [{"type": "attachment", "name": n} for n in names]

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
                        follow: bool = False) -> AsyncIterator[Event]:
        """Replay the current/last turn's events after `after_seq`, then live ones, and end after its terminal
        event; ends at once when nothing is in memory (read `messages()` then). With `follow=True` it goes on
        with every later turn of the task (each from seq 1) until the runtime closes."""
        buffer = self.buffers.get(task_id)
        if buffer is None:
            await self._task_row(task_id)
        while True:
            if buffer is not None:
                if turn_id is not None and turn_id != buffer.turn_id:
                    after_seq = 0
                async for event in buffer.subscribe(after_seq):
                    yield event
            if not follow:
                return
            after_seq, turn_id = 0, None
            buffer = await self.buffers.next_buffer(task_id, buffer)
            if buffer is None:
                return

    def stream_state(self, task_id: str) -> BufferState:
        return self.buffers.state(task_id)

    # -- shutdown --

    async def aclose(self) -> None:
        """Interrupt running turns, finalize them as `interrupted`, drain jobs, close the database."""
        if self._closed:
            return
        self._closed = True
        for slot in self.aborts.slots():
            slot.abort(EndReason.interrupted)
        while self._runs:
            await asyncio.gather(*list(self._runs), return_exceptions=True)
        self.buffers.close()
        await self.jobs.drain()
        for provider in self._providers.values():
            try:
                await provider.aclose()
            except Exception:
                log.exception("closing provider %s failed", getattr(provider, "id", "?"))
        await self.store.aclose()
        if self._folder_lock is not None:
            self._folder_lock.release()


def _duplicate(row: dict) -> TurnHandle:
    return TurnHandle(row["task_id"], row["turn_id"], row["id"], duplicate=True, queued=row["status"] == "queued")
