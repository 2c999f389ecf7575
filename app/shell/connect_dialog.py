"""File ▸ Connect to a Server…: a Hearth server's address and an API token (`hearth server user add` prints it).
The application checks the token against the server before anything changes: a refusal, an unreachable address or
one that is no Hearth server's is said here, in the dialog, and the window stays on the tasks it shows; closing the
dialog while it connects gives up. The token
field starts from the keyring's entry for the last server (the token is kept there only, never in a file)."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QDialog, QFormLayout, QLabel, QLineEdit, QVBoxLayout, QWidget

from ..widgets import dialogs


class ConnectDialog(QDialog):
    connect_requested = Signal(str, str)  # address, token

    def __init__(self, url: str = "", token: str = "", working: int = 0, parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle("Connect to a server")
        self.setModal(False)  # a nested event loop would break qasync
        self.setMinimumWidth(480)
        lay = QVBoxLayout(self)
        intro = QLabel("Watch and steer the tasks of a Hearth server (hearth serve) from this window. Its tasks go "
                       "on running when this computer sleeps.")
        intro.setWordWrap(True)
        intro.setObjectName("Muted")
        lay.addWidget(intro)
        form = QFormLayout()
        self.url = QLineEdit(url)
        self.url.setPlaceholderText("http://HOST:PORT or https://HOST")
        form.addRow("Address", self.url)
        self.token = QLineEdit(token)
        self.token.setEchoMode(QLineEdit.EchoMode.Password)
        self.token.setPlaceholderText("The token `hearth server user add` printed")
        form.addRow("Token", self.token)
        lay.addLayout(form)
        kept = QLabel("The token is kept in the system keyring, never in a file. Chats, teams, memory, knowledge, "
                      "models and Settings stay this computer's; File ▸ Use This Computer's Tasks comes back here.")
        kept.setWordWrap(True)
        kept.setObjectName("Muted")
        lay.addWidget(kept)
        if working:
            many = working > 1
            stops = QLabel(f"{working} task{'s are' if many else ' is'} working on this computer: connecting stops "
                           f"{'them' if many else 'it'} (marked interrupted; you can continue later).")
            stops.setWordWrap(True)
            lay.addWidget(stops)
        self.error = dialogs.error_line()
        lay.addWidget(self.error)
        buttons, self.connect_button = dialogs.action_buttons("Connect", self._connect, self.close)
        lay.addWidget(buttons)
        (self.token if url else self.url).setFocus()

    def _connect(self) -> None:
        url, token = self.url.text().strip(), self.token.text().strip()
        if not url or not token:
            self.failed("Give the server's address and your token.")
            return
        self.error.hide()
        self.connect_button.setEnabled(False)
        self.connect_button.setText("Connecting…")
        self.connect_requested.emit(url, token)

    def failed(self, message: str) -> None:
        self.error.setText(message)
        self.error.show()
        self.connect_button.setText("Connect")
        self.connect_button.setEnabled(True)
