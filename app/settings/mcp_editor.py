"""Settings → Tools: MCP servers (Claude Desktop's `mcpServers` shape). Each action goes straight to the
runtime: add by command line, import a Claude Desktop config (imported servers are not approved), approve,
remove (after asking, as the providers tab does). The exact command line is always shown; a server is only
launched once the person approved it."""

from __future__ import annotations

import shlex
from collections.abc import Awaitable
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from ..core.bridge import RuntimeBridge
from ..core.util import error_text
from ..widgets import dialogs


def parse_command(line: str) -> dict:
    """A settings entry from what the person typed: an http(s) URL or a shell-like command line."""
    line = line.strip()
    if line.startswith(("http://", "https://")):
        return {"url": line}
    argv = shlex.split(line)  # ValueError on unbalanced quotes
    if not argv:
        raise ValueError("the command line is empty")
    return {"command": argv[0], "args": argv[1:]}


class McpEditor(QWidget):
    changed = Signal()

    def __init__(self, bridge: RuntimeBridge, parent: QWidget | None = None):
        super().__init__(parent)
        self.bridge = bridge
        lay = QVBoxLayout(self)
        intro = QLabel("MCP servers give tasks more tools. Hearth shows each server's exact command line and "
                       "starts it only after you approved it.")
        intro.setWordWrap(True)
        intro.setObjectName("Muted")
        lay.addWidget(intro)
        self.tree = QTreeWidget()
        self.tree.setHeaderLabels(["Name", "Command line", "Status"])
        self.tree.setRootIsDecorated(False)
        self.tree.setColumnWidth(0, 110)
        self.tree.setColumnWidth(1, 420)
        lay.addWidget(self.tree, 1)
        add_row = QHBoxLayout()
        self.name = QLineEdit()
        self.name.setPlaceholderText("name")
        self.name.setMaximumWidth(130)
        self.cmd = QLineEdit()
        self.cmd.setPlaceholderText("command line, e.g. uvx mcp-server-time — or an http:// URL")
        self.trust = QCheckBox("Approve")
        self.trust.setToolTip("I read this command line and allow Hearth to start it")
        self.add = QPushButton("Add")
        self.add.clicked.connect(self._add)
        for w in (self.name, self.cmd, self.trust, self.add):
            add_row.addWidget(w, 1 if w is self.cmd else 0)
        lay.addLayout(add_row)
        buttons = QHBoxLayout()
        self.import_button = QPushButton("Import Claude Desktop config…")
        self.import_button.clicked.connect(self._pick)
        self.approve = QPushButton("Approve selected")
        self.approve.clicked.connect(self._approve)
        self.remove = QPushButton("Remove selected")
        self.remove.clicked.connect(self._remove)
        buttons.addWidget(self.import_button)
        buttons.addStretch(1)
        buttons.addWidget(self.approve)
        buttons.addWidget(self.remove)
        lay.addLayout(buttons)
        self.message = QLabel()
        self.message.setWordWrap(True)
        lay.addWidget(self.message)
        self.confirm_box: QMessageBox | None = None  # the "remove?" question, while it is open
        self.refill()

    def refill(self) -> None:
        self.tree.clear()
        for name, line, approved in self.bridge.mcp.servers():
            item = QTreeWidgetItem([name, line, "approved" if approved else "needs your approval"])
            item.setToolTip(1, line)
            item.setData(0, Qt.ItemDataRole.UserRole, name)
            self.tree.addTopLevelItem(item)

    def selected(self) -> str | None:
        item = self.tree.currentItem()
        return item.data(0, Qt.ItemDataRole.UserRole) if item is not None else None

    def _run(self, coro: Awaitable[object], done: str) -> None:
        async def go() -> None:
            try:
                result = await coro
            except Exception as exc:
                self.message.setText(error_text(exc))
                return
            self.message.setText(done.format(result=result))
            self.refill()
            self.changed.emit()

        self.bridge.run(go(), owner=self)

    def typed(self) -> str | None:
        """What the add row holds but was not added yet (the server's name, else its command line): closing
        Settings asks about it rather than drop it."""
        return self.name.text().strip() or self.cmd.text().strip() or None

    def _typed_server(self) -> tuple[str, dict, bool] | None:
        """The add row as (name, config, approved), clearing it; None (and why, in the message) when invalid."""
        name = self.name.text().strip()
        try:
            cfg = parse_command(self.cmd.text())
        except ValueError as exc:
            self.message.setText(f"That command line does not parse: {exc}.")
            return None
        if not name:
            self.message.setText("Give the server a name.")
            return None
        approve = self.trust.isChecked()
        self.clear_typed()
        return name, cfg, approve

    def clear_typed(self) -> None:
        self.name.clear()
        self.cmd.clear()
        self.trust.setChecked(False)

    def _add(self) -> None:
        server = self._typed_server()
        if server is not None:
            name, cfg, approve = server
            self._run(self.bridge.mcp.add(name, cfg, approve=approve), _added(name, approve))

    async def add_typed(self) -> bool:
        """Add the server in the add row (Settings is closing with it typed); False when it is not valid or
        adding failed, and the message says why."""
        server = self._typed_server()
        if server is None:
            return False
        name, cfg, approve = server
        try:
            result = await self.bridge.mcp.add(name, cfg, approve=approve)
        except Exception as exc:
            self.message.setText(error_text(exc))
            return False
        self.message.setText(_added(name, approve).format(result=result))
        self.refill()
        self.changed.emit()
        return True

    def _approve(self) -> None:
        name = self.selected()
        if name:
            self._run(self.bridge.approve_mcp_server(name), f"Approved {name}: {{result}}")

    def _remove(self) -> None:
        name = self.selected()
        if not name:
            return
        self.confirm_box = dialogs.confirm(
            self, "Remove MCP server?", f"Remove {name}?", "Remove",
            lambda: self._run(self.bridge.mcp.remove(name), f"Removed {name}."),
            informative="Tasks stop getting its tools, and its approval is forgotten. This is saved at once; "
                        "add the server again to use it.", danger=True)

    def _pick(self) -> None:
        dlg = QFileDialog(self, "Import Claude Desktop config", str(Path.home()), "JSON (*.json);;All files (*)")
        dlg.setFileMode(QFileDialog.FileMode.ExistingFile)
        dlg.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dlg.fileSelected.connect(self.import_file)
        dlg.open()

    def import_file(self, path: str) -> None:
        async def go() -> int:
            found = await self.bridge.mcp.import_config(path)
            return len(found)

        self._run(go(), "Imported {result} server(s). Review each command line, then approve the ones you trust.")


def _added(name: str, approved: bool) -> str:
    return f"Added {name}: {{result}}" + ("" if approved else " — approve it to use it.")
