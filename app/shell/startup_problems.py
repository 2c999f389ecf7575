"""What the app offers when the runtime cannot open: the page's ways out, by what went wrong (a broken
settings.json, a full disk, a damaged database, a folder it cannot write). Each works without a runtime: they
use only runtime.api's static helpers (`Runtime.reset_settings`, `Backups`), then try to open again. Mixed into
`HearthApp`.

The same faults during a session (`storage_fault`), and damage that the database check after the start finds
(`verify_database`): a full disk or a database that cannot be reached now may pass, so a box says what happened
and everything stays as it is (an input that could not be saved is back in its box). A damaged or read-only
database cannot go on: the runtime closes (running turns end interrupted, as far as anything can be written) and
the window shows the page with its ways out, as at start."""

from __future__ import annotations

import asyncio
import importlib
import logging
import time
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog, QMessageBox

from ..core.bridge import RuntimeBridge
from ..core.util import error_text, spawn
from ..widgets import dialogs

if TYPE_CHECKING:
    from runtime.api import Runtime, StorageError

    from .main_window import MainWindow

log = logging.getLogger(__name__)


class StartupProblems:
    home: Path | None
    rt: Runtime | None
    window: MainWindow | None
    quit_event: asyncio.Event
    _problem: tuple[ModuleType | None, BaseException] | None  # (runtime.api, if it was imported; what failed)
    bridge: RuntimeBridge | None
    startup_error: str | None
    fault_box: QMessageBox | None

    if TYPE_CHECKING:  # HearthApp's own, which mixes this in
        def show_main(self) -> MainWindow: ...
        def hide_window(self) -> None: ...
        async def open_runtime(self) -> None: ...

    def _show_problem(self) -> None:
        """Say what is wrong and offer the ways out; every one of them works without a runtime."""
        if self._problem is None or self.window is None:
            return
        api, exc = self._problem
        text = error_text(exc)
        retry = ("Retry", lambda: spawn(self.retry_start()))
        elsewhere = ("Choose another data folder…", self.choose_data_folder)
        quit_ = ("Quit", self.quit_event.set)
        show = self.window.show_problem
        if api is not None and isinstance(exc, api.SettingsError):
            actions = [("Reset to defaults", self.reset_settings), ("Open settings.json",
                       lambda: self._open_path(exc.path)), retry]
            note = "Resetting keeps the broken file next to it, as settings.json.broken-<date>."
            show("Hearth's settings cannot be read", text, actions, note)
        elif api is not None and isinstance(exc, api.StorageFull):
            show("The disk is full", text, [("Retry", lambda: spawn(self.retry_start())), elsewhere, quit_],
                 "Free some space (empty the trash, remove large files), then press Retry. Nothing was lost.")
        elif api is not None and isinstance(exc, api.StorageCorrupt):
            show("Hearth's database is damaged", text,
                 [("Restore the latest backup", self.restore_backup), elsewhere, quit_],
                 "Restoring keeps the damaged file next to it; workspace files stay where they are.")
            spawn(self._describe_backups(api))
        elif api is not None and isinstance(exc, api.StorageError):
            show("Hearth cannot write its data", text, [retry, elsewhere, quit_])
        else:
            show("Hearth could not start", text, [retry, quit_])

    def storage_fault(self, exc: StorageError) -> None:
        api = self.bridge.api if self.bridge is not None else None
        if api is None or self._problem is not None:
            return
        if isinstance(exc, api.StorageCorrupt | api.StorageReadOnly):
            spawn(self._runtime_lost(api, exc))
            return
        box = self.fault_box
        if box is not None and box.isVisible():  # one box for a burst of failing actions
            return
        full = isinstance(exc, api.StorageFull)
        box = QMessageBox(QMessageBox.Icon.Warning, "The disk is full" if full else "Hearth could not save",
                          error_text(exc), QMessageBox.StandardButton.Ok, self.window)
        box.setInformativeText(("Free some space (empty the trash, remove large files), then try again. "
                                if full else "Try again in a moment. ") +
                               "Nothing saved was lost, and what could not be saved is still where you typed it.")
        folder = box.addButton("Open Data Folder", QMessageBox.ButtonRole.ActionRole)
        folder.clicked.connect(lambda: self._open_path(exc.home))
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.setWindowModality(Qt.WindowModality.NonModal)
        box.finished.connect(lambda _result: setattr(self, "fault_box", None))  # closed: deleted with it
        box.show()
        self.fault_box = box

    async def verify_database(self, bridge: RuntimeBridge) -> None:
        """The runtime's check of the database just opened (off the event loop, at most once a day). Damage that
        no query has met yet shows the same page as damage a query meets: restore the latest backup, or choose
        another data folder; the runtime refuses every write from the moment the check finds it."""
        try:
            await bridge.backups.verify_database()
        except Exception as exc:
            if self.bridge is bridge and isinstance(exc, bridge.api.StorageError):
                self.storage_fault(exc)
            else:
                log.error("the database check failed", exc_info=exc)

    async def _runtime_lost(self, api: ModuleType, exc: StorageError) -> None:
        """Close the runtime that cannot go on and show the page with the ways out."""
        bridge = self.bridge
        if bridge is None:  # another action's fault of the same burst is closing it already
            return
        self._problem = (api, exc)
        self.startup_error = error_text(exc)
        self.hide_window()
        self.bridge, self.rt = None, None
        try:
            await bridge.aclose()
        except Exception:  # it could not write its last words: the next open recovers the turns
            log.warning("closing the runtime after a storage fault failed", exc_info=True)
        self.show_main()

    async def retry_start(self) -> None:
        if self.rt is None:
            await self.open_runtime()

    def reset_settings(self) -> None:
        async def go() -> None:
            api = await asyncio.to_thread(importlib.import_module, "runtime.api")
            moved = await asyncio.to_thread(api.Runtime.reset_settings, self.home)
            await self.retry_start()
            if moved is not None and self.window is not None:
                self.window.statusBar().showMessage(f"The broken settings were kept as {moved.name}.", 15_000)

        spawn(go())

    async def _describe_backups(self, api: ModuleType) -> None:
        backups = await api.Backups.list(self.home)
        if self.window is None:
            return
        if not backups:
            self.window.problem.say("There is no backup to restore yet. Choose another data folder to go on.")
            self.window.problem.buttons["Restore the latest backup"].setEnabled(False)
        else:
            when = time.strftime("%d %b %Y %H:%M", time.localtime(backups[0].created_at))
            self.window.problem.say(f"The latest backup is from {when} ({len(backups)} kept). Restoring brings "
                                    "back your tasks as they were then; the damaged file, with anything saved "
                                    "after that, is kept next to it, and workspace files stay where they are.")

    def restore_backup(self) -> None:
        async def go() -> None:
            api = await asyncio.to_thread(importlib.import_module, "runtime.api")
            try:
                restored = await api.Backups.restore_latest(self.home)
            except api.HearthError as exc:
                if self.window is not None:
                    self.window.problem.say(error_text(exc))
                return
            await self.retry_start()
            if self.window is not None and self.rt is not None:
                when = time.strftime("%d %b %Y %H:%M", time.localtime(restored.backup.created_at))
                self.window.statusBar().showMessage(f"Restored the backup of {when}.", 15_000)

        spawn(go())

    def choose_data_folder(self) -> None:
        dlg = QFileDialog(self.window, "Choose a data folder", str(Path.home()))
        dlg.setFileMode(QFileDialog.FileMode.Directory)
        dlg.setOption(QFileDialog.Option.ShowDirsOnly, True)
        dlg.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dlg.fileSelected.connect(self.use_data_folder)
        dlg.open()
        self.folder_dialog = dlg

    def use_data_folder(self, folder: str) -> None:
        """Go on with another data folder (for this run; start with --home to keep using it)."""
        if folder and self.rt is None:
            self.home = Path(folder)
            spawn(self.retry_start())

    def _open_path(self, path: str | Path) -> None:
        dialogs.open_path(self.window, path)

