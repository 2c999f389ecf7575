"""Settings ▸ Models ▸ local models: what is installed (size, Delete), the catalog (size, memory needed, a mark on
models that will not fit in this computer's memory, Download), a Hugging Face file by name or URL, a .gguf from
this computer, the running downloads (progress bar, speed, time left, Pause, Cancel), a failed one on its row (why,
Retry, Cancel) and the paused ones (how far they got, Resume, Cancel), which stay listed after Settings closes or
Hearth restarts.

It talks to the runtime's local models only (`bridge.models`: `catalog`, `installed`, `pull`, `remove`,
`add_local`, `set_hf_token`, `cancel`, `paused`). A download is an asyncio task; Pause
cancels it (the runtime keeps the partial file) and Resume or Download resumes it; Cancel has the runtime stop it
and delete the partial file. Dialogs are non-modal: a nested Qt event loop would break qasync.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import shiboken6
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QFileDialog,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from ..core.util import error_text, spawn
from ..widgets import theme

if TYPE_CHECKING:
    from runtime.api import DownloadProgress, LocalModels

T = TypeVar("T")


def size_text(n: int | None, approx: bool = False) -> str:
    if not n:
        return "size unknown"
    value, unit = (n / 1e9, "GB") if n >= 1e9 else (n / 1e6, "MB")
    number = f"{value:.0f}" if value >= 100 else f"{value:.1f}"
    return f"{'~' if approx else ''}{number} {unit}"


def time_left(seconds: float | None) -> str:
    if seconds is None:
        return ""
    s = int(seconds)
    return f"{s // 3600} h {s % 3600 // 60} min left" if s >= 3600 else f"{s // 60}:{s % 60:02d} left"


def _label(text: str = "", muted: bool = False) -> QLabel:
    label = QLabel(text)
    label.setWordWrap(True)
    if muted:
        label.setObjectName("Muted")
    return label


class DownloadRow(QWidget):
    """One download: name, progress bar, bytes / speed / time left, Pause and Cancel; a failed one says why, with
    Retry and Cancel."""

    pause = Signal(str)
    cancel = Signal(str)
    retry = Signal(str)

    def __init__(self, key: str, title: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.key = key
        self.name = title
        lay = QGridLayout(self)
        lay.setContentsMargins(0, 4, 0, 4)
        self.title = _label(title)
        self.bar = QProgressBar()
        self.bar.setRange(0, 0)  # busy until the size is known
        self.bar.setTextVisible(True)
        self.detail = _label("Asking Hugging Face…", muted=True)
        self.pause_button = QPushButton("Pause")
        self.pause_button.clicked.connect(lambda: self.pause.emit(self.key))
        self.pause_button.setToolTip("Stop for now; Download goes on where it stopped")
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.clicked.connect(lambda: self.cancel.emit(self.key))
        self.cancel_button.setToolTip("Stop and delete what was downloaded so far")
        self.retry_button = QPushButton("Retry")
        self.retry_button.setObjectName("Primary")
        self.retry_button.clicked.connect(lambda: self.retry.emit(self.key))
        self.retry_button.hide()
        self.failed = False
        self.reached_hub = False  # a progress report came: the download began
        lay.addWidget(self.title, 0, 0)
        lay.addWidget(self.pause_button, 0, 1, Qt.AlignmentFlag.AlignRight)
        lay.addWidget(self.retry_button, 0, 1, Qt.AlignmentFlag.AlignRight)
        lay.addWidget(self.cancel_button, 0, 2, Qt.AlignmentFlag.AlignRight)
        lay.addWidget(self.bar, 1, 0, 1, 3)
        lay.addWidget(self.detail, 2, 0, 1, 3)
        lay.setColumnStretch(0, 1)  # the name takes the room: Pause and Cancel sit together on the right

    def show_failure(self, text: str) -> None:
        """The download stopped on an error: the row says why, and offers Retry (and Cancel to let it go)."""
        self.failed = True
        self.bar.hide()
        self.pause_button.hide()
        self.retry_button.show()
        self.cancel_button.setEnabled(True)
        self.cancel_button.setToolTip("Forget this download, and delete what it had downloaded")
        self.detail.setObjectName("Warning")
        self.detail.style().polish(self.detail)  # the stylesheet's rule for its new name
        self.detail.setText(text)

    def update_progress(self, p: DownloadProgress) -> None:
        self.reached_hub = True
        if p.total:
            self.bar.setRange(0, 1000)
            self.bar.setValue(int(1000 * p.done / p.total))
            self.bar.setFormat(f"{100 * p.done / p.total:.0f} %")
        if p.phase == "verifying":
            self.detail.setText("Checking the file against the Hub's checksum…")
        elif p.phase == "downloading":
            parts = [f"{size_text(p.done)} of {size_text(p.total)}"]
            if p.speed:
                parts.append(f"{size_text(int(p.speed))}/s")
            if p.eta is not None:
                parts.append(time_left(p.eta))
            self.detail.setText("  ·  ".join(parts))
        if p.fits is False:
            self.title.setText(f"{self.title.text().split('  —')[0]}  — needs more memory than this computer has")


class ModelManager(QWidget):
    """The local-models page over the runtime's local models (`bridge.models` in the app)."""

    changed = Signal()  # installed models changed (the model pickers may refresh)

    def __init__(self, models: LocalModels, parent: QWidget | None = None):
        super().__init__(parent)
        self.models = models
        self.downloads: dict[str, asyncio.Task] = {}
        self.rows: dict[str, DownloadRow] = {}
        outer = QVBoxLayout(self)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        page = QWidget()
        self.page = QVBoxLayout(page)
        scroll.setWidget(page)
        outer.addWidget(scroll, 1)
        self.message = _label()
        outer.addWidget(self.message)

        self.page.addWidget(_label("<b>Installed</b>"))
        self.installed = QGridLayout()
        self.page.addLayout(self.installed)
        self.page.addSpacing(10)
        self.page.addWidget(_label("<b>Downloads</b>"))
        self.downloads_box = QVBoxLayout()
        self.no_downloads = _label("Nothing is downloading.", muted=True)
        self.downloads_box.addWidget(self.no_downloads)
        self.page.addLayout(self.downloads_box)
        self.paused = QGridLayout()
        self.page.addLayout(self.paused)
        self.page.addSpacing(10)
        self.page.addWidget(_label("<b>Catalog</b> — models that call tools well, run on this computer with "
                                   "llama.cpp"))
        self.catalog = QGridLayout()
        self.page.addLayout(self.catalog)
        self.page.addSpacing(10)
        self.page.addWidget(_label("<b>Add another model</b>"))
        row = QHBoxLayout()
        self.hf_ref = QLineEdit()
        self.hf_ref.setPlaceholderText("Hugging Face file: OWNER/REPO/FILE.gguf or its huggingface.co link")
        self.hf_ref.returnPressed.connect(self._pull_ref)
        self.hf_button = QPushButton("Download")
        self.hf_button.clicked.connect(self._pull_ref)
        self.local_button = QPushButton("Add a .gguf file…")
        self.local_button.clicked.connect(self._pick_local)
        row.addWidget(self.hf_ref, 1)
        row.addWidget(self.hf_button)
        row.addWidget(self.local_button)
        self.page.addLayout(row)
        token_row = QHBoxLayout()
        self.token = QLineEdit()
        self.token.setEchoMode(QLineEdit.EchoMode.Password)
        self.token.setPlaceholderText("Hugging Face token, only for gated models (kept in the system keyring)")
        self.token_button = QPushButton("Save token")
        self.token_button.clicked.connect(self._save_token)
        token_row.addWidget(self.token, 1)
        token_row.addWidget(self.token_button)
        self.page.addLayout(token_row)
        self.page.addStretch(1)
        self.refresh()

    # -- lists --

    def refresh(self) -> None:
        _clear(self.installed)
        for i, m in enumerate(self.models.installed()):
            where = {"bundled": "bundled with Hearth", "hub": m.repo or "Hugging Face", "local": m.path}[m.source]
            name = _label(f"{m.label}<br><span style='color:{theme.colors()['muted']}'>{m.ref} · {where}</span>")
            name.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            self.installed.addWidget(name, i, 0)
            self.installed.addWidget(_label(size_text(m.size) if m.present else "file missing", muted=True), i, 1)
            if m.source != "bundled":
                delete = QPushButton("Delete" if m.source == "hub" else "Remove")
                delete.setObjectName("Danger")
                delete.setToolTip("Deletes the downloaded file" if m.source == "hub" else
                                  "Forgets the file; it stays on your disk")
                delete.clicked.connect(lambda _=False, name=m.name: self.remove(name))
                self.installed.addWidget(delete, i, 2)
        self.installed.setColumnStretch(0, 1)
        paused = self._list_paused()
        _clear(self.catalog)
        for i, c in enumerate(self.models.catalog()):
            text = f"<b>{c.label}</b> — {c.summary}"
            self.catalog.addWidget(_label(text), i, 0)
            need = f"{size_text(c.size, approx=True)} download<br>needs {size_text(c.ram_needed)} of memory"
            if c.fits is False:
                need += f"<br><span style='color:{theme.colors()['error']}'>won't fit in this computer's memory</span>"
            mark = _label(need, muted=True)
            mark.setWordWrap(False)
            self.catalog.addWidget(mark, i, 1)
            if c.installed:
                self.catalog.addWidget(_label("Installed", muted=True), i, 2)
            else:
                failed = c.id in self.rows and c.id not in self.downloads
                button = QPushButton("Downloading…" if c.id in self.downloads else "Retry" if failed else
                                     "Resume" if c.id in paused else "Download")
                button.setObjectName("Primary")
                button.setEnabled(c.id not in self.downloads)
                button.clicked.connect(lambda _=False, cid=c.id, label=c.label: self.pull(cid, label))
                self.catalog.addWidget(button, i, 2)
        self.catalog.setColumnStretch(0, 1)

    def _list_paused(self) -> set[str]:
        """The paused downloads, each with Resume and Cancel; returns their refs."""
        _clear(self.paused)
        paused = [p for p in self.models.paused() if p.ref not in self.rows]  # a failed one's row says it
        for i, p in enumerate(paused):
            got = f"{size_text(p.downloaded)} of {size_text(p.total)}"
            if p.total:
                got += f" ({100 * p.downloaded // p.total} %)"
            self.paused.addWidget(_label(f"{p.label}<br><span style='color:{theme.colors()['muted']}'>Paused at "
                                         f"{got}</span>"), i, 0)
            resume = QPushButton("Resume")
            resume.setObjectName("Primary")
            resume.clicked.connect(lambda _=False, ref=p.ref, label=p.label: self.pull(ref, label))
            discard = QPushButton("Cancel")
            discard.setToolTip("Delete what was downloaded so far")
            discard.clicked.connect(lambda _=False, ref=p.ref, label=p.label: self._act(
                self.models.cancel(ref), lambda _r: f"Deleted the partial download of {label}."))
            self.paused.addWidget(resume, i, 1)
            self.paused.addWidget(discard, i, 2)
        self.paused.setColumnStretch(0, 1)
        self.no_downloads.setVisible(not self.rows and not paused)
        return {p.ref for p in paused}

    # -- downloads --

    def pull(self, ref: str, title: str | None = None) -> None:
        ref = ref.strip()
        if not ref or ref in self.downloads:
            return
        self._drop_row(ref)  # a failed attempt's row: this one takes its place
        row = self.rows[ref] = DownloadRow(ref, title or ref)
        row.pause.connect(self.pause)
        row.cancel.connect(self.cancel)
        row.retry.connect(lambda key: self.pull(key, title))
        self.no_downloads.hide()
        self.downloads_box.addWidget(row)
        self.message.clear()

        def progress(p: DownloadProgress) -> None:
            # Reports queued before a pause may arrive after Settings closed and deleted the row.
            if shiboken6.isValid(row):
                row.update_progress(p)

        async def go() -> None:
            try:
                model = await self.models.pull(ref, progress)
            except asyncio.CancelledError:
                if shiboken6.isValid(self):  # paused by closing Settings: nothing left to update
                    self._end(ref, f"Paused {title or ref}; Download resumes it.")
                raise
            except Exception as exc:
                from runtime.api import DownloadCancelled  # loaded already: the runtime is running

                if row.reached_hub and not isinstance(exc, DownloadCancelled):  # its row says why, with Retry
                    self._failed(ref, error_text(exc))
                else:  # cancelled, or refused before it began (a wrong reference): nothing to retry
                    self._end(ref, error_text(exc))
                return
            self._end(ref, f"Installed {model.label} as {model.ref}.")
            self.changed.emit()

        self.downloads[ref] = spawn(go(), long=True, owner=self)
        self.refresh()

    def pause(self, ref: str) -> None:
        task = self.downloads.get(ref)
        if task is not None:
            self.rows[ref].pause_button.setEnabled(False)
            self.rows[ref].cancel_button.setEnabled(False)
            self.rows[ref].detail.setText("Pausing…")
            task.cancel()

    def cancel(self, ref: str) -> None:
        """Stop the download and delete its partial file; its own pull then ends saying so. A failed one's row
        goes, with what it had downloaded."""
        row = self.rows.get(ref)
        if row is not None and row.failed:
            name = row.name
            self._drop_row(ref)
            self._act(self.models.cancel(ref), lambda deleted: (
                f"Deleted the partial download of {name}." if deleted else ""))
        elif row is not None:
            row.pause_button.setEnabled(False)
            row.cancel_button.setEnabled(False)
            row.detail.setText("Cancelling…")
            spawn(self._cancel(ref), owner=self)

    async def _cancel(self, ref: str) -> None:
        try:
            stopped = await self.models.cancel(ref)
        except Exception as exc:
            self.message.setText(f"Not cancelled: {error_text(exc)}")
            stopped = False
        row = self.rows.get(ref)
        if not stopped and row is not None:  # still running (it was between two steps): it can be tried again
            row.pause_button.setEnabled(True)
            row.cancel_button.setEnabled(True)

    def pause_all(self) -> None:
        for ref in list(self.downloads):
            self.pause(ref)

    def _end(self, ref: str, message: str) -> None:
        self.downloads.pop(ref, None)
        self._drop_row(ref)
        self.message.setText(message)
        self.refresh()

    def _failed(self, ref: str, message: str) -> None:
        """The download's row stays, saying what went wrong, with Retry."""
        self.downloads.pop(ref, None)
        row = self.rows.get(ref)
        if row is not None:
            row.show_failure(message)
        self.refresh()

    def _drop_row(self, ref: str) -> None:
        row = self.rows.pop(ref, None)
        if row is not None:
            row.setParent(None)
            row.deleteLater()

    def _pull_ref(self) -> None:
        ref = self.hf_ref.text().strip()
        if ref:
            self.hf_ref.clear()
            self.pull(ref)

    # -- adding, removing --

    def _pick_local(self) -> None:
        # In the person's home, like every file dialog of the app: not the folder Hearth was started from.
        dlg = QFileDialog(self, "Add a GGUF model", str(Path.home()), "GGUF models (*.gguf);;All files (*)")
        dlg.setFileMode(QFileDialog.FileMode.ExistingFile)
        dlg.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dlg.fileSelected.connect(self.add_local)
        dlg.open()

    def add_local(self, path: str) -> None:
        self.message.setText("Reading the file…")
        self._act(self.models.add_local(path), lambda m: f"Added {m.label} as {m.ref}.")

    def remove(self, name: str) -> None:
        self._act(self.models.remove(name), lambda _r: f"Removed {name}.")

    def _save_token(self) -> None:
        try:
            self.models.set_hf_token(self.token.text())
        except Exception as exc:
            self.message.setText(error_text(exc))
            return
        self.token.clear()
        self.message.setText("Saved the Hugging Face token in the system keyring.")

    def _act(self, coro: Awaitable[T], done: Callable[[T], str]) -> None:
        async def go() -> None:
            try:
                result = await coro
            except Exception as exc:
                self.message.setText(error_text(exc))
                return
            self.message.setText(done(result))
            self.refresh()
            self.changed.emit()

        spawn(go(), owner=self)


def _clear(grid: QGridLayout) -> None:
    while grid.count():
        item = grid.takeAt(0)
        if item is not None and (widget := item.widget()) is not None:
            widget.setParent(None)
            widget.deleteLater()
