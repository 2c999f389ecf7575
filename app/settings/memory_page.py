"""Settings ▸ Memory: what Hearth remembers about the person across tasks.

A switch for memory everywhere, a search field, the memories (name, summary, where each came from), and for the
selected one its text to read and edit in place, Save, Open (the file in the desktop's editor) and Delete. New
writes a memory by hand (a name, then its text; Save checks it as the memory tool does). Delete asks first (a
non-modal box: a nested dialog loop would break qasync) and offers Undo, which brings the memory back with where
it came from; "Forget everything" asks by a second click. The last failed memory extraction, if any, is shown
with its reason (the job log).
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QPushButton,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from ..core.bridge import RuntimeBridge
from ..core.util import ago, error_text
from ..widgets import dialogs


def source_text(m: dict) -> str:
    if m.get("source_task_id"):
        return "learned in a task" if m.get("origin") == "extraction" else "saved by a task"
    return {"person": "written by you", "file": "found in the folder"}.get(m.get("origin") or "", "")


class MemoryPage(QWidget):
    def __init__(self, bridge: RuntimeBridge, parent: QWidget | None = None):
        super().__init__(parent)
        self.bridge = bridge
        self.memory = bridge.memory
        self._confirming = False
        lay = QVBoxLayout(self)
        self.enabled = QCheckBox("Remember things about me across tasks")
        self.enabled.setChecked(self.memory.enabled)
        self.enabled.toggled.connect(lambda on: self.bridge.run(self._set_enabled(on), owner=self))
        lay.addWidget(self.enabled)
        intro = QLabel("Memories are small Markdown files in your data folder. Tasks read the ones that fit and may "
                       "add new ones; secrets are never kept. A task created with memory off neither reads nor "
                       "writes them.")
        intro.setWordWrap(True)
        intro.setObjectName("Muted")
        lay.addWidget(intro)
        self.search = QLineEdit()
        self.search.setPlaceholderText("Search memories")
        self.search.textChanged.connect(lambda _t: self.bridge.run(self.reload(), owner=self, load=True))
        lay.addWidget(self.search)
        split = QSplitter(Qt.Orientation.Horizontal)
        self.list = QListWidget()
        self.list.currentItemChanged.connect(
            lambda item, _old: self.bridge.run(self._show(self.current_name()), owner=self, load=True))
        split.addWidget(self.list)
        right = QWidget()
        side = QVBoxLayout(right)
        side.setContentsMargins(0, 0, 0, 0)
        self.name = QLineEdit()  # shown while a new memory is written
        self.name.setPlaceholderText("Name, e.g. travel-plans")
        self.name.setVisible(False)
        side.addWidget(self.name)
        self.editor = QPlainTextEdit()
        self.editor.setPlaceholderText("Choose a memory to read or edit it, or make a New one.")
        side.addWidget(self.editor, 1)
        split.addWidget(right)
        split.setSizes([300, 400])
        lay.addWidget(split, 1)
        row = QHBoxLayout()
        self.new = QPushButton("New")
        self.new.setToolTip("Write a memory yourself: a name, then a first line that sums it up and the details")
        self.new.clicked.connect(self._start_new)
        row.addWidget(self.new)
        self.save = QPushButton("Save")
        self.save.clicked.connect(lambda: self.bridge.run(self._save(), owner=self))
        self.open_file = QPushButton("Open file")
        self.open_file.clicked.connect(self._open)
        self.delete = QPushButton("Delete")
        self.delete.clicked.connect(self._delete)
        self.forget_all = QPushButton("Forget everything…")
        self.forget_all.clicked.connect(lambda: self.bridge.run(self._forget_all(), owner=self))
        for button in (self.save, self.open_file, self.delete):
            row.addWidget(button)
        row.addStretch(1)
        row.addWidget(self.forget_all)
        lay.addLayout(row)
        said = QHBoxLayout()
        self.status = QLabel()
        self.status.setWordWrap(True)
        said.addWidget(self.status, 1)
        self.undo = QPushButton("Undo")
        self.undo.setToolTip("Bring back the memory just deleted")
        self.undo.setVisible(False)
        self.undo.clicked.connect(lambda: self.bridge.run(self._undo(), owner=self))
        said.addWidget(self.undo)
        lay.addLayout(said)
        self._deleted: str | None = None  # the memory Undo brings back
        self._failure = ""  # the failed extraction the status shows, cleared once a later one worked
        self._selection_changed()
        self.bridge.run(self.reload(), owner=self, load=True)

    def current_name(self) -> str | None:
        item = self.list.currentItem()
        return item.data(Qt.ItemDataRole.UserRole) if item is not None else None

    async def reload(self) -> None:
        keep = self.current_name()
        rows = await self.memory.list(self.search.text())
        self.list.blockSignals(True)
        self.list.clear()
        for m in rows:
            used = ago(m.get("last_used_at")) or "not yet"
            item = QListWidgetItem(f"{m['summary']}\n{m['name']} · {source_text(m)} · used {used}")
            item.setData(Qt.ItemDataRole.UserRole, m["name"])
            self.list.addItem(item)
            if m["name"] == keep:
                self.list.setCurrentItem(item)
        self.list.blockSignals(False)
        self._selection_changed()
        failed = [j for j in await self.bridge.jobs.log("memory.extraction", 1) if j["status"] == "failed"]
        if self._failure and self.status.text() == self._failure:  # a later attempt may have worked
            self.status.setText("")
        self._failure = ""
        if not rows and not self.status.text():
            self.status.setText("No memories yet." if not self.search.text() else "No memory matches.")
        if failed:
            self._failure = (f"The last attempt to learn from a task failed ({ago(failed[0]['created_at'])}): "
                             f"{failed[0]['error']} (all background work: the Jobs tab)")
            self.status.setText(self._failure)

    def _selection_changed(self) -> None:
        chosen = self.current_name() is not None
        if chosen:
            self.name.setVisible(False)
        writing = chosen or not self.name.isHidden()
        self.save.setEnabled(writing)
        for button in (self.open_file, self.delete):
            button.setEnabled(chosen)
        if not writing:
            self.editor.setPlainText("")

    async def _show(self, name: str | None) -> None:
        self._selection_changed()
        if name is not None:
            text = await self.memory.text(name)
            if self.current_name() == name:  # still the one chosen (New, or another, may have come meanwhile)
                self.editor.setPlainText(text)

    def _start_new(self) -> None:
        """An empty memory to write: its name above the text; Save adds it."""
        self.list.setCurrentRow(-1)  # what setCurrentItem(None) does (the stubs leave out None)
        self.name.clear()
        self.name.setVisible(True)
        self.editor.setPlainText("")
        self.editor.setPlaceholderText("First line: what it is about (e.g. “Travels by train”), then the details.")
        self._selection_changed()
        self.name.setFocus()

    async def _save(self) -> None:
        text = self.editor.toPlainText()
        try:
            if not self.name.isHidden():
                name = await self.memory.add(self.name.text(), text)
            elif (chosen := self.current_name()) is not None:  # Save is enabled only while one is (or New)
                name = await self.memory.save(chosen, text)
            else:
                return
        except Exception as exc:
            self.status.setText(f"Not saved: {error_text(exc)}")
            return
        self.name.setVisible(False)
        await self.reload()
        self._select(name)
        self.status.setText(f"Saved {name}.")  # last: the page shows what it says

    def _select(self, name: str) -> None:
        for i in range(self.list.count()):
            if self.list.item(i).data(Qt.ItemDataRole.UserRole) == name:
                self.list.setCurrentRow(i)

    def _open(self) -> None:
        name = self.current_name()
        if name:
            dialogs.open_path(self.window(), self.memory.folder / name)

    def _delete(self) -> None:
        """Ask first; Undo brings it back afterwards."""
        item = self.list.currentItem()
        if item is None:
            return
        name = item.data(Qt.ItemDataRole.UserRole)
        self.confirm_box = dialogs.confirm(
            self, "Delete memory?", f"Delete the memory “{item.text().splitlines()[0]}” ({name})?", "Delete",
            lambda: self.bridge.run(self._forget(name), owner=self),
            informative="Tasks no longer see it. Undo brings it back while Hearth stays open.", danger=True)

    async def _forget(self, name: str) -> None:
        try:
            await self.memory.forget(name)
        except Exception as exc:
            self.status.setText(f"Not deleted: {error_text(exc)}")
            return
        self._deleted = name
        await self.reload()
        self.status.setText(f"Deleted {name}.")
        self.undo.setVisible(True)

    async def _undo(self) -> None:
        name, self._deleted = self._deleted, None
        self.undo.setVisible(False)
        if name is None:
            return
        try:
            await self.memory.restore(name)
        except Exception as exc:
            self.status.setText(f"Not brought back: {error_text(exc)}")
            return
        await self.reload()
        self._select(name)
        self.status.setText(f"Brought back {name}.")

    async def _forget_all(self) -> None:
        if not self._confirming:
            self._confirming = True
            self.forget_all.setText(f"Click again to forget all {self.list.count()} memories")
            return
        self._confirming = False
        self.forget_all.setText("Forget everything…")
        count = await self.memory.forget_all()
        self.status.setText(f"Forgot {count} memories.")
        await self.reload()

    async def _set_enabled(self, on: bool) -> None:
        await self.memory.set_enabled(on)
        self.status.setText("Memory is on." if on else "Memory is off: no task reads or saves memories.")
