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
- `stop()` on a task that waits for an answer ends the wait: the waiting turn's end becomes `aborted`, the call
  that asked `stopped` (never run), the request gone, and observers get that turn's `aborted`, the call's
  `tool_call` and a new `turn_ended` (engine/host.py). `send()` (any input but the answer) to a waiting task ends the
  wait the same way before its turn starts.
- `answer()` is idempotent per request (it uses `answer:<request_id>` as the client message id). An approval of
  a shell command may be answered "approve_network" when the request offers it (`network_offer`): that one
  command runs in the sandbox with the network. `remember=True` stores a task rule (tools/approvals.py): for the
  whole tool, or with `rule_command` for commands starting with those words.
- `subscribe(..., turn_id=...)` starts from the beginning when the buffer now holds another turn, so a
  panel that remembers a seq from an older turn never skips the new one. `follow=True` goes on across
  the task's later turns and only ends when the runtime closes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from pathlib import Path

from .config import ProviderConfig, Settings, load_settings, resolve_home, set_aside_settings
from .engine.abort import AbortRegistry
from .engine.host import TurnHost
from .engine.jobs import JobQueue
from .engine.locks import DataFolderLock, TaskLocks
from .engine.stream_buffer import BufferRegistry, BufferState
from .errors import (
    ChatNotFound,
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
    TeamNotFound,
)
from .events import EndReason, Event
from .infos import AssignmentInfo, ChatInfo, MemberInfo, MessageInfo, TaskInfo, TeamInfo, TurnHandle
from .keys import SecretStore
from .kits.task import AgentKit
from .knowledge.library import Knowledge
from .local_models.library import ModelLibrary
from .local_models.progress import DownloadProgress, format_progress
from .memory.folder import MEMORY_DIR, Memory
from .providers.base import Provider
from .providers.presets import PRESETS, Preset
from .redact import install_log_redaction, remember
from .services.backups import BackupMixin
from .services.chats import Chats
from .services.local_models import CatalogModel, InstalledModel, ModelsMixin, PausedDownload
from .services.memory import MemoryMixin
from .services.permissions import MCPToolChange, PermissionRule, PermissionsMixin, SandboxInfo
from .services.settings import SettingsMixin
from .services.tasks import TasksMixin
from .services.teams import Teams
from .services.turns import TurnsMixin
from .store.backup import BackupInfo, BackupNotFound, CheckReport, Restored
from .store.chats import ChatStore
from .store.faults import guard as storage_faults
from .store.knowledge_repo import KnowledgeRepo
from .store.memory_repo import MemoryRepo
from .store.repo import Store
from .store.teams import TeamStore
from .tools.base import Tool
from .tools.mcp.consent import MCPConsents

log = logging.getLogger(__name__)

__all__ = [
    "PRESETS", "AssignmentInfo", "BackupInfo", "BackupNotFound", "BufferState", "CatalogModel", "ChatInfo",
    "ChatNotFound", "CheckReport", "ConfigError", "DataFolderBusy", "DownloadCancelled", "DownloadProgress",
    "EndReason", "Event", "HearthError", "InstalledModel", "MCPToolChange", "MemberInfo", "MessageInfo", "ModelError",
    "PausedDownload", "PermissionRule", "Preset", "ProviderConfig", "ProviderError", "ReadOnlyRuntime",
    "RequestNotFound", "Restored", "Runtime", "SandboxInfo", "Settings", "SettingsError", "StorageCorrupt",
    "StorageError", "StorageFull", "StorageReadOnly", "StorageUnavailable", "TaskBusy", "TaskInfo", "TaskNotFound",
    "TeamInfo", "TeamNotFound", "TurnHandle", "format_progress", "resolve_home",
]


class Runtime(TasksMixin, TurnsMixin, SettingsMixin, BackupMixin, PermissionsMixin, ModelsMixin, MemoryMixin):
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
        self.memory = Memory(home / MEMORY_DIR, MemoryRepo(store.engine), read_only=read_only)
        self.knowledge = Knowledge(KnowledgeRepo(store.engine), lambda kind, job: self.jobs.submit(kind, None, job),
                                   self._embedder)
        self.kit = AgentKit(home, lambda: self.settings, self.keys, self._providers, list(tools), self.mcp_consents,
                            self.models, memory=self.memory, knowledge=self.knowledge,
                            told=self._context_window_told)
        self._runs: set[asyncio.Task] = set()  # every surface's turns, waited for at shutdown
        self._db_check = None  # verify_database's check while it runs
        self.task_turns = self._host(store, self.kit, self._task_row)
        self.chats = Chats(self, ChatStore(store.engine))
        self.teams = Teams(self, TeamStore(store.engine))
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
                    recovered = (await store.recover() + await ChatStore(store.engine).recover()
                                 + await TeamStore(store.engine).recover())
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
            from .tools.mcp.link import import_sdk

            rt.jobs.submit("mcp_preload", None, asyncio.to_thread(import_sdk))
        if not read_only:
            rt._schedule_auto_backup()
            await rt.knowledge.resume()  # documents a quit or a crash cut off are indexed again
        return rt

    @staticmethod
    def reset_settings(home: str | Path | None = None) -> Path | None:
        """Set a broken settings.json aside (`settings.json.broken-<date>`) so the next open uses defaults;
        usable when `open()` failed with `SettingsError`. Returns where the old file went."""
        return set_aside_settings(resolve_home(home))

    def _host(self, store, agent, owner_row, noun: str = "Task", turn_over=None) -> TurnHost:
        """A surface's turns on the shared lock, Stop registry, stream buffers and jobs."""
        return TurnHost(store, agent, locks=self.locks, aborts=self.aborts, buffers=self.buffers, jobs=self.jobs,
                        owner_row=owner_row, writable=self._writable, closed=lambda: self._closed, runs=self._runs,
                        noun=noun, turn_over=turn_over)

    def _writable(self) -> None:
        if self._closed:
            raise ConfigError("The runtime is shut down.")
        if self.read_only:
            raise ReadOnlyRuntime()

    # -- shutdown --

    async def aclose(self) -> None:
        """Interrupt running turns, finalize them as `interrupted`, drain jobs, close the database."""
        if self._closed:
            return
        self._closed = True
        self._stop_database_check()
        for slot in self.aborts.slots():
            slot.abort(EndReason.interrupted)
        while self._runs:
            await asyncio.gather(*list(self._runs), return_exceptions=True)
        self.buffers.close()
        self.knowledge.close()
        await self.jobs.drain()
        for provider in self._providers.values():
            try:
                await provider.aclose()
            except Exception:
                log.exception("closing provider %s failed", getattr(provider, "id", "?"))
        await self.store.aclose()
        if self._folder_lock is not None:
            self._folder_lock.release()
