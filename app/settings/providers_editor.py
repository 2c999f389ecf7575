"""Settings → Models: the provider list with presets, a form for the selected one, "Test connection", and the
default model. Keys typed here are handed to the runtime's keyring on save and never kept in settings.json.
A server's context window is asked from the server unless the form gives it in tokens (`context_window`); one set
per model in settings.json is shown, not edited here."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from functools import partial
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from ..widgets import dialogs
from .presets import NOTES, provider_entry

if TYPE_CHECKING:
    from runtime.api import Preset

ASK_SERVER = "Ask the server"
MAX_WINDOW = 10_000_000
KIND_LABELS = {"openai": "OpenAI-compatible server", "llama_cpp": "Bundled model (llama.cpp, offline)",
               "scripted": "Scripted (tests)"}


def describe(p: dict) -> str:
    where = p.get("base_url") or ("bundled, offline" if p.get("kind") == "llama_cpp" else p.get("kind", ""))
    return f"{p.get('id', '?')}  —  {where}"


class ProvidersEditor(QWidget):
    test_requested = Signal(dict, str)  # provider, typed api key ("" when none)
    changed = Signal()

    def __init__(self, providers: list[dict], default_model: str, presets: Iterable[Preset] = (),
                 parent: QWidget | None = None):
        super().__init__(parent)
        self.presets = {p.id: p for p in presets}
        self.providers = [copy.deepcopy(p) for p in providers]
        self.keys: dict[str, str] = {}  # provider id -> key typed in this session
        self.notes: dict[str, str] = {}
        self._loading = False
        lay = QHBoxLayout(self)
        left = QVBoxLayout()
        self.list = QListWidget()
        self.list.setObjectName("Providers")
        self.list.currentRowChanged.connect(self._select)
        left.addWidget(self.list, 1)
        buttons = QHBoxLayout()
        self.add = QPushButton("Add ▾")
        menu = QMenu(self.add)
        for p in presets:
            menu.addAction(p.label, partial(self.add_preset, p.id))
        self.add.setMenu(menu)
        self.remove = QPushButton("Remove")
        self.remove.clicked.connect(self._remove)
        buttons.addWidget(self.add)
        buttons.addWidget(self.remove)
        left.addLayout(buttons)
        lay.addLayout(left, 2)

        right = QVBoxLayout()
        form = self.form = QFormLayout()
        self.id = QLineEdit()
        self.id.setToolTip("Used in model references: id/model-name")
        self.kind = QLabel()
        self.url = QLineEdit()
        self.url.setPlaceholderText("http://127.0.0.1:11434/v1")
        self.key = QLineEdit()
        self.key.setEchoMode(QLineEdit.EchoMode.Password)
        self.model_path = QLineEdit()
        self.model_path.setPlaceholderText("Optional: a .gguf file; empty uses the bundled model")
        form.addRow("Name", self.id)
        form.addRow("Kind", self.kind)
        form.addRow("Server URL", self.url)
        form.addRow("API key", self.key)
        form.addRow("Model file", self.model_path)
        self.context = QSpinBox()
        self.context.setRange(0, MAX_WINDOW)
        self.context.setSingleStep(1024)
        self.context.setSuffix(" tokens")
        self.context.setSpecialValueText(ASK_SERVER)  # 0: not set
        self.context.setToolTip("How many tokens one request to this server's models may hold. Ask the server: "
                               "Hearth reads it from the server, or assumes 8,192 when the server does not say.")
        self.context.valueChanged.connect(self._window_edited)
        self.per_model = QLabel()  # a figure per model, from settings.json
        self.per_model.setObjectName("Muted")
        window_row = QHBoxLayout()
        window_row.addWidget(self.context)
        window_row.addWidget(self.per_model, 1)
        self.context_row = QWidget()
        self.context_row.setLayout(window_row)
        window_row.setContentsMargins(0, 0, 0, 0)
        form.addRow("Context window", self.context_row)
        right.addLayout(form)
        self.note = QLabel()
        self.note.setObjectName("Muted")
        self.note.setWordWrap(True)
        right.addWidget(self.note)
        test_row = QHBoxLayout()
        self.test = QPushButton("Test connection")
        self.test.clicked.connect(self._test)
        test_row.addWidget(self.test)
        test_row.addStretch(1)
        right.addLayout(test_row)
        self.result = QLabel()
        self.result.setWordWrap(True)
        self.result.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        right.addWidget(self.result)
        right.addStretch(1)
        default_form = QFormLayout()
        self.default_model = QComboBox()
        self.default_model.setEditable(True)
        self.default_model.setToolTip("provider/model used for new tasks")
        self.default_model.setCurrentText(default_model)
        default_form.addRow("Default model", self.default_model)
        right.addLayout(default_form)
        lay.addLayout(right, 3)
        for w in (self.id, self.url, self.key, self.model_path):
            w.textEdited.connect(self._edited)
        self.default_model.currentTextChanged.connect(lambda _t: self.changed.emit())
        self._refill(0)
        self._offer_models([default_model])

    # -- list --

    def _refill(self, row: int) -> None:
        self.list.blockSignals(True)
        self.list.clear()
        for p in self.providers:
            self.list.addItem(QListWidgetItem(describe(p)))
        self.list.blockSignals(False)
        if self.providers:
            self.list.setCurrentRow(max(0, min(row, len(self.providers) - 1)))
        else:
            self._select(-1)

    def add_preset(self, key: str, models: list[str] | None = None) -> dict:
        entry = provider_entry(self.presets[key], {p["id"] for p in self.providers})
        self.providers.append(entry)
        note, example = NOTES.get(key, ("", ""))
        self.notes[entry["id"]] = note
        offered = models or ([example] if example else [])
        self._offer_models([f"{entry['id']}/{m}" for m in offered])
        self._refill(len(self.providers) - 1)
        self.changed.emit()
        return entry

    def _remove(self) -> None:
        row = self.list.currentRow()
        if not 0 <= row < len(self.providers):
            return
        name = self.providers[row].get("id", "this provider")

        def remove() -> None:
            if 0 <= row < len(self.providers) and self.providers[row].get("id") == name:
                self.providers.pop(row)
                self._refill(row)
                self.changed.emit()

        self.confirm_box = dialogs.confirm(
            self, "Remove provider?", f"Remove {name}?", "Remove", remove,
            informative="Tasks that use its models stop working until it is added again. Nothing is saved "
                        "until you press Save.", danger=True)

    def current(self) -> dict | None:
        row = self.list.currentRow()
        return self.providers[row] if 0 <= row < len(self.providers) else None

    # -- form --

    def _select(self, row: int) -> None:
        p = self.current() if row >= 0 else None
        self._loading = True
        try:
            enabled = p is not None
            for w in (self.id, self.url, self.key, self.model_path, self.context, self.remove):
                w.setEnabled(enabled)
            self.test.setEnabled(enabled)
            p = p or {}
            kind = p.get("kind", "")
            self.id.setText(p.get("id", ""))
            self.kind.setText(KIND_LABELS.get(kind, kind))
            self.url.setText(p.get("base_url") or "")
            self.form.setRowVisible(self.url, kind == "openai")
            self.model_path.setText(p.get("model_path") or "")
            self.form.setRowVisible(self.model_path, kind == "llama_cpp")
            self.key.setText(self.keys.get(p.get("id", ""), ""))
            self.form.setRowVisible(self.key, kind == "openai")
            self._show_window(p.get("context_window"))
            self.form.setRowVisible(self.context_row, kind == "openai")
            ref = p.get("api_key_ref")
            self.key.setPlaceholderText(
                f"Saved ({ref}) — type to replace" if ref else "Not needed for local servers")
            self.note.setText(self.notes.get(p.get("id", ""), ""))
            self.result.clear()
        finally:
            self._loading = False

    def _show_window(self, setting: int | dict | None) -> None:
        per_model = isinstance(setting, dict)
        self.context.setValue(setting if isinstance(setting, int) else 0)
        self.context.setVisible(not per_model)
        self.per_model.setVisible(per_model)
        if isinstance(setting, dict):
            self.per_model.setText("Per model, in settings.json: " + ", ".join(
                f"{model} {tokens:,}" for model, tokens in setting.items()))

    def _window_edited(self, tokens: int) -> None:
        p = self.current()
        if p is None or self._loading or isinstance(p.get("context_window"), dict):
            return
        p["context_window"] = tokens or None  # None: ask the server
        self.changed.emit()

    def _edited(self, _text: str) -> None:
        p = self.current()
        if p is None or self._loading:
            return
        old_id = p["id"]
        new_id = self.id.text().strip() or old_id
        if new_id != old_id:
            p["id"] = new_id
            if old_id in self.keys:
                self.keys[new_id] = self.keys.pop(old_id)
        if p.get("kind") == "openai":
            p["base_url"] = self.url.text().strip()
            key = self.key.text()
            if key:
                self.keys[new_id] = key
                p["api_key_ref"] = f"keyring:{new_id}"
            else:
                self.keys.pop(new_id, None)
        if p.get("kind") == "llama_cpp":
            p["model_path"] = self.model_path.text().strip() or None
        self.list.currentItem().setText(describe(p))
        self.changed.emit()

    def _test(self) -> None:
        p = self.current()
        if p is not None:
            self.result.setText("Testing…")
            self.test.setEnabled(False)
            self.test_requested.emit(copy.deepcopy(p), self.keys.get(p["id"], ""))

    def test_finished(self, ok: bool, text: str, models: list[str] | None = None) -> None:
        self.test.setEnabled(True)
        self.result.setText(("✓ " if ok else "✗ ") + text)
        p = self.current()
        if ok and p is not None and models:
            self._offer_models([f"{p['id']}/{m}" for m in models])

    def _offer_models(self, refs: list[str]) -> None:
        for ref in refs:
            if self.default_model.findText(ref) < 0:
                self.default_model.addItem(ref)

    def values(self) -> tuple[list[dict], str, dict[str, str]]:
        providers = [{k: v for k, v in p.items() if v not in (None, "")} for p in self.providers]
        return providers, self.default_model.currentText().strip(), dict(self.keys)
