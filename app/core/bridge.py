"""RuntimeBridge: the app's one client of the runtime (a `runtime.api.Runtime`), turning its events into Qt
signals. No other app module holds the runtime (application.py opens it and hands it over), and a remote runtime
will stand behind this same client: the app uses only what the bridge offers. Nothing here polls.

- Tasks: the bridge's own methods (reads, `create_task`, `send`, `answer`, `stop`, `rename`, `delete`, …); every
  action emits `task_changed` or `tasks_changed`, so the sidebar, tray and notifications hear of it.
- Every other capability is the runtime's service as a typed attribute: `chats`, `deliveries`, `teams`, `memory`,
  `knowledge`, `jobs`, `models`, `providers`, `mcp`, `permissions`, `skills`, `backups`, `changes`, `wakeups`
  (runtime.api names their types). The bridge has a method of its own only where it adds something: `list_chats`,
  `create_chat`, `rename_chat`, `delete_chat`, `list_teams`, `create_team` tell the lists (and learn which owner ids
  are chats' and
  assignments'; a chat's turns go through `sources.ChatSource`, which emits the same signals); `set_api_key`,
  `test_provider` (a typed key stored first) and `approve_mcp_server` keep the keyring and files off the loop.
- Settings, the one shared state: `settings`, `home`, `save_settings`.
- Errors, once: widgets run every call through `run(coro, owner)`; a failure becomes one `error` signal with a
  sentence, or `storage_fault` for the application's ways out. Closing, once: `aclose()` ends the subscriptions,
  lets actions in flight finish (cancelling slow ones), then closes the runtime.
- A panel watches its task through a `TaskObserver`: one subscription (`follow=True`) for the panel's life,
  across every turn. Events are handed over in one batch per frame (~16 ms), consecutive text deltas of a part
  merged, so a 20,000-delta stream costs at most one repaint per frame.
- The sidebar, tray and notifications follow one feed of every owner's non-delta events (`Runtime.events()`): a
  turn that starts, waits or ends, and a task's activity between turns (a background command, a wake-up),
  re-emits `turn_event` and `task_changed`.
- The runtime is this computer's (`Runtime`) or a Hearth server's (`RemoteRuntime`, `server` its address): the
  tasks' reads, turns, Stop and answers are the same calls. On a server (`remote`) what only this computer's tasks
  have — chats, teams, the Settings' services, a task's folder, deliverables, changes, background commands,
  continue/retry/edit/fork/rename/delete — raises a `ConfigError` sentence instead (`LocalOnly`); the window hides
  or greys their controls (README, "A Hearth server in the window"). `connection` tells "connected" /
  "reconnecting".
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypeAlias, cast

from PySide6.QtCore import QObject, Qt, QTimer, Signal

from .util import error_text, pending_tasks, spawn

if TYPE_CHECKING:
    from runtime.api import (
        Backups,
        Changes,
        Chats,
        Deliveries,
        Jobs,
        KnowledgeLibrary,
        LocalModels,
        MCPServers,
        Memories,
        MessageInfo,
        Permissions,
        Providers,
        RemoteRuntime,
        Runtime,
        Settings,
        Skills,
        Started,
        TaskInfo,
        Teams,
        TurnHandle,
        Wakeups,
    )
    from runtime.events import Event, ReasoningDelta, TextDelta

    # What a panel's batch holds: the task's events, its text deltas merged into chunks.
    Batched: TypeAlias = "TextChunk | Event"

log = logging.getLogger(__name__)

FRAME = 0.016  # seconds: at most one batch (and so one repaint) per frame
# Events of the feed that change what a task list shows.
_TASK_CHANGES = frozenset({"turn_started", "input_requested", "turn_ended", "title", "activity"})
HERE = "This computer"  # where the tasks live, as the window marks it
LOCAL_ONLY = "works on this computer's tasks only; a server's tasks cannot have it"


class LocalOnly:
    """What a server does not offer, in place of one of the runtime's services: each of its methods is a coroutine
    that raises a ConfigError saying so, which `RuntimeBridge.run` reports as a sentence. The window hides or greys
    the controls that lead here; this is the sentence for any it missed."""

    def __init__(self, what: str, api):
        self._what, self._api = what, api

    def __getattr__(self, _name: str):
        async def refused(*_args: object, **_kwargs: object) -> None:
            raise self._api.ConfigError(f"{self._what} {LOCAL_ONLY}.")

        return refused


class TextChunk:
    """Consecutive deltas of one part within one frame, merged. Quacks like a TextDelta/ReasoningDelta."""

    __slots__ = ("part_id", "pieces", "seq", "task_id", "text", "turn_id", "type")

    type: Literal["text_delta", "reasoning_delta"]

    def __init__(self, ev: TextDelta | ReasoningDelta):
        self.type = ev.type
        self.task_id = ev.task_id
        self.turn_id = ev.turn_id
        self.part_id = ev.part_id
        self.seq = ev.seq
        self.pieces = [ev.text]
        self.text = ""


class TaskObserver(QObject):
    """One panel's subscription to every turn of one task. `batch` carries a list of events (text deltas as
    TextChunk) at most once per frame."""

    batch = Signal(object)

    def __init__(self, bridge: RuntimeBridge, task_id: str, subscribe=None):
        super().__init__()
        self.task_id = task_id
        self._subscribe = subscribe or bridge.subscribe  # a chat's: its `chats.subscribe`
        self.flushes = 0
        self.events = 0
        self._pending: list[Batched] = []
        self._last_flush = 0.0
        self._closed = False
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setTimerType(Qt.TimerType.PreciseTimer)
        self._timer.timeout.connect(self._flush)
        self._task = spawn(self._run(), bridge.report, long=True)

    async def _run(self) -> None:
        async for ev in self._subscribe(self.task_id, follow=True):
            if self._closed:
                return
            self._add(ev)

    def _add(self, ev: Event) -> None:
        self.events += 1
        pending = self._pending
        if ev.type in ("text_delta", "reasoning_delta"):
            last = pending[-1] if pending else None
            if (type(last) is TextChunk and last.type == ev.type and last.part_id == ev.part_id
                    and last.turn_id == ev.turn_id):
                last.pieces.append(ev.text)
                last.seq = ev.seq
            else:
                pending.append(TextChunk(ev))
        else:
            pending.append(ev)
        if not self._timer.isActive():
            wait = self._last_flush + FRAME - time.perf_counter()
            self._timer.start(max(0, math.ceil(wait * 1000)))

    def _flush(self) -> None:
        if self._closed or not self._pending:
            return
        items, self._pending = self._pending, []
        for item in items:
            if type(item) is TextChunk:
                item.text = "".join(item.pieces)
                item.pieces = []
        self._last_flush = time.perf_counter()
        self.flushes += 1
        self.batch.emit(items)

    def close(self) -> None:
        """Stop observing (the turn goes on). Safe to call twice."""
        self._closed = True
        self._timer.stop()
        self._pending = []
        if not self._task.done():
            self._task.cancel()


class RuntimeBridge(QObject):
    task_changed = Signal(str)  # a task's state or metadata may have changed
    connection = Signal(str)  # a server's: "connected" or "reconnecting"
    token_refused = Signal()  # a server's: it refused the token (401), revoked since the window connected
    tasks_changed = Signal()  # tasks were created or deleted
    turn_event = Signal(str, object)  # non-delta events of any task
    error = Signal(str)  # an action failed; the text is for a person
    storage_fault = Signal(object)  # an action met a StorageError: the controller offers the way out

    def __init__(self, rt: Runtime | RemoteRuntime, api, server: str | None = None, home: Path | None = None):
        super().__init__()
        self._rt = rt
        self.api = api  # the runtime.api module, for its typed errors
        self.server = server  # a Hearth server's address; None: this computer's data folder
        self.remote = server is not None
        self._home = home
        local = rt if isinstance(rt, api.Runtime) else None

        def service(name: str, what: str):
            return getattr(local, name) if local is not None else LocalOnly(what, api)

        self.chats: Chats = service("chats", "Chats")
        self.deliveries: Deliveries = service("deliveries", "Deliverables")
        self.teams: Teams = service("teams", "Teams")
        self.memory: Memories = service("memory", "Memory")
        self.knowledge: KnowledgeLibrary = service("knowledge", "The knowledge library")
        self.jobs: Jobs = service("jobs", "Background jobs")
        self.models: LocalModels = service("models", "Local models")
        self.providers: Providers = service("providers", "Model providers")
        self.mcp: MCPServers = service("mcp", "MCP servers")
        self.permissions: Permissions = service("permissions", "Permission rules")
        self.skills: Skills = service("skills", "Skills")
        self.backups: Backups = service("backups", "Backups")
        self.changes: Changes = service("changes", "A turn's changes")
        self.wakeups: Wakeups = service("wakeups", "Wake-ups")
        self.state = "connected"  # a server's connection, as `connection` last told it
        if local is None:
            cast("RemoteRuntime", rt).on_state = self._connection_changed
        self._closing = False
        self._settling: set[str] = set()
        self.chat_ids: set[str] = set()  # events carry an owner id: these are chats', not tasks'
        self.assignment_teams: dict[str, str] = {}  # and these are assignments': their team's goal
        self._feed = spawn(self._follow_all(), self.report, long=True)

    # -- plumbing --

    def report(self, exc: BaseException) -> None:
        typed = self.api.HearthError
        # The exception itself, not True: this runs in a done-callback, outside any `except`.
        log.warning("action failed: %s", exc, exc_info=None if isinstance(exc, typed) else exc)
        if isinstance(exc, self.api.StorageError):
            self.storage_fault.emit(exc)
        elif isinstance(exc, self.api.TokenRefused):  # the application asks for a new one
            self.token_refused.emit()
        else:
            self.error.emit(error_text(exc))

    def _connection_changed(self, state: str) -> None:
        self.state = state
        if not self._closing:
            self.connection.emit(state)

    @property
    def where(self) -> str:
        """Where the tasks live, for a person: "This computer" or "server: host:port"."""
        if self.server is None:
            return HERE
        return "server: " + self.server.split("://", 1)[-1]

    def _local(self, what: str) -> Runtime:
        """This computer's runtime, for what only its tasks have; on a server, the sentence that says so."""
        if self.remote:
            raise self.api.ConfigError(f"{what} {LOCAL_ONLY}.")
        return cast("Runtime", self._rt)

    def run(self, coro, owner: QObject | None = None, load: bool = False) -> asyncio.Task:
        """Run an action from a slot; its failure becomes an `error` signal (see util.spawn for `owner`)."""
        return spawn(coro, self.report, owner=owner, load=load)

    def observe(self, task_id: str) -> TaskObserver:
        return TaskObserver(self, task_id)

    def subscribe(self, task_id: str, follow: bool = False) -> AsyncIterator[Event]:
        """A task's events (a `TaskObserver` is what a panel uses)."""
        return self._rt.subscribe(task_id, follow=follow)

    @property
    def settings(self) -> Settings:
        """This computer's settings (the window offers no Settings while on a server)."""
        return self._local("Settings").settings

    @property
    def home(self) -> Path:
        """This computer's data folder (also while on a server: its logs and preferences are there)."""
        return self._home if self._home is not None else self._local("The data folder").home

    async def save_settings(self, data: dict) -> None:
        await self._local("Settings").save_settings(data)

    async def _follow_all(self) -> None:
        async for ev in self._rt.events():
            if self._closing:
                return
            if ev.type == "turn_started" and self.assignment_teams and ev.task_id not in self.chat_ids \
                    and ev.task_id not in self.assignment_teams:
                await self.list_teams()  # a lead may have planned new assignments: know them as a team's
            self.turn_event.emit(ev.task_id, ev)
            if ev.type in _TASK_CHANGES:
                self.task_changed.emit(ev.task_id)
            if ev.type == "turn_ended" and ev.task_id not in self._settling:
                # turn_ended comes right after the commit; the task counts as running until its cleanup.
                self._settling.add(ev.task_id)
                spawn(self._when_idle(ev.task_id), self.report, long=True)

    async def _when_idle(self, task_id: str) -> None:
        try:
            await self._rt.wait_idle(task_id)
        finally:
            self._settling.discard(task_id)
        if not self._closing:
            self.task_changed.emit(task_id)

    async def wait_idle(self, task_id: str) -> None:
        await self._rt.wait_idle(task_id)

    # -- reads --

    async def list_tasks(self) -> list[TaskInfo]:
        return await self._rt.list_tasks()

    async def get_task(self, task_id: str) -> TaskInfo:
        return await self._rt.get_task(task_id)

    async def messages(self, task_id: str, **page) -> list[MessageInfo]:
        return await self._rt.messages(task_id, **page)

    async def turns(self, task_id: str, turn_ids: Iterable[str] | None = None) -> list[dict]:
        return await self._rt.tasks.turns(task_id, turn_ids)

    async def turn_details(self, task_id: str, turn_id: str) -> dict:
        return await self._rt.tasks.turn_details(task_id, turn_id)

    def is_running(self, task_id: str) -> bool:
        return self._rt.tasks.is_running(task_id)

    async def background(self, task_id: str) -> list[dict]:
        return await self._local("Background commands").tasks.background(task_id)

    async def background_output(self, task_id: str, command_id: str, offset: int) -> str:
        return await self._local("Background commands").tasks.background_output(task_id, command_id, offset)

    def running_tasks(self) -> list[str]:
        return self._rt.tasks.running()

    def working_tasks(self) -> list[str]:
        """Tasks a quit would interrupt: a turn running, or a background command (none of a server's)."""
        return [] if self.remote else self._local("Quitting").tasks.working()

    # -- actions --

    async def create_task(self, title: str | None = None, model: str | None = None, approval: str = "ask",
                          planning: bool = False, knowledge: Iterable[str] = (), memory: bool | None = None,
                          network: bool = False) -> TaskInfo:
        """A new task; `memory` None: on, unless the task is a server's (which has none)."""
        info = await self._rt.create_task(title=title or None, model=model or None, approval=approval,
                                         planning=planning, knowledge=tuple(knowledge),
                                         memory=not self.remote if memory is None else memory, network=network)
        self.tasks_changed.emit()
        return info

    async def set_task_sandbox(self, task_id: str, *, network: bool | None = None,
                               unsandboxed_ok: bool | None = None) -> None:
        """A task's command settings (they apply from its next turn); its panel re-reads them."""
        permissions = self._local("A task's command settings").permissions
        await permissions.set_task_sandbox(task_id, network=network, unsandboxed_ok=unsandboxed_ok)
        self.task_changed.emit(task_id)

    async def list_chats(self) -> list:
        if self.remote:
            return []
        chats = await self.chats.list()
        self.chat_ids.update(c.id for c in chats)
        return chats

    async def create_chat(self, model: str | None = None):
        info = await self.chats.create(model=model or None)
        self.chat_ids.add(info.id)
        self.tasks_changed.emit()
        return info

    async def list_teams(self) -> list:
        if self.remote:
            return []
        teams = await self.teams.list()
        self.assignment_teams.update({a.id: t.title for t in teams for a in t.assignments})
        return teams

    async def create_team(self, **spec):
        info = await self.teams.create(**spec)
        self.assignment_teams.update({a.id: info.title for a in info.assignments})
        self.tasks_changed.emit()
        return info

    async def rename_chat(self, chat_id: str, title: str) -> None:
        await self.chats.rename(chat_id, title)
        self.task_changed.emit(chat_id)

    async def delete_chat(self, chat_id: str) -> None:
        await self.chats.delete(chat_id)
        self.tasks_changed.emit()

    async def send(self, task_id: str, text: str, attachments: Iterable[str] = (), queue: bool = False
                   ) -> TurnHandle | Started:
        handle = await self._rt.send(task_id, text, attachments=tuple(attachments), queue=queue)
        self.task_changed.emit(task_id)
        return handle

    async def answer(self, task_id: str, request_id: str, answer: str, remember: bool = False,
                     plan: list[str] | None = None, rule_command: str | None = None) -> TurnHandle | Started:
        handle = await self._rt.answer(task_id, request_id, answer, remember=remember, plan=plan,
                                      rule_command=rule_command)
        self.task_changed.emit(task_id)
        return handle

    async def run_queued(self, task_id: str) -> TurnHandle | None:
        handle = await self._local("Sending a queued message now").tasks.run_queued(task_id)
        self.task_changed.emit(task_id)
        return handle

    async def discard_queued(self, task_id: str, message_id: int) -> bool:
        done = await self._local("Discarding a queued message").tasks.discard_queued(task_id, message_id)
        self.task_changed.emit(task_id)
        return done

    async def continue_task(self, task_id: str) -> TurnHandle:
        """Carry on the last answer where it stopped (interrupted, stopped, failed or cut off at the length
        limit); nothing the person did not type is shown as theirs."""
        handle = await self._local("Continue").tasks.continue_task(task_id)
        self.task_changed.emit(task_id)
        return handle

    async def retry(self, task_id: str) -> TurnHandle:
        handle = await self._local("Retry").tasks.retry(task_id)
        self.task_changed.emit(task_id)
        return handle

    async def edit_last(self, task_id: str, text: str) -> TurnHandle:
        handle = await self._local("Editing a sent message").tasks.edit_last(task_id, text)
        self.task_changed.emit(task_id)
        return handle

    async def fork_task(self, task_id: str, model: str) -> TaskInfo:
        info = await self._local("Another model").tasks.fork(task_id, model)
        self.tasks_changed.emit()
        return info

    async def stop(self, task_id: str) -> None:
        await self._rt.stop(task_id)

    async def stop_background(self, task_id: str, command_id: str) -> bool:
        return await self._local("Background commands").tasks.stop_background(task_id, command_id)

    async def rename(self, task_id: str, title: str) -> None:
        await self._local("Renaming a task").tasks.rename(task_id, title)
        self.task_changed.emit(task_id)

    async def delete(self, task_id: str) -> None:
        await self._local("Deleting a task").tasks.delete(task_id)
        self.tasks_changed.emit()

    # -- where the bridge adds something to a service --

    async def set_api_key(self, name: str, key: str) -> str:
        # The OS keyring may talk D-Bus: keep it off the loop.
        return await asyncio.to_thread(self.providers.set_api_key, name, key)

    async def test_provider(self, provider: dict, api_key: str | None = None) -> list[str]:
        """Models the provider offers. A key typed but not saved yet is stored first: the runtime's
        `providers.test()` resolves keys through api_key_ref only."""
        if api_key:
            provider = dict(provider, api_key_ref=await self.set_api_key(provider["id"], api_key))
        return await self.providers.test(provider)

    async def approve_mcp_server(self, name: str) -> str:
        return await asyncio.to_thread(self.mcp.approve, name)

    async def aclose(self) -> None:
        """Stop following tasks, then shut the runtime down (running turns end `interrupted`)."""
        self._closing = True
        # Subscriptions (the feed, observers of panels still around) hold no database connection: cancel them.
        subscriptions = [t for t in pending_tasks() if t not in pending_tasks(short_only=True)]
        for task in subscriptions:
            task.cancel()
        await asyncio.gather(*subscriptions, return_exceptions=True)
        # Let actions in flight finish (a send must persist what was typed), then cancel slow leftovers, so
        # nothing touches the database after it is closed.
        others = [t for t in pending_tasks(short_only=True) if t is not asyncio.current_task()]
        if others:
            _done, slow = await asyncio.wait(others, timeout=3.0)
            for task in slow:
                task.cancel()
            await asyncio.gather(*slow, return_exceptions=True)
        await self._rt.aclose()
