"""File tools: read_file, write_file, edit_file (list_files and search_files: file_search.py).

Every path goes through `resolve_in_workspace`. File-system work runs in a worker thread; walks check a stop
flag so a stopped turn does not leave a thread crawling a large tree. Tree walks never follow symlinks, so a
link to outside the workspace is listed but never entered or read.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from runtime.errors import ToolError
from runtime.tools.base import Effect, ToolContext, ToolResult
from runtime.workspace import resolve_in_workspace, show_path, write_atomically, write_intent

T = TypeVar("T")

READ_CAP = 256 * 1024
EDIT_MAX = 8 * 1024 * 1024
SNIFF = 8192


class Stopped(Exception):
    pass


async def run_in_thread(fn: Callable[[threading.Event], T]) -> T:
    """Run `fn(stop)` in a thread; on cancellation set `stop` so the thread can give up, then re-raise."""
    stop = threading.Event()
    try:
        return await asyncio.to_thread(fn, stop)
    except asyncio.CancelledError:
        stop.set()
        raise


def arg_str(args: dict[str, Any], key: str, *, default: str | None = None) -> str:
    """The string argument `key`; when it is missing, `default`, or without one a ToolError."""
    value = args.get(key)
    if value is None:
        if default is None:
            raise ToolError(f"Missing required argument '{key}'.")
        return default
    if not isinstance(value, str):
        raise ToolError(f"Argument '{key}' must be a string, got {type(value).__name__}.")
    return value


def arg_int(args: dict[str, Any], key: str) -> int | None:
    value = args.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ToolError(f"Argument '{key}' must be an integer.")
    try:
        number = int(value)
    except ValueError:
        raise ToolError(f"Argument '{key}' must be an integer, got {value!r}.") from None
    if number != value and not isinstance(value, str):
        raise ToolError(f"Argument '{key}' must be a whole number, got {value!r}.")
    return number


def looks_binary(sample: bytes) -> bool:
    if b"\x00" in sample:
        return True
    try:
        sample.decode("utf-8")
    except UnicodeDecodeError as e:
        # A multi-byte character cut at the end of the sample is not evidence of binary.
        return e.start < len(sample) - 3
    return False


def _rel(ctx: ToolContext, p: Path) -> str:
    root = Path(os.path.realpath(ctx.workspace))
    rel = p.relative_to(root).as_posix()
    return rel if rel != "." else "."


def _existing_file(ctx: ToolContext, path: str) -> Path:
    p = resolve_in_workspace(ctx.workspace, path)
    if not p.exists():
        raise ToolError(f"File '{show_path(path)}' does not exist. Use list_files to see what is there.")
    if p.is_dir():
        raise ToolError(f"'{show_path(path)}' is a folder, not a file. Use list_files to see its contents.")
    if not p.is_file():
        raise ToolError(f"'{show_path(path)}' is not a regular file.")
    return p


class ReadFile:
    name = "read_file"
    description = (
        "Read a text file in the workspace. Optionally give start_line and end_line (1-based, inclusive) to "
        f"read part of it. Output is capped at {READ_CAP // 1024} KiB."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "File path relative to the workspace."},
            "start_line": {"type": "integer", "minimum": 1, "description": "First line to read (1-based)."},
            "end_line": {"type": "integer", "minimum": 1, "description": "Last line to read (inclusive)."},
        },
        "required": ["path"],
        "additionalProperties": False,
    }
    effect = Effect.read_only
    touches = "It only reads a file in this task's workspace folder."

    def __init__(self, cap: int = READ_CAP):
        self.cap = cap

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        path = arg_str(args, "path")
        start, end = arg_int(args, "start_line"), arg_int(args, "end_line")
        if start is not None and start < 1:
            raise ToolError("start_line must be 1 or more.")
        if end is not None and end < (start or 1):
            raise ToolError(f"end_line ({end}) must not be before start_line ({start or 1}).")
        p = _existing_file(ctx, path)
        try:
            return ToolResult(await run_in_thread(lambda stop: self._read(p, path, start, end, stop)))
        except OSError as e:
            raise ToolError(f"Could not read '{show_path(path)}': {e.strerror or e}.") from None

    def _read(self, p: Path, shown: str, start: int | None, end: int | None, stop: threading.Event) -> str:
        size = p.stat().st_size
        with open(p, "rb") as f:
            if looks_binary(f.read(SNIFF)):
                raise ToolError(f"File '{show_path(shown)}' looks binary ({size} bytes); read_file only reads text.")
            f.seek(0)
            if start is None and end is None:
                data = f.read(self.cap + 1)
                if not data:
                    return "[The file is empty.]"
                if len(data) <= self.cap:
                    return data.decode("utf-8", errors="replace")
                data = data[: self.cap]
                cut = data.rfind(b"\n")
                data = data[: cut + 1] if cut > 0 else data
                lines = data.count(b"\n")
                return data.decode("utf-8", errors="replace") + (
                    f"\n[File is {size} bytes; showing the first {len(data)} bytes ({lines} lines). "
                    f"Use start_line/end_line to read further.]"
                )
            first = start or 1
            out: list[bytes] = []
            used = 0
            last = 0
            for n, line in enumerate(f, 1):
                last = n
                if n % 10000 == 0 and stop.is_set():
                    raise Stopped
                if n < first:
                    continue
                if end is not None and n > end:
                    break
                if used + len(line) > self.cap:
                    text = b"".join(out).decode("utf-8", errors="replace")
                    return text + (
                        f"\n[Output capped at {self.cap // 1024} KiB; showed lines {first}-{n - 1}. "
                        f"Continue with start_line={n}.]"
                    )
                out.append(line)
                used += len(line)
            if last < first:
                raise ToolError(f"File '{show_path(shown)}' has only {last} lines; start_line is {first}.")
            return b"".join(out).decode("utf-8", errors="replace")


async def _write(ctx: ToolContext, p: Path, data: bytes) -> None:
    """Write a file tool's new content: its intent recorded first (so recovery can tell whether an interrupted
    write was applied), then atomically (runtime/workspace.py)."""
    intent = write_intent(p, data, ctx.call_id)
    if ctx.intend is not None:
        await ctx.intend(intent)
    write = asyncio.ensure_future(asyncio.to_thread(write_atomically, p, data, intent["temp"]))
    try:
        await asyncio.shield(write)
    except asyncio.CancelledError:  # a Stop: the rename is not undone, so the call ends once it is settled
        await asyncio.wait({write})
        raise


class WriteFile:
    name = "write_file"
    description = (
        "Create or overwrite a text file in the workspace with the given content. Missing parent folders are created."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "File path relative to the workspace."},
            "content": {"type": "string", "description": "The full new content of the file."},
        },
        "required": ["path", "content"],
        "additionalProperties": False,
    }
    effect = Effect.workspace_write
    records_intent = True  # _write: recovery checks an interrupted call against the file
    touches = "It writes a file in this task's workspace folder (new, or replacing it), and nothing else."

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        path, content = arg_str(args, "path"), arg_str(args, "content")
        p = resolve_in_workspace(ctx.workspace, path, for_write=True)
        rel = _rel(ctx, p)

        def prepare(stop: threading.Event) -> bool:
            if p.is_dir():
                raise ToolError(f"'{show_path(path)}' is a folder; give a file path.")
            existed = p.exists()
            try:
                p.parent.mkdir(parents=True, exist_ok=True)
            except (FileExistsError, NotADirectoryError):
                raise ToolError(f"Cannot create '{show_path(path)}': a parent of it is a file.") from None
            return existed

        data = content.encode("utf-8")
        try:
            existed = await run_in_thread(prepare)
            await _write(ctx, p, data)
        except OSError as e:
            raise ToolError(f"Could not write '{show_path(path)}': {e.strerror or e}.") from None
        return ToolResult(f"{'Overwrote' if existed else 'Created'} '{rel}' ({len(data)} bytes).")


class EditFile:
    name = "edit_file"
    description = (
        "Replace one exact occurrence of old_string with new_string in a text file in the workspace. "
        "old_string must match the file exactly (including whitespace) and occur exactly once; "
        "include surrounding lines to make it unique."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "File path relative to the workspace."},
            "old_string": {"type": "string", "description": "Exact text to replace; must occur exactly once."},
            "new_string": {"type": "string", "description": "Text to put in its place."},
        },
        "required": ["path", "old_string", "new_string"],
        "additionalProperties": False,
    }
    effect = Effect.workspace_write
    records_intent = True
    touches = "It changes a file in this task's workspace folder, and nothing else."

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        path = arg_str(args, "path")
        old, new = arg_str(args, "old_string"), arg_str(args, "new_string")
        if old == "":
            raise ToolError("old_string is empty. To create a file or replace all of it, use write_file.")
        if old == new:
            raise ToolError("old_string and new_string are the same; nothing would change.")
        p = _existing_file(ctx, path)
        rel = _rel(ctx, p)

        def edited(stop: threading.Event) -> tuple[bytes, int]:
            size = p.stat().st_size
            if size > EDIT_MAX:
                raise ToolError(f"File '{rel}' is {size} bytes; edit_file handles files up to {EDIT_MAX}.")
            raw = p.read_bytes()
            if b"\x00" in raw[:SNIFF]:
                raise ToolError(f"File '{rel}' looks binary; edit_file only edits text.")
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise ToolError(f"File '{rel}' is not UTF-8 text; edit_file only edits UTF-8 text.") from None
            o, n = old, new
            count = text.count(o)
            if count == 0 and "\r\n" in text and "\n" in o and "\r\n" not in o:
                # The file uses CRLF line ends; the model almost always sends LF.
                o, n = o.replace("\n", "\r\n"), n.replace("\n", "\r\n")
                count = text.count(o)
            if count == 0:
                raise ToolError(
                    f"old_string was not found in '{rel}'. Read the file again and copy the exact text, "
                    "including whitespace and indentation."
                )
            if count > 1:
                raise ToolError(
                    f"old_string occurs {count} times in '{rel}'; it must occur exactly once. "
                    "Include more surrounding lines to make it unique."
                )
            at = text.index(o)
            line = text.count("\n", 0, at) + 1
            return text.replace(o, n, 1).encode("utf-8"), line

        try:
            data, line = await run_in_thread(edited)
            await _write(ctx, p, data)
        except OSError as e:
            raise ToolError(f"Could not edit '{show_path(path)}': {e.strerror or e}.") from None
        return ToolResult(f"Edited '{rel}': replaced 1 occurrence at line {line}.")
