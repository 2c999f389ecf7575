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
import dataclasses
import logging
import uuid
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from .abort import AbortRegistry, TurnSlot
from .attachments import excerpt
from .backups_api import BackupMixin
from .config import ProviderConfig, Settings, load_settings, resolve_home, set_aside_settings, split_model_ref
from .errors import (
    ConfigError,
    DataFolderBusy,
    DownloadCancelled,
    HearthError,
    ModelError,
    ProviderError,
    ReadOnlyRuntime,
    RequestNotFound,
    SettingsError,
    StorageCorrupt,
    StorageError,
    StorageFull,
    StorageReadOnly,
    StorageUnavailable,
    TaskBusy,
    TaskNotFound,
)
from .events import EndReason, Event, TurnStarted
from .jobs import JobQueue
from .keys import SecretStore
from .kit import DEFAULT_CONTEXT_TOKENS, AgentKit
from .locks import DataFolderLock, TaskLocks
from .models.library import ModelLibrary
from .models.progress import DownloadProgress, format_progress
from .models_api import CatalogModel, InstalledModel, ModelsMixin
from .parts import is_truncated, text_of
from .ports import TurnServices
from .providers.base import Provider
from .providers.presets import PRESETS, Preset
from .redact import install_log_redaction, remember
from .settings_api import SettingsMixin
from .store.backup import BackupInfo, BackupNotFound, CheckReport, Restored
from .store.faults import guard as storage_faults
from .store.repo import DuplicateMessage, Store
from .stream_buffer import BufferRegistry, BufferState
from .tools.approvals import APPROVAL_MODES
from .tools.base import Tool
from .tools.mcp_consent import MCPConsents
from .turn import run_turn
from .workspace import copy_attachments, workspace_for

log = logging.getLogger(__name__)
TITLE_CHARS = 60

__all__ = [
    "PRESETS", "BackupInfo", "BackupNotFound", "BufferState", "CatalogModel", "CheckReport", "ConfigError",
    "DataFolderBusy", "DownloadCancelled", "DownloadProgress", "EndReason", "Event", "HearthError", "InstalledModel",
    "MessageInfo", "ModelError", "Preset", "ProviderConfig", "ProviderError", "ReadOnlyRuntime", "RequestNotFound",
    "Restored", "Runtime", "Settings", "SettingsError", "StorageCorrupt", "StorageError", "StorageFull",
    "StorageReadOnly", "StorageUnavailable", "TaskBusy", "TaskInfo", "TaskNotFound", "TurnHandle", "format_progress",
    "resolve_home",
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


class Runtime(SettingsMixin, BackupMixin, ModelsMixin):
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
        self._model_lists: dict = {}
        self.kit = AgentKit(lambda: self.settings, self.keys, self._providers, list(tools), self.mcp_consents,
                            self.models)
        self._services = TurnServices(
            storage=store, locks=self.locks, aborts=self.aborts, streams=self.buffers, jobs=self.jobs,
            agent=self.kit, on_turn_done=self._after_turn,
        )
        self._runs: set[asyncio.Task] = set()
        self._has_queue: set[str] = set()  # tasks whose queued inputs this process runs one after another
        self._sending: dict[tuple[str, str], asyncio.Future] = {}  # inputs being written, by client id
        self._folder_lock = folder_lock
        self.read_only = read_only
        self._closed = False

    @classmethod
    async def open(cls, home: str | Path | None = None, *, providers: dict[str, Provider] | None = None,
                   tools: Iterable[Tool] = (), settings: Settings | None = None, read_only: bool = False) -> Runtime:
        """Open the data dir: take it (one process per folder), settings, SQLite (migrated), startup recovery.

        Raises `DataFolderBusy`, `ConfigError` (settings.json), or a `StorageError`: `StorageFull` (free space,
        retry), `StorageCorrupt` (`restore_latest_backup`), `StorageReadOnly` / `StorageUnavailable` (fix the
        folder or disk, or choose another data folder). Every later call may raise them too."""
        install_log_redaction()
        home = resolve_home(home)
        folder_lock, store = None, None
        try:
            with storage_faults(home):
                folder_lock = None if read_only else DataFolderLock.acquire(home)
                settings = settings or load_settings(home)
                store = await Store.open(home, migrate=not read_only)
                if not read_only:
                    recovered = await store.recover()
                    if recovered:
                        log.info("recovered %d interrupted turn(s)", len(recovered))
        except BaseException:
            if store is not None:
                await store.aclose()
            if folder_lock is not None:
                folder_lock.release()
            raise
        remember(settings.secret_values())
        rt = cls(home, settings, store, providers or {}, tools, folder_lock=folder_lock, read_only=read_only)
        if settings.mcp_servers and not read_only:
            # So the first turn's connect timeouts measure the servers, not our own import of the SDK.
            from .tools.mcp import import_sdk

            rt.jobs.submit("mcp_preload", None, asyncio.to_thread(import_sdk))
        if not read_only:
            rt._schedule_auto_backup()
        return rt

    @staticmethod
    def reset_settings(home: str | Path | None = None) -> Path | None:
        """Set a broken settings.json aside (`settings.json.broken-<date>`) so the next open uses defaults;
        usable when `open()` failed with `SettingsError`. Returns where the old file went."""
        return set_aside_settings(resolve_home(home))

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

    async def messages(self, task_id: str, *, before: int | None = None, after: int | None = None,
                       limit: int | None = None) -> list[MessageInfo]:
        """The task's messages in order; a page with `limit`: the newest ones (before message id `before`), or
        the oldest ones after message id `after`. A long task opens at its last page at once."""
        await self._task_row(task_id)
        rows = await self.store.messages(task_id, before=before, after=after, limit=limit)
        return [MessageInfo.model_validate(r) for r in rows]

    async def turns(self, task_id: str, turn_ids: Iterable[str] | None = None) -> list[dict]:
        """Turn rows (reason, error, usage, times); only those in `turn_ids` when given."""
        await self._task_row(task_id)
        return await self.store.turns(task_id, None if turn_ids is None else list(turn_ids))

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

    def running_tasks(self) -> list[str]:
        """Ids of the tasks with a turn running (or about to start from the queue)."""
        return [slot.task_id for slot in self.aborts.slots()]

    def provider(self, provider_id: str) -> Provider:
        return self.kit.provider(provider_id)

    # -- turns --

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

    async def fork_task(self, task_id: str, model: str, title: str | None = None) -> TaskInfo:
        """A new task bound to `model` that starts with a copy of this task's conversation (its workspace files
        stay where they are). What "Continue in a new task with another model" does."""
        source = await self.get_task(task_id)
        task = await self.create_task(title=title or source.title, model=model, approval=source.approval,
                                      planning=source.planning, knowledge=source.knowledge)
        await self.store.copy_messages(task_id, task.id)
        return await self.get_task(task.id)

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
