"""`hearth backup [PATH]`, `hearth check`, `hearth restore --latest | PATH` (runtime/cli/main.py): they work on the
database file itself, so they run while the app has the data folder open (a backup) or cannot open it at all (a
damaged database: check says so, restore puts the newest good backup back)."""

from __future__ import annotations

import argparse
import sys
import time

from .exits import EXIT_CORRUPT, EXIT_OK

STORAGE_COMMANDS = ("backup", "check", "restore")


def add_storage_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    backup = sub.add_parser("backup", help="copy the database (also while the app runs)")
    backup.add_argument("path", nargs="?", help="a file or folder (default: backups/ in the data folder)")
    sub.add_parser("check", help="check the database's integrity and summarize it")
    restore = sub.add_parser("restore", help="replace the database with a backup (the current one is kept aside)")
    which = restore.add_mutually_exclusive_group(required=True)
    which.add_argument("--latest", action="store_true", help="the newest backup that is not damaged")
    which.add_argument("path", nargs="?", help="a backup file")


async def storage_command(args: argparse.Namespace) -> int:
    return await {"backup": _backup, "check": _check, "restore": _restore}[args.command](args)


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n / 1e3:.0f} kB"


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))


async def _backup(args: argparse.Namespace) -> int:
    from ..api import Backups

    made = await Backups.backup(args.home, args.path)
    print(f"Backed up to {made.path} ({_size(made.size_bytes)}).")
    return EXIT_OK


async def _check(args: argparse.Namespace) -> int:
    from ..api import Backups

    report = await Backups.check(args.home)
    print(f"Database: {report.database} ({_size(report.size_bytes)})")
    print(f"Integrity: {'ok' if report.ok else 'DAMAGED'}")
    for problem in report.problems:
        print(f"  {problem}")
    if report.ok:
        print(f"Tasks: {report.tasks}, messages: {report.messages}")
    last = report.last_backup
    print(f"Last backup: {_when(last.created_at)}, {report.backups} kept" if last else "Last backup: none")
    if report.ok:
        return EXIT_OK
    way_out = ("Restore the latest backup with: hearth restore --latest" if last
               else "There is no backup; choose another data folder with --home.")
    print(f"hearth: the database is damaged. {way_out}", file=sys.stderr)
    return EXIT_CORRUPT


async def _restore(args: argparse.Namespace) -> int:
    from ..api import Backups

    if args.latest:
        done = await Backups.restore_latest(args.home)
    else:
        done = await Backups.restore(args.home, args.path)
    print(f"Restored the backup of {_when(done.backup.created_at)} ({done.backup.path}).")
    if done.previous:
        print(f"The database it replaced is kept as {done.previous}.")
    return EXIT_OK
