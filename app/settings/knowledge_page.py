"""The knowledge library: the documents tasks can work from, each with its status, and adding more.

Files and folders come in by Add files…, Add folder… (non-modal dialogs) or by dropping them on the page.
The page follows the library's `changes()` (`bridge.knowledge`) while it is open (no polling): each document's status
(queued, indexing with its percentage, ready with its passage count, or the sentence saying why it could not be
read) and a bar for the indexing as a whole. A task is bound to documents when it is created; this page only
manages the library, and how it is searched: by words alone (offline), or by meaning too with an embeddings model
of an OpenAI-compatible server, tried before it is kept (the library's documents then get vectors).
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QKeyEvent
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from ..core.bridge import RuntimeBridge
from ..core.util import error_text, spawn

WORDS_ONLY = "Words only (works offline)"
STATUS_TEXT = {"queued": "Waiting", "ready": "Ready", "error": "Cannot be read", "missing": "File is gone"}


def status_text(doc: dict) -> str:
    if doc["status"] == "indexing":
        return f"Indexing {round(100 * (doc['progress'] or 0))}%"
    text = STATUS_TEXT.get(doc["status"], doc["status"])
    n = doc["passages"]
    return f"{text} · {n} passage{'' if n == 1 else 's'}" if doc["status"] == "ready" else text


class KnowledgePage(QWidget):
    remove_button: QPushButton  # made below the tree, whose selection enables it

    def __init__(self, bridge: RuntimeBridge, parent: QWidget | None = None):
        super().__init__(parent)
        self.bridge = bridge
        self.knowledge = bridge.knowledge
        self.setAcceptDrops(True)
        lay = QVBoxLayout(self)
        intro = QLabel("Documents tasks can work from: text, Markdown, HTML, PDF and Word files, or whole folders. "
                       "Drop them here or add them; choose which ones a task uses when you create it.")
        intro.setWordWrap(True)
        intro.setObjectName("Muted")
        lay.addWidget(intro)
        self.tree = QTreeWidget()
        self.tree.setHeaderLabels(["Document", "Status", "Details"])
        self.tree.setRootIsDecorated(False)
        self.tree.setSelectionMode(QTreeWidget.SelectionMode.ExtendedSelection)
        self.tree.itemSelectionChanged.connect(lambda: self.remove_button.setEnabled(bool(self.selected())))
        self.tree.setColumnWidth(0, 280)
        self.tree.setColumnWidth(1, 160)
        lay.addWidget(self.tree, 1)
        self.progress = QProgressBar()
        self.progress.setVisible(False)
        lay.addWidget(self.progress)
        row = QHBoxLayout()
        add_files = QPushButton("Add files…")
        add_files.clicked.connect(lambda: self._pick(folder=False))
        add_folder = QPushButton("Add folder…")
        add_folder.clicked.connect(lambda: self._pick(folder=True))
        self.remove_button = QPushButton("Remove")
        self.remove_button.setToolTip("Take the selected documents out of the library; the files stay where they are")
        self.remove_button.setEnabled(False)
        self.remove_button.clicked.connect(lambda: self.bridge.run(self.remove(self.selected()), owner=self))
        row.addWidget(add_files)
        row.addWidget(add_folder)
        row.addStretch(1)
        row.addWidget(self.remove_button)
        lay.addLayout(row)
        meaning = QHBoxLayout()
        meaning.addWidget(QLabel("Search by meaning with"))
        self.embeddings = QComboBox()
        self.embeddings.setEditable(True)  # any provider/model, e.g. one the server did not list
        self.embeddings.setToolTip("An embeddings model of an OpenAI-compatible server (e.g. Ollama's "
                                   "nomic-embed-text), written provider/model; words only keeps search offline")
        self.embeddings.addItem(WORDS_ONLY)
        self.embeddings.setCurrentText(self.knowledge.embeddings_model or WORDS_ONLY)
        meaning.addWidget(self.embeddings, 1)
        self.use_embeddings = QPushButton("Use")
        self.use_embeddings.clicked.connect(lambda: self.bridge.run(self.choose_embeddings(), owner=self))
        meaning.addWidget(self.use_embeddings)
        lay.addLayout(meaning)
        self.status = QLabel()
        self.status.setWordWrap(True)
        lay.addWidget(self.status)
        self.rows: dict[str, QTreeWidgetItem] = {}
        # Follows for the page's life: deleting the page (its window closed) cancels it.
        self._follow = spawn(self._follow_changes(), bridge.report, long=True, owner=self, load=True)
        bridge.run(self._list_embeddings(), owner=self, load=True)

    def stop(self) -> None:
        """Stop following the library (when the page closes)."""
        if not self._follow.done():
            self._follow.cancel()

    async def _follow_changes(self) -> None:
        async for status in self.knowledge.changes():
            self.show_status(status)

    def show_status(self, status: dict) -> None:
        docs = status["documents"]
        seen = set()
        for doc in docs:
            seen.add(doc["path"])
            item = self.rows.get(doc["path"])
            if item is None:
                item = self.rows[doc["path"]] = QTreeWidgetItem([Path(doc["path"]).name, "", ""])
                item.setToolTip(0, doc["path"])
                self.tree.addTopLevelItem(item)
            item.setText(1, status_text(doc))
            item.setText(2, doc.get("detail") or "")
            item.setToolTip(2, doc.get("detail") or "")
        for path in [p for p in self.rows if p not in seen]:
            self.tree.takeTopLevelItem(self.tree.indexOfTopLevelItem(self.rows.pop(path)))
        counts = status["counts"]
        waiting = counts["queued"] + counts["indexing"]
        self.progress.setVisible(status["busy"])
        if status["busy"]:
            current = status["indexing"]
            self.progress.setMaximum(100 * len(docs))
            done = len(docs) - waiting + (current["progress"] if current else 0)
            self.progress.setValue(int(100 * done))
            self.progress.setFormat(f"Indexing {Path(current['path']).name if current else ''}: {waiting} to go")
        if not docs:
            self.status.setText("The library is empty.")

    async def _list_embeddings(self) -> None:
        """Offer the models of the OpenAI-compatible providers (a server that is down offers none)."""
        servers = {p.id for p in self.bridge.settings.providers if p.kind == "openai"}
        models = await self.bridge.providers.all_models(timeout=3.0, max_age=60.0)
        chosen = self.embeddings.currentText()
        for provider_id, refs in models.items():
            if provider_id in servers and isinstance(refs, list):
                for ref in refs:
                    if self.embeddings.findText(ref) < 0:
                        self.embeddings.addItem(ref)
        self.embeddings.setCurrentText(chosen)

    async def choose_embeddings(self) -> None:
        choice = self.embeddings.currentText().strip()
        ref = None if choice in ("", WORDS_ONLY) else choice
        self.use_embeddings.setEnabled(False)
        self.status.setText(f"Trying {ref}…" if ref else "")
        try:
            queued = await self.knowledge.set_embeddings_model(ref)
        except Exception as exc:
            self.status.setText(f"Not changed: {error_text(exc)}")
            self.embeddings.setCurrentText(self.knowledge.embeddings_model or WORDS_ONLY)
            return
        finally:
            self.use_embeddings.setEnabled(True)
        if ref is None:
            self.status.setText("Search uses the documents' words only.")
        else:
            docs = "1 document gets" if queued == 1 else f"{queued} documents get"
            self.status.setText(f"Search uses {ref} too" + (f": {docs} vectors now." if queued else "."))

    def _pick(self, folder: bool) -> None:
        dlg = QFileDialog(self, "Add a folder" if folder else "Add files", str(Path.home()))
        dlg.setFileMode(QFileDialog.FileMode.Directory if folder else QFileDialog.FileMode.ExistingFiles)
        dlg.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dlg.filesSelected.connect(lambda paths: self.bridge.run(self.add(paths), owner=self))
        dlg.open()

    async def add(self, paths: list[str]) -> None:
        """Add what can be added; the status says how many were, and which paths were not, with why."""
        try:
            added = await self.knowledge.add(paths)
        except Exception as exc:
            self.status.setText(f"Not added: {error_text(exc)}")
            return
        n = len(added.documents)
        said = [f"Added {n} document{'s' if n != 1 else ''}."] if n or not added.not_added else []
        if added.not_added:
            said.append("Not added: " + " ".join(added.not_added))
        self.status.setText(" ".join(said))

    def selected(self) -> list[str]:
        return [path for path, item in self.rows.items() if item.isSelected()]

    async def remove(self, paths: list[str]) -> None:
        try:
            for path in paths:
                await self.knowledge.remove(path)
        except Exception as exc:
            self.status.setText(f"Not removed: {error_text(exc)}")
            return
        names = Path(paths[0]).name if len(paths) == 1 else f"{len(paths)} documents"
        self.status.setText(f"Removed {names} from the library; the files stay where they are, and tasks no "
                            "longer search them.")

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.key() in (Qt.Key.Key_Delete, Qt.Key.Key_Backspace) and self.selected():
            self.bridge.run(self.remove(self.selected()), owner=self)
            return
        super().keyPressEvent(event)

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if event.mimeData().hasUrls():
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:
        paths = [u.toLocalFile() for u in event.mimeData().urls() if u.isLocalFile()]
        if paths:
            event.acceptProposedAction()
            self.bridge.run(self.add(paths), owner=self)
