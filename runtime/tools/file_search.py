"""File tools that look across the workspace: list_files (glob patterns) and search_files (a regex in file
contents). Walks run in a worker thread, check the turn's stop flag and never follow symlinks (files.py's rules).
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from runtime.errors import ToolError
from runtime.tools.base import Effect, ToolContext, ToolResult
from runtime.tools.files import SNIFF, Stopped, arg_str, looks_binary, run_in_thread
from runtime.workspace import show_path

LIST_CAP = 500
SEARCH_CAP = 200
SEARCH_FILE_MAX = 4 * 1024 * 1024
LINE_SHOWN = 300


def glob_to_regex(pattern: str) -> re.Pattern[str]:
    """Translate a glob with `**` into a regex over '/'-separated relative paths."""
    i, out = 0, []
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            j = pattern.find("]", i + 2 if pattern.startswith("[!", i) or pattern.startswith("[]", i) else i + 1)
            if j < 0:
                out.append(re.escape(c))
                i += 1
            else:
                body = pattern[i + 1 : j]
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append("[" + body.replace("\\", "\\\\") + "]")
                i = j + 1
        else:
            out.append(re.escape(c))
            i += 1
    try:
        return re.compile("".join(out) + r"\Z", re.DOTALL)
    except re.error as e:
        raise ToolError(f"Invalid glob pattern '{pattern}': {e}.") from None


def _check_glob(pattern: str) -> str:
    pattern = pattern.strip() or "**/*"
    if pattern.startswith(("/", "~")) or ".." in pattern.split("/") or "\x00" in pattern:
        raise ToolError(f"Glob '{show_path(pattern)}' reaches outside the workspace; use a relative pattern.")
    return pattern.removeprefix("./")


def walk(root: Path, stop: threading.Event) -> Iterator[tuple[str, bool]]:
    """(relative posix path, is_dir) for everything under root, skipping .git, never following symlinks."""
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        if stop.is_set():
            raise Stopped
        dirnames[:] = sorted(d for d in dirnames if d != ".git")
        base = Path(dirpath).relative_to(root).as_posix()
        prefix = "" if base == "." else base + "/"
        for d in dirnames:
            yield prefix + d, not os.path.islink(os.path.join(dirpath, d))
        for name in sorted(filenames):
            if name != ".git":
                yield prefix + name, False


class ListFiles:
    name = "list_files"
    description = (
        "List files and folders in the workspace matching a glob pattern (default '**/*', everything). "
        "'*' stays within one folder, '**' spans folders: use '**/*.py' for Python files at any depth. "
        f"Folders end with '/'. .git is skipped. At most {LIST_CAP} entries are shown."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {"pattern": {"type": "string", "description": "Glob pattern, default '**/*'."}},
        "additionalProperties": False,
    }
    effect = Effect.read_only
    touches = "It only lists files in this task's workspace folder."

    def __init__(self, cap: int = LIST_CAP):
        self.cap = cap

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        pattern = _check_glob(arg_str(args, "pattern", default="**/*"))
        rx = glob_to_regex(pattern)
        root = Path(os.path.realpath(ctx.workspace))

        def work(stop: threading.Event) -> str:
            hits = sorted(rel + ("/" if is_dir else "") for rel, is_dir in walk(root, stop) if rx.match(rel))
            if not hits:
                return f"No files match '{pattern}'."
            shown = hits[: self.cap]
            note = (
                f"\n[{len(hits) - self.cap} more entries not shown; use a narrower pattern.]"
                if len(hits) > self.cap
                else ""
            )
            return "\n".join(shown) + note

        return ToolResult(await run_in_thread(work))


class SearchFiles:
    name = "search_files"
    description = (
        "Search text files in the workspace for a regular expression (Python syntax), line by line. "
        "Optionally restrict to files matching a glob (default '**/*'). Binary files are skipped. "
        f"At most {SEARCH_CAP} matching lines are shown, as 'path:line: text'."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "description": "Regular expression to search for."},
            "glob": {"type": "string", "description": "Only search files matching this glob, default '**/*'."},
            "ignore_case": {"type": "boolean", "description": "Match case-insensitively."},
        },
        "required": ["pattern"],
        "additionalProperties": False,
    }
    effect = Effect.read_only
    touches = "It only reads files in this task's workspace folder."

    def __init__(self, cap: int = SEARCH_CAP):
        self.cap = cap

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        pattern = arg_str(args, "pattern")
        glob = _check_glob(arg_str(args, "glob", default="**/*"))
        try:
            rx = re.compile(pattern, re.IGNORECASE if args.get("ignore_case") else 0)
        except re.error as e:
            raise ToolError(f"Invalid regular expression {pattern!r}: {e}.") from None
        grx = glob_to_regex(glob)
        root = Path(os.path.realpath(ctx.workspace))

        def work(stop: threading.Event) -> str:
            out: list[str] = []
            total = 0
            skipped = 0
            for rel, is_dir in walk(root, stop):
                if is_dir or not grx.match(rel):
                    continue
                p = root / rel
                try:
                    if p.is_symlink() or not p.is_file():
                        continue
                    if p.stat().st_size > SEARCH_FILE_MAX:
                        skipped += 1
                        continue
                    with open(p, "rb") as f:
                        if looks_binary(f.read(SNIFF)):
                            continue
                        f.seek(0)
                        for n, raw in enumerate(f, 1):
                            if n % 5000 == 0 and stop.is_set():
                                raise Stopped
                            line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                            if rx.search(line):
                                total += 1
                                if total <= self.cap:
                                    shown = line if len(line) <= LINE_SHOWN else line[:LINE_SHOWN] + "…"
                                    out.append(f"{rel}:{n}: {shown}")
                except OSError:
                    skipped += 1
            notes = []
            if total > self.cap:
                notes.append(f"[{total - self.cap} more matching lines not shown; narrow the pattern or glob.]")
            if skipped:
                notes.append(f"[{skipped} files skipped: unreadable or over {SEARCH_FILE_MAX // 2**20} MiB.]")
            if not out:
                return "\n".join([f"No matches for {pattern!r}.", *notes])
            return "\n".join(out + notes)

        return ToolResult(await run_in_thread(work))
