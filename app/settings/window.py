"""The Settings window: Models (two sub-tabs: Providers and presets; Local models: installed, catalog, downloads),
Tools (MCP servers), Skills, Memory, Knowledge (the document library), Jobs (the background work's log),
Permissions (sandbox, rules, paused MCP servers) and Appearance (theme, Enter sends). Appearance is app-only and
applies at once. Providers are saved with the Save button through the runtime (`save_settings`, keys via
`set_api_key` into the OS keyring); every other tab applies its changes at once. Closing the window pauses running
downloads (the partial file is kept; Download resumes it): nothing would show their progress once the window is
gone."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import (
    QAbstractButton,
    QButtonGroup,
    QCheckBox,
    QDialog,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QRadioButton,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from ..core.bridge import RuntimeBridge
from ..core.prefs import Prefs
from ..core.util import error_text
from ..widgets import dialogs
from .jobs_page import JobsPage
from .knowledge_page import KnowledgePage
from .mcp_editor import McpEditor
from .memory_page import MemoryPage
from .model_manager import ModelManager
from .permissions_page import PermissionsPage
from .providers_editor import ProvidersEditor
from .skills_page import SkillsPage


class SettingsWindow(QDialog):
    theme_changed = Signal(str)
    enter_sends_changed = Signal(bool)
    saved = Signal()

    def __init__(self, bridge: RuntimeBridge, prefs: Prefs, parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle("Hearth Settings")
        self.setModal(False)
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.resize(820, 520)
        self.bridge = bridge
        self.prefs = prefs
        settings = bridge.settings
        # Every value, defaults included (Settings.dump() leaves defaults out: it is for writing the file).
        dump = settings.model_dump(mode="json", by_alias=True, exclude_none=True)
        lay = QVBoxLayout(self)
        self.tabs = QTabWidget()
        self.providers = ProvidersEditor(dump.get("providers", []), dump.get("default_model", ""),
                                         bridge.providers.presets())
        self.providers.test_requested.connect(self._test)
        self.providers.changed.connect(self._dirty)
        self.local_models = ModelManager(bridge.models)
        self.models = QTabWidget()
        self.models.setDocumentMode(True)
        self.models.addTab(self.providers, "Providers")
        self.models.addTab(self.local_models, "Local models")
        self.tabs.addTab(self.models, "Models")
        self.mcp = McpEditor(bridge)
        self.tabs.addTab(self.mcp, "Tools (MCP)")
        self.skills = SkillsPage(bridge)
        self.tabs.addTab(self.skills, "Skills")
        self.memory = MemoryPage(bridge)
        self.tabs.addTab(self.memory, "Memory")
        self.knowledge = KnowledgePage(bridge)
        self.tabs.addTab(self.knowledge, "Knowledge")
        self.jobs = JobsPage(bridge)
        self.tabs.addTab(self.jobs, "Jobs")
        self.permissions = PermissionsPage(bridge)
        self.tabs.addTab(self.permissions, "Permissions")
        # Rules change from approval cards, and jobs end, while this window is open: read again when shown.
        self.tabs.currentChanged.connect(self._tab_shown)
        self.tabs.addTab(self._appearance(), "Appearance")
        lay.addWidget(self.tabs, 1)
        row = QHBoxLayout()
        self.status = QLabel()
        self.status.setWordWrap(True)
        self.status.setObjectName("Muted")
        row.addWidget(self.status, 1)
        self.save = QPushButton("Save")
        self.save.setObjectName("Primary")
        self.save.clicked.connect(self._save)
        close = QPushButton("Close")
        close.clicked.connect(self.close)
        row.addWidget(self.save)
        row.addWidget(close)
        lay.addLayout(row)
        self.save.setEnabled(False)

    def _appearance(self) -> QWidget:
        page = QWidget()
        lay = QVBoxLayout(page)
        lay.addWidget(QLabel("Theme"))
        self.theme_group = QButtonGroup(page)
        for key, label in (("system", "Follow the system"), ("light", "Light"), ("dark", "Dark")):
            button = QRadioButton(label)
            button.setProperty("theme", key)
            button.setChecked(self.prefs.theme == key)
            self.theme_group.addButton(button)
            lay.addWidget(button)
        self.theme_group.buttonToggled.connect(self._theme)
        lay.addSpacing(12)
        self.enter = QCheckBox("Enter sends the message (Shift+Enter for a new line)")
        self.enter.setChecked(self.prefs.enter_sends)
        self.enter.toggled.connect(self._enter)
        lay.addWidget(self.enter)
        lay.addStretch(1)
        return page

    def show_page(self, page: str) -> None:
        if page == "models":  # the local models: where a bigger one is downloaded
            self.tabs.setCurrentWidget(self.models)
            self.models.setCurrentWidget(self.local_models)
            return
        pages: dict[str, PermissionsPage | JobsPage] = {"permissions": self.permissions, "jobs": self.jobs}
        widget = pages.get(page)
        if widget is not None:
            if self.tabs.currentWidget() is widget:
                widget.refresh()  # switching to it refreshes it; already there, it may be stale
            self.tabs.setCurrentWidget(widget)

    def _tab_shown(self, index: int) -> None:
        for page in (self.permissions, self.jobs):
            if self.tabs.widget(index) is page:
                page.refresh()

    def set_theme(self, key: str) -> None:
        for button in self.theme_group.buttons():
            if button.property("theme") == key:
                button.setChecked(True)

    def _theme(self, button: QAbstractButton, checked: bool) -> None:
        if checked:
            self.prefs.theme = button.property("theme")
            self.theme_changed.emit(self.prefs.theme)

    def _enter(self, on: bool) -> None:
        self.prefs.enter_sends = on
        self.enter_sends_changed.emit(on)

    def _dirty(self) -> None:
        self.save.setEnabled(True)
        self.status.setText("Unsaved changes.")

    @property
    def dirty(self) -> bool:
        """Model settings not saved, or an MCP server typed but not added."""
        return self.save.isEnabled() or self.mcp.typed() is not None

    def _unsaved(self) -> str:
        said = ["The model settings have changes that are not saved."] if self.save.isEnabled() else []
        if (typed := self.mcp.typed()) is not None:
            said.append(f"The MCP server “{typed}” you typed is not added yet.")
        return " ".join(said)

    def closeEvent(self, event: QCloseEvent) -> None:
        """Unsaved changes are never dropped silently: ask to save or discard them."""
        if not self.dirty:
            self.local_models.pause_all()
            event.accept()
            return
        event.ignore()
        self.close_box = dialogs.choose(
            self, "Save changes?", self._unsaved(),
            [("Save", lambda: self._save(close_after=True)), ("Discard", self._discard)])

    def _discard(self) -> None:
        self.save.setEnabled(False)
        self.mcp.clear_typed()
        self.close()

    def ask_before_quit(self, quit_app: Callable[[], None]) -> None:
        """Hearth is quitting with unsaved changes here: save or discard them, then `quit_app()`; Cancel (or a
        save that fails, which says why) keeps Hearth running."""
        def discard_and_quit() -> None:
            self._discard()
            quit_app()

        self.show()
        self.raise_()
        self.close_box = dialogs.choose(
            self, "Save changes before quitting?", self._unsaved(),
            [("Save", lambda: self._save(close_after=True, then=quit_app)), ("Discard", discard_and_quit)])

    def close_without_asking(self) -> None:
        """Quit: the app is going away (the person was asked about quitting already)."""
        self._discard()

    # -- runtime --

    def _test(self, provider: dict, key: str) -> None:
        async def go() -> None:
            try:
                models = await self.bridge.test_provider(provider, api_key=key or None)
            except Exception as exc:
                self.providers.test_finished(False, error_text(exc))
                return
            shown = ", ".join(models[:6]) + (" …" if len(models) > 6 else "")
            self.providers.test_finished(True, f"Connected — {len(models)} model(s): {shown}", models)

        self.bridge.run(go(), owner=self)

    def _save(self, close_after: bool = False, then: Callable[[], None] | None = None) -> None:
        providers, default_model, keys = self.providers.values()

        async def go() -> None:
            if self.mcp.typed() is not None and not await self.mcp.add_typed():
                self.tabs.setCurrentWidget(self.mcp)  # its message says what is wrong with the typed server
                return
            # Start from everything the runtime has now (MCP servers may have changed meanwhile).
            data = self.bridge.settings.model_dump(mode="json", by_alias=True, exclude_none=True)
            data.update(providers=providers, default_model=default_model)
            self.save.setEnabled(False)
            self.status.setText("Saving…")
            try:
                for provider in providers:
                    key = keys.get(provider["id"])
                    if key:
                        provider["api_key_ref"] = await self.bridge.set_api_key(provider["id"], key)
                await self.bridge.save_settings(data)
            except Exception as exc:
                self.status.setText(f"Not saved: {error_text(exc)}")
                self.save.setEnabled(True)
                return
            self.providers.keys.clear()
            self.status.setText("Saved. New tasks use these settings.")
            self.saved.emit()
            if close_after:
                self.close()
            if then is not None:
                then()

        self.bridge.run(go(), owner=self)
