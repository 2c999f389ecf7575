"""The `deliver` tool: hand a workspace file (or a folder, zipped) to the person as a result, with a one-line note.

Each delivery is a copy in the task's delivery folder (`<home>/deliveries/<task id>/<random>/<name>`, a folder of
its own per copy, so no later delivery ever writes over an earlier one) and a record the kit's `record` function
writes (store/deliveries.py): the path, its version (the next one for that path), size, sha256 and note. Only the
named file or folder is copied. The path goes through `resolve_in_workspace` (nothing outside the workspace, no
symlink out of it); a folder is zipped without following the symlinks inside it, which are left out and said.
The copy is written beside its place and renamed into it, so a crash never leaves half a file under a real name.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import threading
import uuid
import zipfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ToolError
from ..local_models.machine import human_bytes
from ..workspace import resolve_in_workspace, show_path
from .base import Effect, ToolContext, ToolResult
from .files import Stopped, arg_str, run_in_thread

DELIVERIES_DIR = "deliveries"
NOTE_MAX = 300  # characters: a line, not a letter
CHUNK = 1024 * 1024  # bytes read at a time when copying


def delivery_folder(home: Path, task_id: str) -> Path:
    """Where a task's delivered copies are kept (the folder goes with the task)."""
    return Path(home) / DELIVERIES_DIR / task_id


@dataclass(slots=True)
class Copied:
    kind: str  # file | folder
    name: str  # of the copy: the file's name, or the folder's with .zip
    stored: str  # relative to the task's delivery folder
    size: int
    sha256: str
    skipped: int  # symlinks and special files inside a folder, left out of its zip


def _zip_folder(source: Path, out: Path, stop: threading.Event) -> int:
    """Write `source` as a zip (its entries under the folder's name) to `out`; how many symlinks and special files
    (pipes, sockets) it left out."""
    skipped = 0
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for folder, dirs, files in os.walk(source):  # never follows symlinks to folders
            dirs.sort()
            here = Path(folder)
            inside = (source.name / here.relative_to(source)).as_posix()
            if not files and not dirs:
                archive.writestr(inside + "/", b"")  # an empty folder is part of what was made
            for name in sorted(files) + [d for d in dirs if (here / d).is_symlink()]:
                if stop.is_set():
                    raise Stopped
                path = here / name
                if path.is_symlink() or not path.is_file():
                    skipped += 1
                    continue
                archive.write(path, f"{inside}/{name}")
    return skipped


def store_copy(source: Path, folder: Path, stop: threading.Event) -> Copied:
    """Copy the file (or zip the folder) `source` into a new place of its own under `folder`."""
    kind = "folder" if source.is_dir() else "file"
    name = source.name + (".zip" if kind == "folder" else "")
    place = folder / uuid.uuid4().hex
    place.mkdir(parents=True)
    part = place / f".{name}.part"
    try:
        skipped = 0
        if kind == "folder":
            skipped = _zip_folder(source, part, stop)
        else:
            with open(source, "rb") as src, open(part, "wb") as out:
                while chunk := src.read(CHUNK):
                    if stop.is_set():
                        raise Stopped
                    out.write(chunk)
        with open(part, "rb") as copy:
            sha = hashlib.file_digest(copy, "sha256").hexdigest()  # of the copy kept, which is what is handed out
            size = os.fstat(copy.fileno()).st_size
            os.fsync(copy.fileno())
        os.replace(part, place / name)
    except BaseException:
        shutil.rmtree(place, ignore_errors=True)
        raise
    return Copied(kind, name, f"{place.name}/{name}", size, sha, skipped)


class Deliver:
    name = "deliver"
    description = (
        "Hand a finished file (or a folder, which is zipped) in the workspace to the person as a result of this "
        "task, with a one-line note saying what it is. The person sees it among the task's deliverables and can "
        "open or save it. Delivering the same path again after changing it makes a new version; earlier versions "
        "stay as they were. Deliver results, not every file you touch."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "File or folder path relative to the workspace."},
            "note": {"type": "string", "description": "One line for the person: what this is."},
        },
        "required": ["path", "note"],
        "additionalProperties": False,
    }
    effect = Effect.read_only  # nothing in the workspace changes; the copy is the task's own record
    touches = ("It reads a file or folder in this task's workspace folder and keeps a copy among the task's "
               "deliverables; it changes nothing in the workspace.")

    def __init__(self, home: Path, record: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]):
        self._home = home
        self._record = record

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        path = arg_str(args, "path")
        note = " ".join(arg_str(args, "note").split())
        if not note:
            raise ToolError("Give a one-line 'note' saying what this deliverable is.")
        if len(note) > NOTE_MAX:
            raise ToolError(f"The note is {len(note)} characters; keep it to one line of at most {NOTE_MAX}.")
        source = resolve_in_workspace(ctx.workspace, path)
        root = Path(os.path.realpath(ctx.workspace))
        if source == root:
            raise ToolError("That is the whole workspace. Deliver a file or a folder inside it.")
        if not source.exists():
            raise ToolError(f"'{show_path(path)}' does not exist in the workspace. Use list_files to see what is "
                            "there.")
        if not (source.is_file() or source.is_dir()):
            raise ToolError(f"'{show_path(path)}' is not a regular file or a folder.")
        folder = delivery_folder(self._home, ctx.task_id)
        try:
            copied = await run_in_thread(lambda stop: store_copy(source, folder, stop))
        except OSError as exc:
            raise ToolError(f"Could not keep a copy of '{show_path(path)}': {exc.strerror or exc}.") from None
        rel = source.relative_to(root).as_posix()
        record = asyncio.ensure_future(self._record({
            "task_id": ctx.task_id, "turn_id": ctx.turn_id, "path": rel, "kind": copied.kind,
            "size": copied.size, "sha256": copied.sha256, "note": note, "stored": copied.stored}))
        try:
            # A Stop now leaves the record to finish, with its copy: a row is never without the file it names.
            row = await asyncio.shield(record)
        except asyncio.CancelledError:
            raise
        except BaseException:
            shutil.rmtree(folder / copied.stored.split("/")[0], ignore_errors=True)  # no row names it
            raise
        what = "a zip of the folder" if copied.kind == "folder" else "the file"
        left_out = (f" {copied.skipped} symlink(s) or special file(s) inside it were left out." if copied.skipped
                    else "")
        return ToolResult(f"Delivered {what} '{rel}' to the person as version {row['version']} "
                          f"({human_bytes(copied.size)}, sha256 {copied.sha256[:12]}).{left_out}")
