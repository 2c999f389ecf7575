"""The main window's task side: a new task, rename, delete, export, the workspace folder."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog, QInputDialog, QMessageBox

from ..tasks import export
from ..tasks.new_task_dialog import NewTaskDialog
from ..tasks.panel import TaskPanel
from ..widgets import dialogs

if TYPE_CHECKING:
    from .window_host import ActionsBase
else:
    ActionsBase = object  # see shell/window_host.py


class TaskActions(ActionsBase):
    """Mixed into MainWindow: it owns `panel`, `tasks`, `bridge`, `reload_tasks`, `open_task` and `close_panel`."""

    def new_task(self, goal: str = "") -> NewTaskDialog | None:
        if not self._ready():
            return None
        dlg = NewTaskDialog(self.bridge, self)
        if goal:
            dlg.goal.setPlainText(goal)
        dlg.create_requested.connect(lambda values: self.bridge.run(self._create(dlg, values)))
        dlg.show()
        self.new_task_dialog = dlg
        return dlg

    async def _create(self, dlg: NewTaskDialog, values: dict) -> None:
        goal = values.pop("goal", "")
        try:
            info = await self.bridge.create_task(**values)
        except Exception as exc:
            dlg.failed(str(exc))
            return
        dlg.close()
        await self.reload_tasks()
        panel = self.open_task(info.id)
        if goal and panel is not None:
            panel.composer.edit.setPlainText(goal)
            panel.composer.submit()

    async def _open_new(self, task_id: str) -> None:
        await self.reload_tasks()
        self.open_task(task_id)

    def rename_task(self, task_id: str | None) -> QInputDialog | None:
        if not task_id or (info := self.tasks.get(task_id)) is None:
            return None

        def done(title: str) -> None:
            self.bridge.run(self._rename(task_id, title))

        return dialogs.ask_text(self, "Rename task", "Title:", info.title or "", done)

    async def _rename(self, task_id: str, title: str) -> None:
        await self.bridge.rename(task_id, title)
        await self.reload_tasks()
        if isinstance(self.panel, TaskPanel) and self.panel.task_id == task_id:
            await self.panel.sync()

    def delete_task(self, task_id: str | None) -> asyncio.Task | None:
        """Ask whether to delete the task, once its deliverables are counted (`ask_delete_task`)."""
        if not task_id or task_id not in self.tasks:
            return None
        return self.bridge.run(self.ask_delete_task(task_id))

    async def ask_delete_task(self, task_id: str) -> QMessageBox | None:
        """The question says what goes with the task: its running turn, its deliverables (every version of what
        it delivered, kept in the data folder); its workspace folder stays."""
        delivered = await self.bridge.deliveries.count(task_id)
        if (info := self.tasks.get(task_id)) is None:
            return None
        extra = " Its running turn will be stopped." if self.bridge.is_running(task_id) else ""
        if delivered:
            extra += (f" Its {delivered} deliverable{'s' if delivered != 1 else ''} (what it delivered, every version)"
                      " will be deleted too: save any you want to keep from its Deliverables first.")
        return dialogs.confirm(
            self, "Delete task?", f"Delete “{info.title or 'New task'}” and its conversation?",
            "Delete", lambda: self.bridge.run(self._delete(task_id)),
            informative=f"This cannot be undone.{extra} Files in its workspace folder stay on disk.", danger=True)

    async def _delete(self, task_id: str) -> None:
        if self.panel is not None and self.panel.task_id == task_id:
            self.close_panel()
        await self.bridge.delete(task_id)
        self.ctl.keep_draft(task_id, None)  # closing the panel kept its unsent text: nothing will show it now
        await self.reload_tasks()

    def export(self, fmt: str) -> None:
        if not isinstance(self.panel, TaskPanel):
            return
        info = self.panel.info
        name = re.sub(r"[^\w\- ]+", "", info.title or "task").strip() or "task"
        dlg = QFileDialog(self, "Export task", str(Path.home() / f"{name}.{fmt}"))
        dlg.setAcceptMode(QFileDialog.AcceptMode.AcceptSave)
        dlg.setNameFilter("Markdown (*.md)" if fmt == "md" else "JSON (*.json)")
        dlg.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dlg.fileSelected.connect(lambda path: self.bridge.run(self.export_to(info.id, path, fmt)))
        dlg.open()

    async def export_to(self, task_id: str, path: str, fmt: str) -> None:
        """The task as Markdown or JSON at `path`; what it delivered (every version) goes into a folder beside it,
        "<name> deliverables", which the export names file by file."""
        info = await self.bridge.get_task(task_id)
        messages = await self.bridge.messages(task_id)
        turns = await self.bridge.turns(task_id)
        folder = Path(path).with_name(f"{Path(path).stem} deliverables")
        delivered = await self.bridge.deliveries.export(task_id, folder)  # no folder when there is nothing
        text = (export.to_markdown if fmt == "md" else export.to_json)(info, messages, turns, delivered, folder.name)
        await asyncio.to_thread(Path(path).write_text, text, encoding="utf-8")
        also = f" and {len(delivered)} delivered file(s) to {folder}" if delivered else ""
        self.statusBar().showMessage(f"Exported to {path}{also}", 8000)

    def open_workspace(self) -> None:
        if isinstance(self.panel, TaskPanel):
            self.panel.open_workspace()
