"""The page shown when no task is open: a friendly first start that says what Hearth can do."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

EXAMPLES = (
    "Read the files I attach and summarise them in five bullet points",
    "Write a Python script that renames my photos by date",
    "Plan a three-day trip and keep the plan in a notes file",
)


class WelcomePage(QWidget):
    new_task = Signal(str)  # goal text to prefill ("" for none)
    use_server = Signal(str, list)  # preset id, its models: a local model server found running

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        outer = QVBoxLayout(self)
        outer.addStretch(1)
        box = QFrame()
        box.setMaximumWidth(620)
        lay = QVBoxLayout(box)
        lay.setSpacing(12)
        self.title = QLabel("Welcome to Hearth")
        self.title.setObjectName("Welcome")
        lay.addWidget(self.title)
        self.body = QLabel(
            "Hearth is a personal agent that runs on your computer. Give a task a goal and talk to it: it can "
            "read and write files in the task's own folder, run commands after asking you, and it keeps working "
            "when you close the window. Everything stays in one local database."
        )
        self.body.setWordWrap(True)
        lay.addWidget(self.body)
        tries = QLabel("Try one of these:")
        tries.setObjectName("Muted")
        lay.addWidget(tries)
        for text in EXAMPLES:
            b = QPushButton(f"  {text}")
            b.setStyleSheet("text-align: left; padding: 8px 12px;")
            b.setCursor(Qt.CursorShape.PointingHandCursor)
            b.clicked.connect(lambda _c=False, t=text: self.new_task.emit(t))
            lay.addWidget(b)
        row = QHBoxLayout()
        self.start = QPushButton("+  New task")
        self.start.setObjectName("Primary")
        self.start.clicked.connect(lambda: self.new_task.emit(""))
        row.addWidget(self.start)
        row.addStretch(1)
        lay.addLayout(row)
        self.model = QLabel()
        self.model.setObjectName("Muted")
        self.model.setWordWrap(True)
        lay.addWidget(self.model)
        found = QHBoxLayout()
        self.found = QLabel()
        self.found.setWordWrap(True)
        self.use = QPushButton("Set it up")
        self.use.clicked.connect(lambda: self.use_server.emit(*self._found))
        found.addWidget(self.found, 1)
        found.addWidget(self.use)
        lay.addLayout(found)
        self.found.hide()
        self.use.hide()
        self._found: tuple[str, list] = ("", [])
        h = QHBoxLayout()
        h.addStretch(1)
        h.addWidget(box, 10)
        h.addStretch(1)
        outer.addLayout(h)
        outer.addStretch(2)
        self.set_starting(True)

    def set_detected(self, preset_id: str, label: str, models: list[str]) -> None:
        """Offer a model server found running on this computer."""
        shown = ", ".join(models[:3]) + (" …" if len(models) > 3 else "")
        self._found = (preset_id, list(models))
        self.found.setText(f"{label} is running on this computer ({shown}). Use it for new tasks?")
        self.found.show()
        self.use.show()

    def set_starting(self, starting: bool, model: str = "", bundled: bool = True, has_tasks: bool = False) -> None:
        self.start.setEnabled(not starting)
        for b in self.findChildren(QPushButton):
            b.setEnabled(not starting)
        if starting:
            self.model.setText("Starting…")
            return
        self.title.setText("Pick a task, or start a new one" if has_tasks else "Welcome to Hearth")
        hint = (" It is small and works offline; for smarter answers add Ollama, LM Studio or OpenAI in Settings."
                if bundled else "")
        self.model.setText(f"New tasks use <b>{model}</b>.{hint}")

    def set_server(self, where: str, has_tasks: bool = False) -> None:
        """The tasks are a Hearth server's: new ones use the server's default model."""
        self.set_starting(False, has_tasks=has_tasks)
        self.model.setText(f"The tasks shown live on the Hearth <b>{where}</b>; new tasks use the server's default "
                           "model and run there while this computer sleeps.")
