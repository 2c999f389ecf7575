"""A task's deliverables in the terminal (runtime/cli/main.py): `hearth show TASK --deliveries` lists every version
its turns delivered, newest first; `hearth deliveries get TASK NAME [--version N] [-o PATH]` writes one out (the
latest by default; NAME is the path it was delivered from, or its file name when only one has it). Without -o
the copy goes into the current folder under its own name, and a file already there is left alone: -o PATH says
where, and may replace a file. Both only read the data folder, so they also work beside the app.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigError
from ..local_models.machine import human_bytes
from .exits import EXIT_OK
from .tasks import resolve_task

if TYPE_CHECKING:
    from ..api import Runtime

COMMANDS = ("deliveries",)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    group = sub.add_parser("deliveries", help="the files a task delivered").add_subparsers(
        dest="deliveries_command", required=True)
    get = group.add_parser("get", help="write a deliverable out (the latest version by default)")
    get.add_argument("task_id", help="the task's id or a unique start of it")
    get.add_argument("name", help="the deliverable's path in the workspace, or its file name")
    get.add_argument("--version", type=int, help="an older version's number (hearth show TASK --deliveries)")
    get.add_argument("-o", "--output", help="where to write it (a file, or a folder to write it into)")


async def show(rt: Runtime, args: argparse.Namespace) -> int:
    """`hearth show TASK --deliveries`."""
    task_id = await resolve_task(rt.tasks, args.task_id)
    task = await rt.get_task(task_id)
    delivered = await rt.deliveries.list(task_id)
    title = task.title or "(untitled)"
    if not delivered:
        print(f"{title}: nothing delivered yet.")
        return EXIT_OK
    print(f"# {title}: {len(delivered)} deliverable{'s' if len(delivered) != 1 else ''}")
    print(f"{'DELIVERED':<16}  {'VERSION':>7}  {'SIZE':>9}  {'PATH':<32}  NOTE")
    for d in delivered:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(d.created_at))
        path = d.path + ("/ (zip)" if d.kind == "folder" else "")
        print(f"{when:<16}  {d.version:>7}  {human_bytes(d.size):>9}  {path:<32}  {d.note}")
    print(f"\nWrite one out with: hearth deliveries get {task_id[:8]} PATH [--version N] [-o PATH]")
    return EXIT_OK


async def run(rt: Runtime, args: argparse.Namespace) -> int:
    task_id = await resolve_task(rt.tasks, args.task_id)
    delivery = await rt.deliveries.get(task_id, args.name, args.version)
    target = Path(args.output).expanduser() if args.output else Path.cwd() / delivery.name
    if not args.output and target.exists():
        raise ConfigError(f"{target} already exists; give -o PATH to write it elsewhere or over it.")
    written = await rt.deliveries.save(delivery, target)
    print(f"Wrote {delivery.path} (version {delivery.version}, {human_bytes(delivery.size)}) to {written}.")
    return EXIT_OK
