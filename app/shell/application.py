"""HearthApp: the app's lifecycle around one Runtime — first paint, then the runtime; main window and tray;
close-to-tray; notifications; Quit.

The app never calls `app.quit()`: under qasync, awaiting anything after `aboutToQuit` fails ("Event loop stopped
before Future completed"), and it fires several times. Quit sets `quit_event`; `main` awaits it, then
`shutdown()` closes the windows and awaits `Runtime.aclose()` (running turns end `interrupted`).
The runtime is imported in a worker thread after the first paint: `runtime.api` costs ~1 s to import, and
openai / mcp / llama_cpp stay unimported until a turn needs them (the runtime imports them lazily).
Once the runtime is open and the task list shown, the default model loads in the background
(`bridge.models.preload_default`: a local model's file, and its prompt prefix evaluated or restored from disk),
so the first send answers at once. A problem with it is only logged: the first send reports it with its turn.
Shutdown cancels it first (the evaluation stops at its next piece). SQLite's check of the database starts in the
background then too (`verify_database`, at most once a day): damage it finds shows the damaged-database page.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, QSettings, QTimer, Signal
from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import QApplication, QMessageBox

from runtime.paths import data_folder

from ..core.bridge import RuntimeBridge
from ..core.prefs import Prefs
from ..core.util import close_async_generators_on_the_loop, error_text, spawn
from ..settings.window import SettingsWindow
from ..widgets import dialogs, theme
from .connect_dialog import ConnectDialog
from .main_window import MainWindow
from .notify import Notifier
from .startup_problems import StartupProblems
from .tasks_place import TasksPlace
from .tray import Tray, tray_available

if TYPE_CHECKING:
    from runtime.api import Runtime, TaskInfo
    from runtime.events import Event

    from ..conversation.composer import Composer

log = logging.getLogger(__name__)

TRAY_NOTE = ("Hearth keeps working in the background while turns run. Open it again from the tray icon; quit "
             "from the tray menu.")


class HearthApp(StartupProblems, TasksPlace, QObject):
    notified = Signal(str, str, str)  # task id, title, text

    def __init__(self, home: str | Path | None = None, *, providers: dict | None = None, tools=(),
                 use_tray: bool = True, prefs: Prefs | None = None, preload_model: bool = True):
        super().__init__()
        self.home = Path(home) if home else None
        self._providers = providers
        self._tools = tools
        if prefs is None:
            folder = data_folder(self.home)
            with contextlib.suppress(OSError):  # the runtime makes it too, and reports it when it cannot
                folder.mkdir(parents=True, exist_ok=True)
            earlier = QSettings("Hearth", "Hearth") if self.home is None and "HEARTH_HOME" not in os.environ else None
            prefs = Prefs(folder / "app.ini", carried_from=earlier)
        self.prefs = prefs
        self.use_tray = use_tray
        self.preload_model = preload_model  # load the default model at window open (off for UI-only tests)
        self.model_preload: asyncio.Task | None = None
        self.quit_event = asyncio.Event()
        self.ready = asyncio.Event()
        self.window: MainWindow | None = None
        self.tray: Tray | None = None
        self.rt: Runtime | None = None
        self.bridge: RuntimeBridge | None = None
        self.settings_window: SettingsWindow | None = None
        self.connect_window: ConnectDialog | None = None
        self.notifications: list[tuple[str, str, str]] = []
        self.close_choice: QMessageBox | None = None  # the "keep working?" question, while it is open
        self.notifier = Notifier(fallback=self._tray_notify)
        self.startup_error: str | None = None
        self._problem: tuple | None = None  # (runtime.api module or None, the exception) while not started
        self.fault_box = None  # the box saying a storage fault happened during the session, while open
        self._titles: dict[str, str] = {}
        self.view_states: dict[str, tuple] = {}  # task id -> where its conversation was scrolled, open cards
        self.drafts: dict[str, dict] = self.prefs.drafts  # task or chat id -> typed but not sent, across restarts
        self._waiting: set[str] = set()
        self._last_notified: str | None = None
        self._wake_set: dict[str, str] = {}  # task id -> what its wake-up waits for, from the turn that set it
        self._closing = False
        # While the window is hidden nobody reloads the task list: the tray refreshes its own summary.
        self._tray_refresh = QTimer(self)
        self._tray_refresh.setSingleShot(True)
        self._tray_refresh.setInterval(250)
        self._tray_refresh.timeout.connect(self._refresh_tray)

    # -- start --

    async def start(self) -> None:
        close_async_generators_on_the_loop()
        theme.apply(self.prefs.theme)
        hints = QApplication.styleHints()
        if hasattr(hints, "colorSchemeChanged"):  # follow the desktop when the theme is "system"
            hints.colorSchemeChanged.connect(self._scheme_changed)
        window = self.show_main()
        painted = asyncio.get_running_loop().create_future()
        window.painted.connect(lambda: None if painted.done() else painted.set_result(None))
        try:
            await asyncio.wait_for(painted, 2.0)
        except TimeoutError:
            log.warning("no paint event within 2 s; opening the runtime anyway")
        if self.use_tray and tray_available():
            self.tray = Tray(self._running_titles)
            self.tray.open_requested.connect(self.show_main)
            self.tray.quit_requested.connect(lambda: self.request_quit(ask=True))
            self.tray.task_requested.connect(self.open_task)
            self.tray.message_clicked.connect(self._open_notified)
        await self.open_runtime()

    async def open_runtime(self) -> None:
        api = None
        try:
            api = await asyncio.to_thread(importlib.import_module, "runtime.api")
            self.rt = await api.Runtime.open(self.home, providers=self._providers, tools=self._tools)
        except Exception as exc:
            typed = api is not None and isinstance(exc, api.HearthError)
            log.warning("could not open the runtime: %s", exc, exc_info=not typed)
            self.startup_error = error_text(exc)
            self._problem = (api, exc)
            self._show_problem()
            self.ready.set()
            return
        self.startup_error = None
        self._problem = None
        self.rt.wakeups.start()  # the app owns the data folder: its tasks wake up here
        bridge = RuntimeBridge(self.rt, api)
        await self._attach(bridge)
        if self.preload_model:  # after the first paint and the task list: it must delay neither
            self.model_preload = spawn(bridge.models.preload_default(), long=True)
        spawn(self.verify_database(bridge))
        self.ready.set()

    async def _attach(self, bridge: RuntimeBridge) -> None:
        self.bridge = bridge
        bridge.turn_event.connect(self._on_turn_event)
        bridge.task_changed.connect(self._task_changed)
        bridge.storage_fault.connect(self.storage_fault)
        if self.window is not None:
            self.window.attach(bridge)
            await self.window.loading

    # -- windows --

    def show_main(self) -> MainWindow:
        if self.window is None:
            self.window = MainWindow(self)
            geometry = self.prefs.geometry
            if geometry is not None:
                self.window.restoreGeometry(geometry)
            if self.bridge is not None:
                self.window.attach(self.bridge)
            else:
                self._show_problem()
        self.window.show()
        self.window.raise_()
        self.window.activateWindow()
        return self.window

    def open_task(self, task_id: str) -> None:
        self.show_main().open_task(task_id)

    def hide_window(self) -> None:
        """Dispose the main window (panels unsubscribe; turns keep running). `show_main()` builds a new one."""
        window, self.window = self.window, None
        self.connect_window = None  # a dialog of the window: it goes with it
        if window is None:
            return
        self.prefs.geometry = window.saveGeometry()
        window.dispose()
        window.hide()
        window.deleteLater()

    def on_main_close(self, event: QCloseEvent) -> None:
        if self._closing:
            event.accept()
            return
        event.ignore()
        running = self.bridge.working_tasks() if self.bridge else []
        if running and self.tray is not None:
            self.hide_window()
            if not self.prefs.tray_note_shown:
                self.prefs.tray_note_shown = True
                self.tray.notify("Hearth is still working", TRAY_NOTE)
            return
        if running:  # no tray (stock GNOME): ask, keeping the work going by default
            n = len(running)
            self.close_choice = dialogs.choose(
                self.window, "Keep working?", f"{n} task{'s are' if n > 1 else ' is'} still working.",
                [("Keep running in the background", self.hide_window), ("Quit", self._quit_saving_settings)],
                informative="Open Hearth again to get back to it; you will be notified when a task ends or "
                            "needs you. Quitting marks running turns and background commands interrupted; you can "
                            "continue them later.")
            return
        self.request_quit(ask=True)

    def open_settings(self, page: str = "") -> SettingsWindow | None:
        """The Settings window, raised if open; `page` ("permissions", "jobs", "models") shows that page. None on a
        server's tasks: Settings change this computer's runtime."""
        if self.bridge is None or self.bridge.remote:
            return None
        if self.settings_window is not None:
            self.settings_window.show_page(page)
            self.settings_window.raise_()
            return self.settings_window
        win = SettingsWindow(self.bridge, self.prefs, self.window)
        win.theme_changed.connect(theme.apply)
        win.saved.connect(self._settings_saved)
        win.enter_sends_changed.connect(self._enter_sends)
        win.destroyed.connect(lambda: setattr(self, "settings_window", None))
        self.settings_window = win
        win.show_page(page)
        win.show()
        return win

    def _settings_saved(self) -> None:
        if self.window is not None:
            self.window.refresh_welcome()

    def _scheme_changed(self, *_args: object) -> None:
        if self.prefs.theme == "system":
            theme.apply("system")

    def use_server(self, preset_id: str, models: list[str]) -> None:
        """Set up a detected local server: Settings opens with it added and its first model as the default."""
        win = self.open_settings()
        if win is None:
            return
        win.tabs.setCurrentWidget(win.models)
        win.models.setCurrentWidget(win.providers)
        entry = win.providers.add_preset(preset_id, models)
        if models:
            win.providers.default_model.setCurrentText(f"{entry['id']}/{models[0]}")

    def _enter_sends(self, on: bool) -> None:
        if self.window is not None and self.window.panel is not None:
            composer = getattr(self.window.panel, "composer", None)  # a team's board has none
            if composer is not None:
                composer.set_enter_sends(on)

    # -- tasks, tray, notifications --

    def tasks_updated(self, tasks: list[TaskInfo]) -> None:
        self._titles = {t.id: t.title or "New task" for t in tasks}
        self._waiting = {t.id for t in tasks if t.state == "waiting"}
        if self.tray is not None and self.bridge is not None:
            self.tray.set_busy(len(self.bridge.running_tasks()), len(self._waiting))

    def _task_changed(self, _task_id: str) -> None:
        if self.tray is not None and self.window is None:
            self._tray_refresh.start()

    def _refresh_tray(self) -> None:
        bridge = self.bridge
        if bridge is None or self._closing:
            return

        async def go() -> None:
            self.tasks_updated(await bridge.list_tasks())

        bridge.run(go())

    def _open_notified(self) -> None:
        if self._last_notified:
            self.open_task(self._last_notified)
        else:
            self.show_main()

    def _running_titles(self) -> list[tuple[str, str]]:
        if self.bridge is None:
            return []
        return [(t, self._titles.get(t, "Task")) for t in self.bridge.running_tasks()]

    def _visible(self, task_id: str) -> bool:
        return self.window is not None and self.window.is_task_visible(task_id)

    def _on_turn_event(self, task_id: str, ev: Event) -> None:
        # A chat is a quick exchange the person is looking at: only tasks, which work on their own, notify, and
        # a team's assignment when it needs the person.
        if ev.type == "activity" and ev.what == "wake_set":  # its turn ends waiting for a wake-up: said then
            self._wake_set[task_id] = ev.detail
        waits = self._wake_set.pop(task_id, None) if ev.type == "turn_ended" else None
        if self._closing or self.bridge is None or self._visible(task_id) or task_id in self.bridge.chat_ids:
            return
        team = self.bridge.assignment_teams.get(task_id)
        if team is not None:
            if ev.type == "input_requested":
                self.notify(task_id, f"The team “{team}” is waiting for you", "Open Hearth to answer.")
            return
        title = self._titles.get(task_id, "A task")
        if ev.type == "activity" and ev.what == "woke":
            self.notify(task_id, f"{title} woke up", ev.detail)
        elif ev.type == "turn_ended" and ev.reason == "completed" and waits:
            self.notify(task_id, f"{title} will carry on by itself", waits + ".")
        elif ev.type == "input_requested":
            what = f"Allow {ev.tool_name}?" if ev.kind == "approval" else ev.prompt
            self.notify(task_id, f"{title} is waiting for you", what)
        elif ev.type == "turn_ended" and ev.reason in ("completed", "error"):
            if ev.reason == "completed":
                self.notify(task_id, f"{title} is done", "Open Hearth to see the answer.")
            else:
                self.notify(task_id, f"{title} failed", ev.error or "The turn ended with an error.")

    def _tray_notify(self, title: str, text: str) -> None:
        """Where a notification goes when the desktop has no notification service."""
        if self.tray is not None:
            self.tray.notify(title, text)

    def notify(self, task_id: str, title: str, text: str) -> None:
        self.notifications.append((task_id, title, text))
        self._last_notified = task_id
        self.notified.emit(task_id, title, text)
        self.notifier.send(title, text, on_clicked=lambda: self.open_task(task_id))

    # -- quit --

    def request_quit(self, ask: bool = True) -> QMessageBox | None:
        """Quit; with `ask`, confirm first when turns are running. Signals (SIGTERM/SIGINT) never ask."""
        running = self.bridge.working_tasks() if self.bridge else []
        if ask and running:
            n = len(running)
            return dialogs.confirm(
                self.window, "Quit Hearth?", f"{n} task{'s are' if n > 1 else ' is'} still working.", "Quit",
                self._quit_saving_settings,
                informative="Running turns and background commands will be stopped and marked interrupted; you "
                            "can continue them later.")
        if ask:
            self._quit_saving_settings()
        else:
            self.quit_event.set()
        return None

    def _quit_saving_settings(self) -> None:
        """Quit, unless Settings holds unsaved changes: then they are saved or discarded first, as on closing
        Settings itself (a person's quit never drops them silently)."""
        win = self.settings_window
        if win is not None and win.dirty:
            win.ask_before_quit(self.quit_event.set)
            return
        self.quit_event.set()

    def keep_draft(self, owner_id: str, draft: dict | None) -> None:
        """Remember what the person typed in a task or chat and did not send (saved with the preferences)."""
        if draft is None and owner_id not in self.drafts:
            return
        if draft is None:
            del self.drafts[owner_id]
        else:
            self.drafts[owner_id] = draft
        self.prefs.drafts = self.drafts

    def restore_draft(self, owner_id: str, composer: Composer) -> None:
        draft = self.drafts.get(owner_id)
        if isinstance(draft, dict):
            composer.restore_draft(draft)

    async def shutdown(self) -> None:
        if self._closing:
            return
        self._closing = True
        self._tray_refresh.stop()
        panel = self.window.panel if self.window is not None else None
        if panel is not None and hasattr(panel, "composer"):  # the open task's or chat's unsent text
            self.keep_draft(panel.task_id, panel.composer.draft())
        self.prefs.save()
        if self.settings_window is not None:
            self.settings_window.close_without_asking()
        self.hide_window()
        if self.tray is not None:
            self.tray.hide()
        if self.model_preload is not None:
            self.model_preload.cancel()
            await asyncio.gather(self.model_preload, return_exceptions=True)
        if self.bridge is not None:
            await self.bridge.aclose()
        elif self.rt is not None:
            await self.rt.aclose()
