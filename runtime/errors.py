"""Typed errors of the runtime facade. Each carries a message a person can read."""

from collections.abc import Sequence
from pathlib import Path


class HearthError(Exception):
    """Base of every error the runtime raises on purpose."""


class TaskNotFound(HearthError):
    def __init__(self, task_id: str):
        super().__init__(f"No task with id {task_id!r}.")
        self.task_id = task_id


class ChatNotFound(HearthError):
    def __init__(self, chat_id: str):
        super().__init__(f"No chat with id {chat_id!r}.")
        self.chat_id = chat_id


class TeamNotFound(HearthError):
    """No such team, or (with `assignment`) no such assignment in it; `team_id` None: an assignment's own id."""

    def __init__(self, team_id: str | None, assignment: str | None = None):
        if assignment is None:
            message = f"No team with id {team_id!r}."
        elif team_id is None:
            message = f"No assignment with id {assignment!r}."
        else:
            message = f"Team {team_id!r} has no assignment {assignment!r}."
        super().__init__(message)
        self.team_id = team_id


class TaskBusy(HearthError):
    """A task (or a chat: `noun`) already has a turn running."""

    def __init__(self, task_id: str, noun: str = "Task"):
        super().__init__(
            f"{noun} {task_id!r} is already working on a turn. Wait for it, stop it, or queue the input."
        )
        self.task_id = task_id


class ProviderError(HearthError):
    """The model provider failed; `message` says what happened and what to check."""

    def __init__(self, message: str, *, status_code: int | None = None, retryable: bool = False):
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.retryable = retryable


class QuotaExhausted(HearthError):
    """A server user's token quota is used up (the HTTP API answers 402)."""

    def __init__(self) -> None:
        super().__init__("Your token quota on this server is used up. Ask the server's administrator for more.")


class ConfigError(HearthError):
    """settings.json or an argument is wrong; the message names the problem."""


class SettingsError(ConfigError):
    """settings.json cannot be used; `path` is the file, so the app can offer to open or reset it."""

    def __init__(self, message: str, path: Path):
        super().__init__(message)
        self.path = path


class ToolError(HearthError):
    """A tool refused or failed; the text goes back to the model and is shown to the person."""


class UndoRefused(HearthError):
    """A turn's changes were not undone: files `changed` since, or that `cannot` be put back (`paths`: both)."""

    def __init__(self, message: str, changed: Sequence[str] = (), cannot: Sequence[str] = ()):
        super().__init__(message)
        self.changed, self.cannot = list(changed), list(cannot)
        self.paths = self.changed + self.cannot


class RequestNotFound(HearthError):
    def __init__(self, task_id: str, request_id: str, noun: str = "Task"):
        super().__init__(f"{noun} {task_id!r} is not waiting for an answer to request {request_id!r}.")


class DataFolderBusy(HearthError):
    """Another Hearth process is using this data folder; only one may run turns on it."""

    def __init__(self, home: str, pid: int | None):
        who = f" (process {pid})" if pid else ""
        super().__init__(
            f"Hearth is already running with the data folder {home}{who}. Use that window, quit it first, "
            "or pick another folder with --home."
        )
        self.home = home
        self.pid = pid


class ReadOnlyRuntime(HearthError):
    """A change was asked of a runtime opened read-only beside the process that owns the data folder."""

    def __init__(self) -> None:
        super().__init__(
            "Hearth is running with this data folder, so this command can only read it. Use the app, or quit it "
            "first."
        )


class ModelError(HearthError):
    """A model could not be found, downloaded, added or removed; the message says why and what to do."""


class DownloadCancelled(ModelError):
    """A download was stopped by the person: paused (its partial file kept, so the next pull resumes it) or, when
    `discarded`, cancelled (what it had downloaded deleted)."""

    def __init__(self, name: str, discarded: bool = False):
        super().__init__(f"The download of {name} was cancelled; what it had downloaded was deleted." if discarded
                         else f"The download of {name} was paused; pull it again to resume where it stopped.")
        self.name = name
        self.discarded = discarded
class StorageError(HearthError):
    """The database in the data folder cannot be used. The message says what happened and what to do;
    `home` is the data folder. Subclasses say which way out fits (runtime/ARCHITECTURE.md, "Storage")."""

    def __init__(self, message: str, home: str):
        super().__init__(message)
        self.home = home


class StorageFull(StorageError):
    """The disk is full: free space, then retry."""


class StorageCorrupt(StorageError):
    """The database file is damaged: restore a backup, or choose another data folder."""


class StorageReadOnly(StorageError):
    """Hearth may not write to the data folder: make it writable, or choose another data folder."""


class StorageUnavailable(StorageError):
    """The database cannot be reached (disk error, disconnected drive, busy, written by a newer Hearth)."""


class ServerUnreachable(HearthError):
    """A Hearth server (`hearth --server`, a window connected to one) cannot be reached: not running, a wrong
    address, or the network is down. A state to wait out, not a fault of the request."""

    def __init__(self, url: str, why: str = ""):
        super().__init__(f"Cannot reach the Hearth server at {url}{f' ({why})' if why else ''}. Check that it runs and "
                         "that the address is right.")
        self.url = url


class ServerRefused(HearthError):
    """A Hearth server answered a request with an error (DESIGN.md §11): `status` is its HTTP status, the message
    the server's own sentence."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


class TokenRefused(ServerRefused):
    """The server refused the API token (401): revoked, never issued, or none given."""

    def __init__(self, url: str):
        super().__init__(f"The server refused this token (revoked, or never issued by {url}). Log in again with: "
                         f"hearth login {url}", 401)
        self.url = url
