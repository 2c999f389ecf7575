"""What the main window's action mixins (task_actions, chat_actions, team_actions) use of the window, declared for
mypy. The mixins subclass `WindowHost` only while type checking (`if TYPE_CHECKING`); at run time they mix into
MainWindow, which defines all of it. Nothing imports this module at run time."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QMainWindow, QStackedWidget

from runtime.api import ChatInfo, TaskInfo, TeamInfo

from ..chats.panel import ChatPanel
from ..core.bridge import RuntimeBridge
from ..tasks.panel import TaskPanel
from ..teams.panel import TeamPanel
from .application import HearthApp
from .sidebar import TaskSidebar


class WindowHost(QMainWindow):
    ctl: HearthApp
    bridge: RuntimeBridge  # None until the runtime is attached: the actions check `_ready()` first
    panel: TaskPanel | ChatPanel | TeamPanel | None
    tasks: dict[str, TaskInfo]
    chats: dict[str, ChatInfo]
    teams: dict[str, TeamInfo]
    sidebar: TaskSidebar
    stack: QStackedWidget
    disposed: bool
    _reload: QTimer

    _ready: Callable[[], bool]
    reload_tasks: Callable[[], Awaitable[None]]
    open_task: Callable[[str], TaskPanel | None]
    close_panel: Callable[..., None]
    show_title: Callable[[], None]
    _panel_title_changed: Callable[[str], None]
    _enable_task_actions: Callable[[], None]
    _open_new: Callable[[str], Awaitable[None]]
