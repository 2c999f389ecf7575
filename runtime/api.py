"""The Runtime facade: the one front door for the app, the CLI, tests and outside checks
(runtime/ARCHITECTURE.md, "The facade", describes what stands behind it).

`Runtime` holds the `Core` (settings, the store, the engine's shared parts) and one service per capability:
`rt.tasks`, `rt.deliveries`, `rt.chats`, `rt.teams`, `rt.memory`, `rt.knowledge`, `rt.models`, `rt.providers`,
`rt.mcp`, `rt.permissions`, `rt.backups`, `rt.jobs` and `rt.skills`. The design's names (`create_task`, `send`,
`subscribe`, `stop`, `answer`, `wait_idle`, `get_task`, `list_tasks`, `messages`) are delegates to `rt.tasks`.

Decisions where the design is silent:
- One process owns a data folder (`locks.DataFolderLock`): a second `Runtime.open()` raises `DataFolderBusy`.
  `Runtime.open(home, read_only=True)` opens beside the owner for reading (the CLI's `tasks` and `show`):
  no recovery, no migration, and every change raises `ReadOnlyRuntime`.
- `send()` with a `client_msg_id` seen before returns the original input's handle (`duplicate=True`)
  instead of raising, whether its turn still runs, has ended or is still queued.
- Queued inputs live in SQLite (status `queued`), never only in memory. While this process runs they start
  one after another when the turn before them ends. After a restart they wait, shown as queued, until the
  person sends them (`rt.tasks.run_queued`), discards them (`rt.tasks.discard_queued`) or sends a new input,
  which is queued behind them: a new input never overtakes an older queued one.
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
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from .config import ProviderConfig, Settings, load_settings, resolve_home, set_aside_settings
from .engine.locks import DataFolderLock
from .engine.stream_buffer import BufferState
from .errors import (
    ChatNotFound,
    ConfigError,
    DataFolderBusy,
    DownloadCancelled,
    HearthError,
    ModelError,
    ProviderError,
    QuotaExhausted,
    ReadOnlyRuntime,
    RequestNotFound,
    ServerRefused,
    ServerUnreachable,
    SettingsError,
    StorageCorrupt,
    StorageError,
    StorageFull,
    StorageReadOnly,
    StorageUnavailable,
    TaskBusy,
    TaskNotFound,
    TeamNotFound,
    TokenRefused,
    UndoRefused,
)
from .events import EndReason, Event
from .infos import AssignmentInfo, ChatInfo, DeliveryInfo, MemberInfo, MessageInfo, TaskInfo, TeamInfo, TurnHandle
from .kits.task import AgentKit
from .knowledge.library import Added, Knowledge
from .local_models.progress import DownloadProgress, format_progress
from .memory.folder import MEMORY_DIR, Memory
from .providers.base import Provider
from .providers.presets import PRESETS, Preset
from .redact import install_log_redaction, remember
from .remote.tokens import save_token, saved_token, server_url
from .services.backups import Backups
from .services.changes import Changes, FileChange, TurnChanges
from .services.chats import Chats
from .services.core import Core, HostFactory
from .services.deliveries import Deliveries
from .services.jobs import Jobs
from .services.knowledge import KnowledgeLibrary, chosen_embedder
from .services.local_models import CatalogModel, InstalledModel, LocalModels, PausedDownload
from .services.mcp import MCPServers, MCPToolChange
from .services.memory import Memories
from .services.permissions import PermissionRule, Permissions, SandboxInfo
from .services.providers import Providers
from .services.skills import Skills
from .services.tasks import Tasks
from .services.teams import Teams
from .services.wakeups import Wakeups
from .store.backup import BackupInfo, BackupNotFound, CheckReport, Restored
from .store.chats import ChatStore
from .store.faults import guard as storage_faults
from .store.knowledge_repo import KnowledgeRepo
from .store.memory_repo import MemoryRepo
from .store.repo import Store
from .store.teams import TeamStore
from .tools.base import Tool

if TYPE_CHECKING:
    from .remote.runtime import RemoteRuntime as RemoteRuntime
    from .remote.tasks import Started as Started

log = logging.getLogger(__name__)

__all__ = [
    "PRESETS", "Added", "AssignmentInfo", "BackupInfo", "BackupNotFound", "Backups", "BufferState", "CatalogModel",
    "Changes", "ChatInfo", "ChatNotFound", "Chats", "CheckReport", "ConfigError", "DataFolderBusy", "Deliveries",
    "DeliveryInfo", "DownloadCancelled", "DownloadProgress", "EndReason", "Event", "FileChange", "HearthError",
    "InstalledModel", "Jobs", "KnowledgeLibrary", "LocalModels", "MCPServers", "MCPToolChange", "MemberInfo",
    "Memories", "MessageInfo", "ModelError", "PausedDownload", "PermissionRule", "Permissions", "Preset",
    "ProviderConfig", "ProviderError", "Providers", "QuotaExhausted", "ReadOnlyRuntime", "RequestNotFound", "Restored",
    "Runtime", "SandboxInfo", "ServerRefused", "ServerUnreachable", "Settings", "SettingsError", "Skills",
    "StorageCorrupt", "StorageError", "StorageFull", "StorageReadOnly", "StorageUnavailable", "TaskBusy", "TaskInfo",
    "TaskNotFound", "Tasks", "TeamInfo", "TeamNotFound", "Teams", "TokenRefused", "TurnChanges", "TurnHandle",
    "UndoRefused", "Wakeups", "connect_server", "format_progress", "resolve_home", "save_token", "saved_token",
    "server_url",
]


async def connect_server(url: str, token: str, on_state: Callable[[str], None] | None = None) -> RemoteRuntime:
    """The tasks of the Hearth server at `url` under this facade's task names (runtime/remote/runtime.py), the
    token checked: `TokenRefused`, `ServerUnreachable` now rather than later. Imported when first used: a window
    on this computer's data folder never loads the HTTP client."""
    from .remote.runtime import RemoteRuntime

    return await RemoteRuntime.connect(url, token, on_state)


