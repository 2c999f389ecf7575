"""A task's turns' changes to its workspace in the terminal (runtime/cli/main.py): `hearth changes TASK [--turn N]
[--diff]` lists them (turns numbered from 1, as the window shows them), `hearth undo TASK --turn N [--force]` puts
a turn's files back (refused, naming the files, where one changed since), and `hearth changes [--cap SIZE]` says —
or sets — how much is kept to undo them."""

from __future__ import annotations

import argparse
import re
from typing import TYPE_CHECKING

from ..errors import ConfigError
from ..local_models.machine import human_bytes
from .exits import EXIT_OK
from .tasks import resolve_task

if TYPE_CHECKING:
    from ..api import Runtime

COMMANDS = ("changes", "undo")
_UNITS = {"": 1, "b": 1, "kb": 1000, "mb": 1000**2, "gb": 1000**3, "kib": 1024, "mib": 1024**2, "gib": 1024**3}


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    changes = sub.add_parser("changes", help="what a task's turns changed in its workspace")
    changes.add_argument("task_id", nargs="?", help="the task's id or a unique start of it")
    changes.add_argument("--turn", type=int, help="only this turn (1 is the task's first)")
    changes.add_argument("--diff", action="store_true", help="also each changed text file's diff")
    changes.add_argument("--cap", help="keep at most this much to undo changes (e.g. 500MB, 2GB)")
    undo = sub.add_parser("undo", help="put back the files a turn changed")
    undo.add_argument("task_id", help="the task's id or a unique start of it")
    undo.add_argument("--turn", type=int, required=True, help="the turn (1 is the task's first)")
    undo.add_argument("--force", action="store_true", help="also overwrite files changed since that turn")


def reads_only(args: argparse.Namespace) -> bool:
    return args.command == "changes" and args.cap is None


async def run(rt: Runtime, args: argparse.Namespace) -> int:
    if args.command == "undo":
        task_id = await resolve_task(rt.tasks, args.task_id)
        put_back = await rt.changes.undo(task_id, args.turn, force=args.force)
        print(f"Turn {args.turn}'s changes undone; put back:" if put_back
              else f"Turn {args.turn}: nothing could be put back.")
        for path in put_back:
            print(f"  {path}")
        return EXIT_OK
    if args.cap is not None:
        await rt.changes.set_cap(parse_size(args.cap))
    if args.task_id is None:
        used, cap = await rt.changes.usage()
        print(f"Kept to undo changes: {human_bytes(used)} of at most {human_bytes(cap)} "
              f"(change it: hearth changes --cap SIZE).")
        return EXIT_OK
    task_id = await resolve_task(rt.tasks, args.task_id)
    turns = await rt.changes.list(task_id, args.turn)
    if not turns:
        print("No files changed." if args.turn is None else f"Turn {args.turn} changed no files.")
    for turn in turns:
        print(f"Turn {turn.number}: {turn.file_count} file(s) changed" + (" (undone)" if turn.undone else ""))
        for change in turn.files:
            print(f"  {change.kind:<9} {change.path}" + (f"  — cannot be undone: {change.cannot_undo}"
                                                        if change.cannot_undo else ""))
            if args.diff and (diff := await rt.changes.diff(task_id, turn.turn_id, change.path)):
                print("".join(f"    {line}" for line in diff.splitlines(keepends=True)).rstrip("\n"))
    return EXIT_OK


def parse_size(text: str) -> int:
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    unit = found.group(2).lower() if found else ""
    if found is None or unit not in _UNITS:
        raise ConfigError(f"{text!r} is not a size: give a number of bytes, or one like 500MB or 2GB.")
    return int(float(found.group(1)) * _UNITS[unit])

