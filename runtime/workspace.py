"""The task workspace: a folder per task, and the one gate every tool path goes through.

Decisions:
- A task's workspace is `<home>/workspaces/<task id>/`. Tools may touch nothing outside it.
- `resolve_in_workspace` works on real paths: the workspace is realpath'd, the candidate is joined to it and
  realpath'd with symlinks followed (for a new file that means through its parent's realpath, and a dangling
  symlink is followed to where it points), then it must be the workspace or below it. Containment is
  `Path.is_relative_to` on resolved paths, which compares whole components, so `/ws-evil` is not inside `/ws`.
- Absolute paths are accepted when they land inside the workspace (models often echo the full path).
- Refused outright, before touching the file system: empty paths, NUL and other control characters, bidi
  and zero-width formatting characters (they make the shown path differ from the real one, and the person
  approves what they see), paths starting with `~` (the model means a home directory, which is outside),
  backslashes (a Windows separator; on POSIX it would silently become part of a name), components that NFKC
  normalisation turns into `.`/`..` or that contain look-alike slashes, components over 255 bytes and paths
  over 4096 bytes (ENAMETOOLONG), and text that cannot be encoded as a file name.
- If resolution leaves a symlink in place (a loop), the path is refused rather than guessed at.
- A file tool writes atomically (a temporary file beside the target, then a rename): after a kill the file holds
  either what was there or what was meant, never half of it. Before the rename the tool records its intent (the
  path and the SHA-256 of the new content), so recovery can say whether an interrupted write was applied.
- Attachments are copied into the workspace root before a run; all are checked (exists, regular file, size)
  before any is copied, so a bad one leaves nothing half-done. Clashes become `name (1).ext`, `name (2).ext`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import unicodedata
from collections.abc import Iterable
from pathlib import Path

from runtime.errors import ToolError

NAME_MAX = 255  # bytes per component (Linux, macOS)
PATH_MAX = 4096  # bytes for a whole path
DEFAULT_ATTACHMENT_MAX_BYTES = 50 * 1024 * 1024

# Characters that change how a path is displayed without changing what it names.
_FORMAT_CHARS = frozenset(
    "\u200b\u200c\u200d\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2060\u2066\u2067\u2068\u2069\ufeff"
)


def show_path(path: str, limit: int = 120) -> str:
    """The path as it can safely be shown in a message: control/format characters escaped, long ones cut."""
    out = "".join(
        ch if ch.isprintable() and ch not in _FORMAT_CHARS else ch.encode("unicode_escape").decode("ascii")
        for ch in path
    )
    return out if len(out) <= limit else out[: limit - 1] + "…"


WORKSPACE = "this task's workspace"


def _outside(path: str, place: str) -> ToolError:
    return ToolError(f"Path '{show_path(path)}' is outside {place}. Use a path inside it.")


def _check_text(path: str, place: str = WORKSPACE) -> None:
    """Refuse paths that are malformed or deceptive before any file-system call."""
    if not isinstance(path, str):
        raise ToolError(f"Path must be a string, got {type(path).__name__}.")
    if not path.strip():
        raise ToolError("Path is empty. Give a file path relative to the workspace, e.g. 'notes.txt'.")
    if "\x00" in path:
        raise ToolError(f"Path '{show_path(path)}' contains a NUL byte, which no file name can contain.")
    for ch in path:
        if unicodedata.category(ch) == "Cc":
            raise ToolError(f"Path '{show_path(path)}' contains a control character; refusing it.")
        if ch in _FORMAT_CHARS:
            raise ToolError(
                f"Path '{show_path(path)}' contains an invisible formatting character (U+{ord(ch):04X}); "
                "refusing it because it hides what the path really is."
            )
    if path.startswith("~"):
        raise ToolError(f"Path '{show_path(path)}' refers to a home directory, which is outside {place}.")
    if "\\" in path:
        raise ToolError(
            f"Path '{show_path(path)}' contains a backslash. Use '/' to separate folders inside {place}."
        )
    try:
        encoded = os.fsencode(path)
    except UnicodeError:
        raise ToolError(f"Path '{show_path(path)}' is not valid text for a file name.") from None
    if len(encoded) > PATH_MAX:
        raise ToolError(f"Path '{show_path(path)}' is too long ({len(encoded)} bytes; the limit is {PATH_MAX}).")
    for part in path.split("/"):
        if len(os.fsencode(part)) > NAME_MAX:
            raise ToolError(
                f"A name in path '{show_path(path)}' is too long ({len(os.fsencode(part))} bytes; "
                f"the limit is {NAME_MAX})."
            )
        folded = unicodedata.normalize("NFKC", part)
        if folded != part and (folded in (".", "..") or "/" in folded or "\\" in folded):
            raise ToolError(f"Path '{show_path(path)}' uses look-alike characters for '.', '..' or '/'; refusing it.")


def _symlink_left(resolved: Path, root: Path) -> bool:
    """True if any existing component between root and resolved is still a symlink (a loop realpath gave up on)."""
    p = resolved
    while p != root and p != p.parent:
        if p.is_symlink():
            return True
        p = p.parent
    return False


def resolve_in_workspace(workspace: Path, path: str, *, for_write: bool = False, place: str = WORKSPACE) -> Path:
    """The real path `path` names inside `workspace`, or `ToolError` if it names anything else.

    `for_write` marks that the file may not exist yet; resolution is the same (through the parent's realpath,
    dangling symlinks followed), but writing to the workspace folder itself is refused. `place` names the
    folder in refusals (the memory folder uses the same gate).
    """
    _check_text(path, place)
    root = Path(os.path.realpath(workspace))
    try:
        resolved = Path(os.path.realpath(root / path))
    except (OSError, ValueError) as e:
        raise ToolError(f"Path '{show_path(path)}' cannot be resolved: {e}") from None
    if not resolved.is_relative_to(root):
        raise _outside(path, place)
    if _symlink_left(resolved, root):
        raise ToolError(f"Path '{show_path(path)}' goes through a symlink loop; refusing it.")
    if for_write and resolved == root:
        raise ToolError(f"Path '{show_path(path)}' is the workspace folder itself, not a file.")
    return resolved


def workspace_for(home: Path, task_id: str) -> Path:
    """`home/workspaces/<task_id>`, created if missing."""
    if not task_id or task_id in (".", "..") or "/" in task_id or "\\" in task_id or "\x00" in task_id:
        raise ValueError(f"Task id {task_id!r} cannot name a workspace folder.")
    ws = Path(home) / "workspaces" / task_id
    ws.mkdir(parents=True, exist_ok=True)
    return ws


def _free_name(root: Path, name: str, taken: set[str]) -> str:
    if name not in taken and not os.path.lexists(root / name):
        return name
    stem, suffix = Path(name).stem, Path(name).suffix
    n = 1
    while True:
        candidate = f"{stem} ({n}){suffix}"
        if candidate not in taken and not os.path.lexists(root / candidate):
            return candidate
        n += 1


def _human(n: int) -> str:
    if n >= 1024 * 1024:
        return f"{n / (1024 * 1024):.1f} MiB"
    if n >= 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n} bytes"


def copy_attachments(
    workspace: Path, files: Iterable[Path | str], max_bytes: int = DEFAULT_ATTACHMENT_MAX_BYTES
) -> list[str]:
    """Copy `files` into the workspace root; return their names there, in order.

    Every file is checked before any is copied, so a missing or oversized one raises `ToolError` and copies
    nothing.
    """
    sources: list[Path] = []
    for f in files:
        src = Path(f).expanduser()
        if not src.exists():
            raise ToolError(f"Attachment '{show_path(str(f))}' was not found.")
        if not src.is_file():
            raise ToolError(f"Attachment '{show_path(str(f))}' is not a regular file (folders can't be attached).")
        size = src.stat().st_size
        if size > max_bytes:
            raise ToolError(f"Attachment '{show_path(src.name)}' is {_human(size)}; the limit is {_human(max_bytes)}.")
        sources.append(src)

    root = Path(workspace)
    root.mkdir(parents=True, exist_ok=True)
    taken: set[str] = set()
    names: list[str] = []
    for src in sources:
        name = _free_name(root, src.name, taken)
        taken.add(name)
        # "xb": never overwrite, even if something appeared since the name was chosen.
        with open(src, "rb") as fin, open(root / name, "xb") as fout:
            shutil.copyfileobj(fin, fout, 1024 * 1024)
        names.append(name)
    return names


def file_sha256(p: Path | str) -> str | None:
    """The SHA-256 (hex) of the regular file at `p`; None when there is none (missing, a folder, unreadable)."""
    try:
        with open(p, "rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest()
    except OSError:
        return None


def write_intent(p: Path, data: bytes, call_id: str) -> dict[str, str]:
    """What a write is about to do, recorded before it does it: the file, its new content's hash, the temporary
    file the new content goes through (named by the call, so recovery can remove one a kill left)."""
    return {"path": str(p), "sha256": hashlib.sha256(data).hexdigest(),
            "temp": str(p.parent / f".hearth-{call_id}.tmp")}


def write_atomically(p: Path, data: bytes | Path, temp: Path | str) -> None:
    """Write `data` (bytes, or a file's content) to `p` through `temp` and a rename. The file keeps its permission
    bits; a symlink that appeared at `p` since it was resolved is replaced, never followed."""
    try:
        mode: int | None = os.lstat(p).st_mode & 0o7777
    except FileNotFoundError:
        mode = None
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    try:
        with os.fdopen(fd, "wb") as f:
            if isinstance(data, Path):
                with open(data, "rb") as source:
                    shutil.copyfileobj(source, f, 1024 * 1024)
            else:
                f.write(data)
            if mode is not None:
                os.fchmod(f.fileno(), mode)
        os.replace(temp, p)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def intent_applied(intent: dict[str, str]) -> bool | None:
    """Whether an interrupted write was applied: the file holds exactly the content it meant to write. A
    temporary file the write left behind is removed. An empty intent is a call stopped before it knew what to
    write, so before it wrote anything. None when the file's folder cannot be seen from here (a server's reaper
    on another machine than the worker that ran the call): then nobody here can tell."""
    if not intent:
        return False
    if not os.path.isdir(os.path.dirname(intent["path"])):
        return None
    with contextlib.suppress(OSError):
        os.unlink(intent["temp"])
    return file_sha256(intent["path"]) == intent["sha256"]