class Runtime:
    def __init__(self, home: Path, settings: Settings, store: Store, providers: dict[str, Provider],
                 tools: Iterable[Tool], *, folder_lock: DataFolderLock | None = None, read_only: bool = False,
                 task_hosts: HostFactory | None = None, settings_fixed: bool = False):
        core = self.core = Core(home, settings, store, providers, read_only=read_only, task_hosts=task_hosts,
                                settings_fixed=settings_fixed)
        memory_repo = MemoryRepo(store.engine)
        folder = Memory(home / MEMORY_DIR, memory_repo, read_only=read_only)
        # The library's embedder and the kit's `told` are looked up when used: the services they name come later.
        self._library = Knowledge(KnowledgeRepo(store.engine), lambda kind, job: core.jobs.submit(kind, None, job),
                                  lambda: chosen_embedder(core.settings, self.providers.get))
        # A server's settings are never written: its kit does not keep that a window note was given.
        told: Callable[[str], Awaitable[None]] | None = None if settings_fixed else self._window_told
        self.kit = AgentKit(home, lambda: core.settings, core.keys, core.providers, list(tools), core.consents,
                            core.library, memory=folder, knowledge=self._library, told=told,
                            deliver=store.add_delivery, background=core.background, wakes=lambda: self.wakeups)
        self.providers = Providers(core, self.kit)
        self.permissions = Permissions(core, self.kit)
        self.mcp = MCPServers(core)
        self.tasks = Tasks(core, self.kit, self._library, self.permissions)
        self.deliveries = Deliveries(core)
        self.wakeups = Wakeups(core, self.tasks)
        self.chats = Chats(core, ChatStore(store.engine), self.kit, self.tasks)
        self.teams = Teams(core, TeamStore(store.engine), self.kit, self.permissions)
        self.memory = Memories(core, folder)
        self.knowledge = KnowledgeLibrary(core, self._library, self.providers, self.tasks)
        self.models = LocalModels(core, self.kit)
        self.backups = Backups(core)
        self.jobs = Jobs(core, memory_repo)
        self.skills = Skills(core)
        self.changes = Changes(core, self._library.refresh)
        self.kit.record_changes = self.changes.recorder
        self.tasks.after_delete = self.changes.sweep
        self._folder_lock = folder_lock

    async def _window_told(self, provider_id: str) -> None:
        await self.providers.window_told(provider_id)  # built after the kit, which keeps this

    @classmethod
    async def open(cls, home: str | Path | None = None, *, providers: dict[str, Provider] | None = None,
                   tools: Iterable[Tool] = (), settings: Settings | None = None, read_only: bool = False) -> Runtime:
        """Open the data dir: take it (one process per folder), settings, SQLite (migrated), startup recovery.

        Raises `DataFolderBusy`, `ConfigError` (settings.json), or a `StorageError`: `StorageFull` (free space,
        retry), `StorageCorrupt` (`Backups.restore_latest`), `StorageReadOnly` / `StorageUnavailable` (fix the
        folder or disk, or choose another data folder). Every later call may raise them too."""
        home = resolve_home(home)
        rt = await cls._open(home, lambda: Store.open(home, migrate=not read_only), settings, owner=not read_only,
                             providers=providers, tools=tools, read_only=read_only)
        if rt.settings.mcp_servers and not read_only:
            # So the first turn's connect timeouts measure the servers, not our own import of the SDK.
            from .tools.mcp.link import import_sdk

            rt.core.jobs.submit("mcp_preload", None, asyncio.to_thread(import_sdk))
        if not read_only:
            rt.backups.schedule_daily()
            await rt._library.resume()  # documents a quit or a crash cut off are indexed again
            await rt.core.background.recover()  # background commands a crash left: ended, recorded interrupted
        return rt

    @classmethod
    async def open_server(cls, home: str | Path | None, *, database: str | None = None,
                          settings: Settings | None = None, task_hosts: HostFactory | None = None,
                          alone: bool = True, providers: dict[str, Provider] | None = None,
                          tools: Iterable[Tool] = ()) -> Runtime:
        """The runtime behind a server host (runtime/server/). `home` is the server's data folder (workspaces,
        memory and knowledge files: the same path on every instance and worker), `database` its database URL (None:
        the folder's SQLite database), `settings` the --settings file's (default: the folder's settings.json); a
        server never writes its settings. `task_hosts` builds the tasks' host (default: the desktop's TurnHost).
        `alone`: this process owns the folder and the database as the desktop does (the folder's lock, startup
        recovery, the SQLite folder's daily backup); else any number of processes share them and none recovers
        turns at start (a lease reaper does, turn by turn). Raises what `open` raises."""
        home = resolve_home(home)
        rt = await cls._open(home, lambda: Store.open(home) if database is None else Store.open_url(database),
                             settings, owner=alone, providers=providers, tools=tools, task_hosts=task_hosts,
                             settings_fixed=True)
        if alone:
            if database is None:
                rt.backups.schedule_daily()
            await rt._library.resume()
            await rt.core.background.recover()
        return rt

    @classmethod
    async def _open(cls, home: Path, open_store: Callable[[], Awaitable[Store]], settings: Settings | None, *,
                    owner: bool, providers: dict[str, Provider] | None, tools: Iterable[Tool], read_only: bool = False,
                    task_hosts: HostFactory | None = None, settings_fixed: bool = False) -> Runtime:
        """Settings and the store; as the `owner` of the folder and the database, its lock and startup recovery."""
        install_log_redaction()
        folder_lock, store = None, None
        try:
            with storage_faults(home):
                folder_lock = DataFolderLock.acquire(home) if owner else None
                settings = settings or load_settings(home)
                store = await open_store()
                if owner:
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
        return cls(home, settings, store, providers or {}, tools, folder_lock=folder_lock, read_only=read_only,
                   task_hosts=task_hosts, settings_fixed=settings_fixed)

    @staticmethod
    def reset_settings(home: str | Path | None = None) -> Path | None:
        """Set a broken settings.json aside (`settings.json.broken-<date>`) so the next open uses defaults;
        usable when `open()` failed with `SettingsError`. Returns where the old file went."""
        return set_aside_settings(resolve_home(home))

    # -- what every service shares --

    @property
    def home(self) -> Path:
        return self.core.home

    @property
    def settings(self) -> Settings:
        return self.core.settings

    async def save_settings(self, settings: Settings | dict) -> None:
        """Validate and write settings.json; providers whose configuration changed are rebuilt on next use."""
        await self.core.save_settings(settings)

    # -- the design's names (DESIGN.md §3), kept on the facade --

    async def create_task(self, title: str | None = None, model: str | None = None, approval: str = "ask",
                          planning: bool = False, knowledge: Iterable[str] = (), memory: bool = True,
                          network: bool = False) -> TaskInfo:
        """`rt.tasks.create`."""
        return await self.tasks.create(title, model, approval, planning, knowledge, memory, network)

    async def send(self, task_id: str, text: str, attachments: Iterable[str | Path] = (),
                   client_msg_id: str | None = None, queue: bool = False) -> TurnHandle:
        """`rt.tasks.send`."""
        return await self.tasks.send(task_id, text, attachments, client_msg_id, queue)

    def subscribe(self, task_id: str, after_seq: int = 0, turn_id: str | None = None,
                  follow: bool = False, deltas: bool = True) -> AsyncGenerator[Event, None]:
        """`rt.tasks.subscribe`."""
        return self.tasks.subscribe(task_id, after_seq, turn_id, follow, deltas)

    async def stop(self, task_id: str) -> None:
        """`rt.tasks.stop`."""
        await self.tasks.stop(task_id)

    async def answer(self, task_id: str, request_id: str, answer: str, remember: bool = False,
                     plan: list[str] | None = None, rule_command: str | None = None) -> TurnHandle:
        """`rt.tasks.answer`."""
        return await self.tasks.answer(task_id, request_id, answer, remember, plan, rule_command)

    async def wait_idle(self, task_id: str) -> None:
        """`rt.tasks.wait_idle`."""
        await self.tasks.wait_idle(task_id)

    async def get_task(self, task_id: str) -> TaskInfo:
        """`rt.tasks.get`."""
        return await self.tasks.get(task_id)

    async def list_tasks(self) -> list[TaskInfo]:
        """`rt.tasks.list`."""
        return await self.tasks.list()

    async def messages(self, task_id: str, *, before: int | None = None, after: int | None = None,
                       limit: int | None = None) -> list[MessageInfo]:
        """`rt.tasks.messages`."""
        return await self.tasks.messages(task_id, before=before, after=after, limit=limit)

    async def events(self) -> AsyncGenerator[Event, None]:
        """Every task's, chat's and assignment's events except text deltas, from now on, until the runtime closes:
        what a task list, a tray or notifications follow (one subscription for all, nothing polled). An event's
        `task_id` is its owner's id: a task's, a chat's or an assignment's."""
        async for event in self.core.buffers.feed():
            yield event

    # -- shutdown --

    async def aclose(self) -> None:
        """Interrupt running turns, finalize them as `interrupted`, drain jobs, close the database."""
        core = self.core
        if core.closed:
            return
        core.closed = True
        self.backups.stop_check()
        await self.wakeups.close()  # nothing wakes any more, then background commands end `interrupted`
        await core.background.close()
        for slot in core.aborts.slots():
            slot.abort(EndReason.interrupted)
        while core.runs:
            await asyncio.gather(*list(core.runs), return_exceptions=True)
        core.buffers.close()
        self._library.close()
        await core.jobs.drain()
        for provider in core.providers.values():
            try:
                await provider.aclose()
            except Exception:
                log.exception("closing provider %s failed", getattr(provider, "id", "?"))
        await core.store.aclose()
        if self._folder_lock is not None:
            self._folder_lock.release()
