"""What every service of the facade shares (runtime/ARCHITECTURE.md, "The facade").

The services (`rt.tasks`, `rt.memory`, …) are each handed this core and, in their constructor, exactly the other
collaborators they use; none reaches into another's private members. The core holds:
- the data folder, the store, the secret store, the MCP consents and the installed-models library;
- the settings, the one piece of shared state that is replaced at run time, and `save_settings`, which writes them
  and drops the providers built from the old ones;
- the turn engine's shared parts: the per-owner locks, the Stop registry, the stream buffers, the job queue,
  the set of running turns (waited for at shutdown) and the tasks' background commands; from them `host()`
  builds each surface's TurnHost (the tasks' host by `task_hosts` when the runtime serves a server host,
  runtime/server/);
- `writable()`, the one "may I change anything" check, and `check_model()`, the one check of a model reference.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from ..config import Settings, save_settings, split_model_ref
from ..engine.abort import AbortRegistry
from ..engine.host import TurnHost
from ..engine.jobs import JobQueue
from ..engine.locks import TaskLocks
from ..engine.ports import AgentPort, HostStorage
from ..engine.stream_buffer import BufferRegistry
from ..errors import ConfigError, ReadOnlyRuntime
from ..keys import SecretStore
from ..local_models.library import ModelLibrary
from ..providers.base import Provider
from ..redact import remember
from ..store.faults import guard as storage_faults
from ..store.repo import Store
from ..tools.mcp.consent import MCPConsents
from ..tools.shell.background import BACKGROUND_DIR, BackgroundCommands

# Builds a TurnHost, or a host variant, from TurnHost's arguments.
HostFactory = Callable[..., TurnHost]


class Core:
    def __init__(self, home: Path, settings: Settings, store: Store, providers: dict[str, Provider], *,
                 read_only: bool = False, task_hosts: HostFactory | None = None, settings_fixed: bool = False):
        self.home = home
        self.settings = settings
        self.store = store
        self.keys = SecretStore(home)
        self.consents = MCPConsents(home)
        self.library = ModelLibrary(home)
        self.providers: dict[str, Provider] = dict(providers)  # built on first use (kits/task.py), or given
        self.locks = TaskLocks()
        self.aborts = AbortRegistry()
        self.buffers = BufferRegistry()
        self.jobs = JobQueue(store.record_job)
        self.runs: set[asyncio.Task] = set()  # every surface's turns, waited for at shutdown
        self.background = BackgroundCommands(home / BACKGROUND_DIR, store)  # the tasks' background commands
        self.read_only = read_only
        self.closed = False
        self.task_hosts: HostFactory = task_hosts or TurnHost  # a server's tasks may run elsewhere
        self.settings_fixed = settings_fixed  # a server's settings are its --settings file, never written

    def writable(self) -> None:
        """Raise unless this runtime may change anything: not once it is shut down, never when read-only."""
        if self.closed:
            raise ConfigError("The runtime is shut down.")
        if self.read_only:
            raise ReadOnlyRuntime()

    def host(self, store: HostStorage, agent: AgentPort, owner_row: Callable[[str], Awaitable[dict]],
             noun: str = "Task", turn_over: Callable[[str], Any] | None = None,
             factory: HostFactory = TurnHost) -> TurnHost:
        """A surface's turns on the shared lock, Stop registry, stream buffers and jobs."""
        return factory(store, agent, locks=self.locks, aborts=self.aborts, buffers=self.buffers, jobs=self.jobs,
                       owner_row=owner_row, writable=self.writable, closed=lambda: self.closed, runs=self.runs,
                       noun=noun, turn_over=turn_over)

    def check_model(self, model: str | None) -> str:
        """A model reference a person gave (the default model when None), checked: `provider/model`, on a provider
        that exists. `ConfigError` says what is wrong, naming the configured providers."""
        model = (model or self.settings.default_model).strip()
        provider_id, _ = split_model_ref(model)
        if provider_id not in self.providers:
            self.settings.provider(provider_id)  # raises ConfigError naming the configured ones
        return model

    async def save_settings(self, settings: Settings | dict) -> None:
        """Validate and write settings.json; providers whose configuration changed are rebuilt on next use."""
        if self.settings_fixed:
            raise ConfigError("This server's settings are the file it was started with (--settings): change that "
                              "file and restart the server.")
        new = settings if isinstance(settings, Settings) else Settings.model_validate(settings)
        with storage_faults(self.home):  # a full disk or a read-only folder: StorageFull / StorageReadOnly
            save_settings(self.home, new)
        remember(new.secret_values())
        old, kept = {p.id: p for p in self.settings.providers}, {p.id: p for p in new.providers}
        self.settings = new
        # Dropped with no await in between: a provider asked for meanwhile is built from the new settings, never
        # rebuilt from the old ones while an old one closes.
        stale = [self.providers.pop(pid) for pid in list(self.providers) if kept.get(pid) != old.get(pid)]
        for provider in stale:
            await provider.aclose()
