"""Where the window's tasks live: this computer's data folder, or a Hearth server. File ▸ Connect to a Server…
(connect_dialog.py) and File ▸ Use This Computer's Tasks; mixed into `HearthApp`.

Connecting checks the token first (`runtime.api.connect_server`): until the server took it nothing changes, and what
went wrong is said in the dialog. Then the token goes to the keyring (never a file), the runtime the window shows is
closed and the new one is shown in a new main window: the window is a disposable viewer, so nothing of the old
runtime's lists or panels stays. The window starts on this computer's tasks; the dialog offers the last server."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from runtime.paths import data_folder

from ..core.bridge import RuntimeBridge
from ..core.prefs import Prefs
from ..core.util import error_text, spawn
from .connect_dialog import ConnectDialog

if TYPE_CHECKING:
    from runtime.api import RemoteRuntime, Runtime

    from ..settings.window import SettingsWindow
    from .main_window import MainWindow


REFUSED = "The server refused this token (revoked, or never issued by {url}): give a new one."
NOT_KEPT = ("This computer has no usable system keyring, so the token is not kept (never in a file): Hearth asks "
            "for it again next time.")


class TasksPlace:
    home: Path | None
    prefs: Prefs
    rt: Runtime | None
    bridge: RuntimeBridge | None
    window: MainWindow | None
    settings_window: SettingsWindow | None
    model_preload: asyncio.Task | None
    connect_window: ConnectDialog | None
    _closing: bool

    if TYPE_CHECKING:  # HearthApp's own, which mixes this in
        def show_main(self) -> MainWindow: ...
        def hide_window(self) -> None: ...
        async def open_runtime(self) -> None: ...
        async def _attach(self, bridge: RuntimeBridge) -> None: ...

    def connect_dialog(self, refused: bool = False) -> ConnectDialog | None:
        """File ▸ Connect to a Server…, its fields filled from the last server and the keyring; `refused`: the
        server the window shows refused its token, and the dialog asks for a new one."""
        if self.bridge is None:
            return None
        if self.connect_window is not None:  # kept until the next (closing it while it connects gives up)
            self.connect_window.close()
            self.connect_window.deleteLater()
        api = self.bridge.api
        url = self.prefs.server
        dlg = ConnectDialog(url, "", len(self.bridge.working_tasks()), self.window)
        dlg.connect_requested.connect(lambda url, token: spawn(self.connect_server(dlg, url, token)))
        if refused:
            dlg.failed(REFUSED.format(url=url))
        elif url:  # the keyring may talk D-Bus: read it off the loop
            spawn(self._fill_token(dlg, api, url), owner=dlg, load=True)
        dlg.show()
        self.connect_window = dlg
        return dlg

    @staticmethod
    async def _fill_token(dlg: ConnectDialog, api: ModuleType, url: str) -> None:
        token = await asyncio.to_thread(api.saved_token, url)
        if token and not dlg.token.text() and dlg.url.text().strip() == url:
            dlg.token.setText(token)

    def _token_refused(self) -> None:
        """A 401 during the session (the token revoked): ask for a new one, once."""
        if (self.connect_window is None or not self.connect_window.isVisible()) and not self._closing:
            self.connect_dialog(refused=True)

    async def connect_server(self, dlg: ConnectDialog, url: str, token: str) -> None:
        """The server's tasks in the window, once the server took the token; until then nothing changes and what
        went wrong is said in the dialog."""
        bridge = self.bridge
        if bridge is None:
            return
        api = bridge.api
        try:
            rt = await api.connect_server(url, token)
        except api.HearthError as exc:
            if not self._closing and dlg.isVisible():
                dlg.failed(REFUSED.format(url=url) if isinstance(exc, api.TokenRefused) else error_text(exc))
            return
        if self._closing or not dlg.isVisible():  # quitting, or the person closed the dialog meanwhile
            await rt.aclose()
            return
        try:
            await asyncio.to_thread(api.save_token, rt.url, token)
            kept = ""
        except api.ConfigError:  # no keyring (or a locked one): connected for this session only
            kept = NOT_KEPT
        self.prefs.server = rt.url
        dlg.close()
        await self._switch(lambda: self._remote_bridge(rt, api))
        if kept and self.window is not None:
            self.window.statusBar().showMessage(kept, 15_000)

    def _remote_bridge(self, rt: RemoteRuntime, api: ModuleType) -> RuntimeBridge:
        bridge = RuntimeBridge(rt, api, server=rt.url, home=data_folder(self.home))
        bridge.token_refused.connect(self._token_refused)
        return bridge

    def use_this_computer(self) -> None:
        """File ▸ Use This Computer's Tasks: the server left (its tasks go on there), this data folder opened."""
        if self.bridge is not None and self.bridge.remote:
            spawn(self._switch(None))

    async def _switch(self, bridge_to: Callable[[], RuntimeBridge] | None) -> None:
        """Close the runtime the window shows and show the one `bridge_to` makes (None: this computer's, opened
        again) in a new window: the window is a disposable viewer, so nothing of the old runtime's lists or panels
        stays. The new bridge is made once the old one is closed, which cancels every subscription there is."""
        old, self.bridge = self.bridge, None
        if self.settings_window is not None:
            self.settings_window.close_without_asking()
        if self.model_preload is not None:
            self.model_preload.cancel()
            self.model_preload = None
        self.hide_window()
        if old is not None:
            await old.aclose()
        self.rt = None
        self.show_main()
        if bridge_to is None:
            await self.open_runtime()
        else:
            await self._attach(bridge_to())
