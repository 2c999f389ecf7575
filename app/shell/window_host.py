"""What the main window's action mixins (task_actions, chat_actions, team_actions) use of the window, and what they
and the window use of the application controller, as Protocols: they name what they need instead of importing
MainWindow or HearthApp (which imports MainWindow, which mixes the actions in: a cycle, if only for the type checker).

The mixins subclass `ActionsBase` only while type checking (`if TYPE_CHECKING`); at run time they mix into
MainWindow, which has all of it. Nothing imports this module at run time."""

from __future__ import annotations

from collections.abc import Awaitable
from pathlib import Path
from typing import Protocol

from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import QMainWindow, QStackedWidget

from runtime.api import ChatInfo, TaskInfo, TeamInfo

from ..chats.panel import ChatPanel
from ..conversation.composer import Composer
from ..core.bridge import RuntimeBridge
from ..core.prefs import Prefs
from ..tasks.panel import TaskPanel
from ..teams.panel import TeamPanel
from .sidebar import TaskSidebar


class Controller(Protocol):
    """What the main window and its actions use of the application controller (shell/application.py)."""

    home: Path | None
    prefs: Prefs
    view_states: dict[str, tuple]
    startup_error: str | None

    def open_settings(self, page: str = "") -> object: ...
    def keep_draft(self, owner_id: str, draft: dict | None) -> None: ...
    def restore_draft(self, owner_id: str, composer: Composer) -> None: ...
    def use_server(self, preset_id: str, models: list[str]) -> None: ...
    def connect_dialog(self) -> object: ...
    def use_this_computer(self) -> None: ...
    def tasks_updated(self, tasks: list[TaskInfo]) -> None: ...
    def on_main_close(self, event: QCloseEvent) -> None: ...
    def request_quit(self, ask: bool = True) -> object: ...


class WindowHost(Protocol):
    """What the actions use of the main window besides what every QMainWindow has."""

    ctl: Controller
    panel: TaskPanel | ChatPanel | TeamPanel | None
    tasks: dict[str, TaskInfo]
    chats: dict[str, ChatInfo]
    teams: dict[str, TeamInfo]
    sidebar: TaskSidebar
    stack: QStackedWidget
    disposed: bool

    @property
    def bridge(self) -> RuntimeBridge: ...  # only once the runtime is attached: the actions check `_ready()`

    def _ready(self) -> bool: ...
    def reload_tasks(self) -> Awaitable[None]: ...
    def open_task(self, task_id: str) -> TaskPanel | None: ...
    def close_panel(self, select_none: bool = True) -> None: ...
    def _panel_title_changed(self, _title: str) -> None: ...
    def _enable_task_actions(self) -> None: ...
    def _open_new(self, task_id: str) -> Awaitable[None]: ...


class ActionsBase(QMainWindow, WindowHost):
    """The action mixins are checked as a QMainWindow (they parent dialogs on it) that has WindowHost."""

    # Declared again: the chat and team actions assign it, and mypy would take their assignment as its definition.
    panel: TaskPanel | ChatPanel | TeamPanel | None
