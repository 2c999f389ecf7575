"""The main window: the sidebar (Tasks and Chats), the open task's or chat's panel (one at a time; a panel is
disposable), menus. The task, chat and team actions are in shell/task_actions.py, shell/chat_actions.py and
shell/team_actions.py.

It is only a viewer: closing it never stops a turn (the controller decides between hiding to the tray and
quitting). It paints before the runtime is even imported, then `attach()` brings the tasks in.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from PySide6.QtCore import QTimer, Signal
from PySide6.QtGui import QAction, QCloseEvent, QKeySequence, QPaintEvent
from PySide6.QtWidgets import QInputDialog, QMainWindow, QMenu, QMessageBox, QSplitter, QStackedWidget

from ..chats.panel import ChatPanel
from ..core.bridge import RuntimeBridge
from ..core.logs import log_folder
from ..tasks.panel import TaskPanel
from ..teams.panel import TeamPanel
from ..widgets import dialogs
from ..widgets.icons import app_icon
from .chat_actions import ChatActions
from .problem_page import ProblemPage
from .sidebar import TaskSidebar
from .task_actions import TaskActions
from .team_actions import TeamActions
from .welcome import WelcomePage

if TYPE_CHECKING:
    from runtime.api import ChatInfo, TaskInfo, TeamInfo

    from .window_host import Controller

# What a server's tasks cannot have (app/core/bridge.py LocalOnly): hidden while the window shows a server's.
LOCAL_ONLY_ACTIONS = ("New Chat", "New Team…", "Export Task as Markdown…", "Export Task as JSON…",
                      "Open Workspace Folder", "Settings…", "Rename…", "Delete…")


class MainWindow(TaskActions, ChatActions, TeamActions, QMainWindow):
    painted = Signal()

    def __init__(self, ctl: Controller):
        super().__init__()
        self.ctl = ctl
        self._bridge: RuntimeBridge | None = None  # attach()
        self.panel: TaskPanel | ChatPanel | TeamPanel | None = None
        self.tasks: dict[str, TaskInfo] = {}
        self.chats: dict[str, ChatInfo] = {}
        self.teams: dict[str, TeamInfo] = {}
        self._painted = False
        self.disposed = False
        self.setWindowTitle("Hearth")
        self.setWindowIcon(app_icon())
        self.resize(1180, 780)
        self.sidebar = TaskSidebar()
        self.sidebar.setEnabled(False)
        self.stack = QStackedWidget()
        self.welcome = WelcomePage()
        self.stack.addWidget(self.welcome)
        self.stack.currentChanged.connect(lambda _i: self.show_title())
        self.problem = ProblemPage()
        self.stack.addWidget(self.problem)
        split = QSplitter()
        split.addWidget(self.sidebar)
        split.addWidget(self.stack)
        split.setStretchFactor(1, 1)
        split.setSizes([270, 910])
        split.setChildrenCollapsible(False)
        self.setCentralWidget(split)
        self._menus()
        self._reload = QTimer(self)
        self._reload.setSingleShot(True)
        self._reload.setInterval(60)
        self._reload.timeout.connect(self._do_reload)
        self._reloads = 0
        self._reload_landed: asyncio.Future | None = None  # the newest reload's landing

    def _menus(self) -> None:
        def act(menu: QMenu, text: str, slot: Callable[[], object], shortcut: str | None = None) -> QAction:
            a = menu.addAction(text)
            a.triggered.connect(slot)
            if shortcut:
                a.setShortcut(QKeySequence(shortcut))
            self.actions_by_name[text] = a
            return a

        # Explicit keys: the StandardKey ones (New, Quit, Preferences) are empty on some Linux platforms.
        self.actions_by_name: dict[str, QAction] = {}
        bar = self.menuBar()
        f = bar.addMenu("&File")
        act(f, "New Task…", lambda: self.new_task(), "Ctrl+N")
        act(f, "New Chat", self.new_chat, "Ctrl+Shift+N")
        act(f, "New Team…", self.new_team)
        f.addSeparator()
        act(f, "Export Task as Markdown…", lambda: self.export("md"))
        act(f, "Export Task as JSON…", lambda: self.export("json"))
        f.addSeparator()
        act(f, "Open Workspace Folder", self.open_workspace)
        act(f, "Open Data Folder", self.open_data_folder)
        f.addSeparator()
        act(f, "Connect to a Server…", lambda: self._ready() and self.ctl.connect_dialog())
        act(f, "Use This Computer's Tasks", lambda: self.ctl.use_this_computer()).setVisible(False)
        f.addSeparator()
        act(f, "Settings…", lambda: self._ready() and self.ctl.open_settings(), "Ctrl+,")
        act(f, "Close Window", self.close, "Ctrl+W")
        act(f, "Quit", lambda: self.ctl.request_quit(ask=True), "Ctrl+Q")
        t = bar.addMenu("&Task")
        act(t, "Rename…", lambda: self._rename_current(), "F2")
        act(t, "Delete…", lambda: self._delete_current())
        act(t, "Stop", self.stop_current, "Ctrl+.")
        t.addSeparator()
        act(t, "Go to First Message", lambda: self._conversation_do("jump_to_start"), "Alt+Home")
        act(t, "Go to Latest Message", lambda: self._conversation_do("jump_to_latest"), "Alt+End")
        h = bar.addMenu("&Help")
        act(h, "About Hearth", self.about)
        self._task_actions = [self.actions_by_name[n] for n in (
            "Export Task as Markdown…", "Export Task as JSON…", "Open Workspace Folder", "Rename…", "Delete…",
            "Stop")]
        self._enable_task_actions()

    def _conversation_do(self, what: str) -> None:
        conversation = getattr(self.panel, "conversation", None)  # a team's board may have none open
        if conversation is not None:
            getattr(conversation, what)()

    def show_problem(self, title: str, text: str, actions: list, note: str = "") -> None:
        self.problem.show_problem(title, text, actions, note)
        self.stack.setCurrentWidget(self.problem)

    @property
    def bridge(self) -> RuntimeBridge:
        """The runtime's client, once attached: the lists, panels and actions come after that (`_ready`)."""
        if self._bridge is None:
            raise RuntimeError("the window has no runtime attached yet")
        return self._bridge

    def _ready(self) -> bool:
        """Actions that need the runtime say why they cannot run instead of failing."""
        if self._bridge is not None:
            return True
        self.stack.setCurrentWidget(self.problem)
        self.statusBar().showMessage("Hearth has not started yet: " + (self.ctl.startup_error or "starting…"),
                                     10_000)
        return False

    def about(self) -> QMessageBox:
        return dialogs.about(self, str(self._bridge.home if self._bridge else ""), str(log_folder(self.ctl.home)))

    def _enable_task_actions(self) -> None:
        task_only = ("Export Task as Markdown…", "Export Task as JSON…", "Open Workspace Folder")
        for a in self._task_actions:
            a.setEnabled(self.panel is not None and (isinstance(self.panel, TaskPanel) or a.text() not in task_only))

    def _rename_current(self) -> QInputDialog | None:
        if isinstance(self.panel, TeamPanel):
            return None
        if isinstance(self.panel, ChatPanel):
            return self.rename_chat(self.panel.chat_id)
        return self.rename_task(self.current_task())

    def _delete_current(self) -> QMessageBox | asyncio.Task | None:
        """The question (a task's comes once its deliverables are counted: the asyncio task that asks)."""
        if isinstance(self.panel, TeamPanel):
            return self.delete_team(self.panel.team_id)
        if isinstance(self.panel, ChatPanel):
            return self.delete_chat(self.panel.chat_id)
        return self.delete_task(self.current_task())

    # -- runtime attached --

    def attach(self, bridge: RuntimeBridge) -> None:
        self._bridge = bridge
        self.stack.setCurrentWidget(self.welcome)
        self.sidebar.setEnabled(True)
        self.sidebar.task_selected.connect(self.open_task)
        self.sidebar.chat_selected.connect(self.open_chat)
        self.sidebar.new_requested.connect(lambda: self.new_task())
        self.sidebar.new_chat_requested.connect(self.new_chat)
        self.sidebar.team_selected.connect(self.open_team)
        self.sidebar.new_team_requested.connect(self.new_team)
        self.sidebar.rename_requested.connect(
            lambda rid: self.rename_chat(rid) if self.sidebar.mode == "chats" else self.rename_task(rid))
        self.sidebar.delete_requested.connect(lambda rid: {"chats": self.delete_chat, "teams": self.delete_team}.get(
            self.sidebar.mode, self.delete_task)(rid))
        self.sidebar.settings_requested.connect(lambda: self.ctl.open_settings())
        self.welcome.new_task.connect(self.new_task)
        self.welcome.use_server.connect(self.ctl.use_server)
        # Bound methods only: a lambda would outlive this (disposable) window on the long-lived bridge.
        bridge.task_changed.connect(self._task_changed)
        bridge.tasks_changed.connect(self._tasks_changed)
        bridge.turn_event.connect(self._team_event)
        bridge.error.connect(self._show_error)
        bridge.connection.connect(self._connection)
        self._show_where(bridge)
        self.refresh_welcome()
        self.loading = bridge.run(self._first_load())

    def _show_where(self, bridge: RuntimeBridge) -> None:
        """Mark where the tasks live; on a server, hide what only this computer's tasks have (README, "A Hearth
        server in the window")."""
        self.sidebar.set_where(bridge.where, bridge.server, reconnecting=bridge.state == "reconnecting")
        for name in LOCAL_ONLY_ACTIONS:
            self.actions_by_name[name].setVisible(not bridge.remote)
        self.actions_by_name["Use This Computer's Tasks"].setVisible(bridge.remote)

    def _connection(self, state: str) -> None:
        """A server's connection dropped or came back: the mark says so; the panel's stream resumes by itself."""
        if self._bridge is not None and not self.disposed:
            self.sidebar.set_where(self._bridge.where, self._bridge.server, reconnecting=state == "reconnecting")
            if state == "connected":
                self._reload.start()  # what changed while it was down

    def refresh_welcome(self) -> None:
        if self.bridge.remote:
            self.welcome.set_server(self.bridge.where, has_tasks=bool(self.tasks))
            return
        model = self.bridge.settings.default_model
        self.welcome.set_starting(False, model, model.startswith("builtin/"), has_tasks=bool(self.tasks))

    async def _first_load(self) -> None:
        """Tasks, then the task that was open last (also after the window was closed and reopened)."""
        await self.reload_tasks()
        last = self.ctl.prefs.last_task
        if not self.disposed and self.panel is None and last in self.tasks:
            self.open_task(last)
        await self._detect_servers()

    async def _detect_servers(self) -> None:
        """Offer a local model server (Ollama, LM Studio, …) that runs but is not configured yet."""
        if self.bridge.remote:  # a server's tasks use the server's models
            return
        try:
            found = await self.bridge.providers.detect_local_servers()
        except Exception:  # only a hint: never let it bother the person
            return
        configured = {p.base_url for p in self.bridge.settings.providers if p.base_url}
        presets = {p.id: p for p in self.bridge.providers.presets()}
        for pid, models in found.items():
            preset = presets.get(pid)
            if preset is not None and models and preset.base_url not in configured and not self.disposed:
                self.welcome.set_detected(pid, preset.label, models)
                return

    def _do_reload(self) -> None:
        if self._bridge is not None and not self.disposed:
            self._bridge.run(self.reload_tasks())

    def _show_error(self, text: str) -> None:
        self.statusBar().showMessage(text, 10_000)

    def _tasks_changed(self) -> None:
        self._reload.start()

    async def reload_tasks(self) -> None:
        # Reloads can finish out of order; only the newest request's result may land (an older list, read
        # before a task was created, would otherwise close that task's new panel). A superseded reload returns
        # once the newest has landed, so its caller (opening a task just created) sees the newer lists.
        self._reloads += 1
        mine = self._reloads
        landed = self._reload_landed = asyncio.get_running_loop().create_future()
        try:
            tasks = await self.bridge.list_tasks()
            chats = await self.bridge.list_chats()
            teams = await self.bridge.list_teams()
            if mine != self._reloads and not self.disposed:
                await asyncio.shield(self._reload_landed)
                return
            if not self.disposed:
                self._land(tasks, chats, teams)
        finally:
            if not landed.done():
                landed.set_result(None)

    def _land(self, tasks: list, chats: list, teams: list) -> None:
        self.tasks = {t.id: t for t in tasks}
        self.chats = {c.id: c for c in chats}
        self.teams = {t.id: t for t in teams}
        running = set(self.bridge.running_tasks())
        self.sidebar.set_tasks(tasks, running)
        self.sidebar.set_chats(chats, running)
        self.sidebar.set_teams(teams)
        owners = self.chats if isinstance(self.panel, ChatPanel) else self.teams if isinstance(
            self.panel, TeamPanel) else self.tasks
        if self.panel is None:
            self.refresh_welcome()
        elif self.panel.task_id not in owners:
            self.close_panel()
        self.ctl.tasks_updated(tasks)

    def _task_changed(self, task_id: str) -> None:
        self._reload.start()
        if isinstance(self.panel, TeamPanel):
            if self.panel.owns(task_id):
                self.panel.changed(task_id)
        elif self.panel is not None and self.panel.task_id == task_id:
            self.bridge.run(self.panel.sync())

    # -- panels --

    def current_task(self) -> str | None:
        return self.panel.task_id if isinstance(self.panel, TaskPanel) else None

    def open_task(self, task_id: str) -> TaskPanel | None:
        if isinstance(self.panel, TaskPanel) and self.panel.task_id == task_id:
            return self.panel
        info = self.tasks.get(task_id)
        if info is None or self.disposed:
            return None
        self.close_panel(select_none=False)
        self.panel = TaskPanel(self.bridge, info, self.ctl.prefs.enter_sends, self.ctl.view_states.get(task_id))
        self.panel.title_changed.connect(self._panel_title_changed)
        self.panel.settings_requested.connect(self.ctl.open_settings)
        self.panel.task_forked.connect(lambda tid: self.bridge.run(self._open_new(tid)))
        self.stack.addWidget(self.panel)
        self.stack.setCurrentWidget(self.panel)
        self.sidebar.set_mode("tasks")
        self.sidebar.select_chat(None)
        self.sidebar.select(task_id)
        self.ctl.prefs.last_task = task_id
        self._enable_task_actions()
        self.ctl.restore_draft(task_id, self.panel.composer)
        self.panel.focus_composer()
        return self.panel

    def show_title(self) -> None:
        """The window is named after the open task, chat or team, as desktop apps name it after the document."""
        shown = self.stack.currentWidget()
        text = shown.title.text() if isinstance(shown, TaskPanel | ChatPanel | TeamPanel) else ""
        self.setWindowTitle(f"{text} — Hearth" if text else "Hearth")

    def _panel_title_changed(self, _title: str) -> None:
        self._reload.start()  # the sidebar shows it
        self.show_title()

    def close_panel(self, select_none: bool = True) -> None:
        """Dispose the panel; its turn keeps running."""
        if self.panel is None:
            return
        panel, self.panel = self.panel, None
        if panel.loaded.is_set() and not isinstance(panel, TeamPanel):  # scroll and open cards come back
            self.ctl.view_states[panel.task_id] = panel.view_state()
        if not isinstance(panel, TeamPanel):  # and what was typed but not sent
            self.ctl.keep_draft(panel.task_id, panel.composer.draft())
        panel.close_panel()
        self.stack.removeWidget(panel)
        panel.deleteLater()
        self.stack.setCurrentWidget(self.welcome)
        if select_none:
            self.sidebar.select(None)
            self.sidebar.select_chat(None)
            self.sidebar.select_team(None)
        self._enable_task_actions()

    def is_task_visible(self, task_id: str) -> bool:
        return (self.isVisible() and not self.isMinimized() and self.panel is not None
                and self.panel.task_id == task_id)

    # -- task actions: shell/task_actions.py --

    def stop_current(self) -> None:
        if isinstance(self.panel, TeamPanel):
            self.bridge.run(self.bridge.teams.stop(self.panel.team_id))
        elif isinstance(self.panel, ChatPanel):
            self.panel.stop()
        elif self.panel is not None:
            self.bridge.run(self.bridge.stop(self.panel.task_id))

    def open_data_folder(self) -> None:
        if self._ready():
            dialogs.open_path(self, self.bridge.home)

    # -- window --

    def paintEvent(self, event: QPaintEvent) -> None:
        super().paintEvent(event)
        if not self._painted:
            self._painted = True
            self.painted.emit()

    def closeEvent(self, event: QCloseEvent) -> None:
        self.ctl.on_main_close(event)

    def dispose(self) -> None:
        """Stop listening and drop the panel; the window is about to be deleted."""
        self.disposed = True
        self._reload.stop()
        if (bridge := self._bridge) is not None:
            for signal, slot in ((bridge.task_changed, self._task_changed), (bridge.tasks_changed, self._tasks_changed),
                                 (bridge.turn_event, self._team_event), (bridge.error, self._show_error),
                                 (bridge.connection, self._connection)):
                try:
                    signal.disconnect(slot)
                except (RuntimeError, TypeError):
                    pass
        self.close_panel(select_none=False)
