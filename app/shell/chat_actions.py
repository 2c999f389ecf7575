"""The main window's chat side: the Chats tab's list, opening a chat, a new chat in one keystroke
(Ctrl+Shift+N; Ctrl+N stays New Task), renaming and deleting one, and a chat turned into a task."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtWidgets import QInputDialog, QMessageBox

from ..chats.panel import ChatPanel
from ..widgets import dialogs

if TYPE_CHECKING:
    from .window_host import ActionsBase
else:
    ActionsBase = object  # see shell/window_host.py


class ChatActions(ActionsBase):
    """Mixed into MainWindow: it owns `panel`, `sidebar`, `stack`, `bridge`, `ctl` and `close_panel`."""

    def new_chat(self) -> ChatPanel | None:
        """A chat on the default model, open and ready to type into: no dialog, nothing to choose first."""
        if not self._ready():
            return None
        self.sidebar.set_mode("chats")
        self.bridge.run(self._create_chat())
        return None

    async def _create_chat(self) -> None:
        info = await self.bridge.create_chat()
        await self.reload_tasks()
        self.open_chat(info.id)

    def open_chat(self, chat_id: str) -> ChatPanel | None:
        if isinstance(self.panel, ChatPanel) and self.panel.chat_id == chat_id:
            return self.panel
        info = self.chats.get(chat_id)
        if info is None or self.disposed:
            return None
        self.close_panel(select_none=False)
        self.sidebar.select(None)
        panel = self.panel = ChatPanel(self.bridge, info, self.ctl.prefs.enter_sends, self.ctl.view_states.get(chat_id))
        panel.title_changed.connect(self._panel_title_changed)
        panel.settings_requested.connect(self.ctl.open_settings)
        panel.became_task.connect(self._chat_became_task)
        self.stack.addWidget(panel)
        self.stack.setCurrentWidget(panel)
        self.sidebar.set_mode("chats")
        self.sidebar.select_chat(chat_id)
        self._enable_task_actions()
        self.ctl.restore_draft(chat_id, panel.composer)
        panel.focus_composer()
        return panel

    def _chat_became_task(self, task_id: str) -> None:
        self.sidebar.set_mode("tasks")
        self.bridge.run(self._open_new(task_id))

    def rename_chat(self, chat_id: str | None) -> QInputDialog | None:
        if not chat_id or (info := self.chats.get(chat_id)) is None:
            return None

        async def rename(title: str) -> None:
            await self.bridge.rename_chat(chat_id, title)
            await self.reload_tasks()

        return dialogs.ask_text(self, "Rename chat", "Title:", info.title or "",
                                lambda title: self.bridge.run(rename(title)))

    def delete_chat(self, chat_id: str | None) -> QMessageBox | None:
        if not chat_id or (info := self.chats.get(chat_id)) is None:
            return None

        async def delete() -> None:
            if isinstance(self.panel, ChatPanel) and self.panel.chat_id == chat_id:
                self.close_panel()
            await self.bridge.delete_chat(chat_id)
            self.ctl.keep_draft(chat_id, None)  # its unsent text goes with it
            await self.reload_tasks()

        extra = " Its answer in progress will be stopped." if self.bridge.chats.is_running(chat_id) else ""
        return dialogs.confirm(self, "Delete chat?", f"Delete “{info.title or 'New chat'}”?", "Delete",
                               lambda: self.bridge.run(delete()), informative=f"This cannot be undone.{extra}",
                               danger=True)
