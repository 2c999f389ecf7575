"""Headless CLI: `hearth run | answer | stop | tasks | show | wake | deliveries | changes | undo | models | mcp |
backup | check | restore | team | server | serve | worker | login`, also `python -m runtime.cli` (`hearth team …`:
runtime/cli/team.py; `hearth mcp …`: runtime/cli/mcp.py; `hearth deliveries get`, `hearth show --deliveries`:
runtime/cli/deliveries.py; `hearth changes`, `hearth undo`: runtime/cli/changes.py; `hearth wake`: runtime/cli/wake.py;
`hearth server init | user …`: runtime/cli/server.py; `hearth serve`, `hearth worker`: runtime/cli/serve.py; `hearth
--server URL run | tasks | show | answer | stop` and `hearth login URL`, on a Hearth server: runtime/cli/remote.py).

`hearth models [list]` shows installed local models, the catalog (with what will not fit in this computer's memory)
and the model servers; `hearth models pull ID|OWNER/REPO/FILE.gguf` downloads one with a progress line (Ctrl-C pauses
it; the same command resumes), `hearth models rm NAME` removes one.

`hearth changes TASK [--turn N] [--diff]` lists what a task's turns changed in its workspace and `hearth undo TASK
--turn N [--force]` puts a turn's files back (runtime/cli/changes.py).

Exit codes: 0 completed, 2 usage or config error (also: no backup to restore, an undo refused), 3 provider error, 4
the task waits for an answer (printed, with the `hearth answer` line that gives it), 5 another Hearth process owns
the data folder, 6 the disk is full, 7 the database is damaged (`hearth check` found it so, or it cannot be read:
`hearth restore --latest`), 8 the data folder is read-only or the database cannot be reached, 130 stopped (Ctrl-C
stops the turn, waits for finalize, then exits). Errors are one plain line on stderr, never a traceback.

In a terminal, `hearth run` asks approvals (y / n / always) and questions itself and goes on. One process owns a data
folder: while the app runs, `tasks`, `show`, `backup` and `check` read beside it and every command that would change
something exits 5 with a sentence saying so (we chose refusing over remote-controlling the app). `backup`, `check`
and `restore` work on the database file itself, so they also run when it fails to open.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from typing import TYPE_CHECKING, TextIO

from ..errors import (
    ConfigError,
    DataFolderBusy,
    HearthError,
    ReadOnlyRuntime,
    RequestNotFound,
    ServerRefused,
    ServerUnreachable,
    StorageCorrupt,
    StorageError,
    StorageFull,
    TaskNotFound,
    TeamNotFound,
    UndoRefused,
)
from ..redact import redact
from . import changes as cli_changes
from . import deliveries as cli_deliveries
from . import mcp as cli_mcp
from . import memory as cli_memory
from . import remote as cli_remote
from . import serve as cli_serve
from . import server as cli_server
from . import team as cli_team
from .chat import add_chat_parser, chat_command
from .exits import EXIT_BUSY, EXIT_CORRUPT, EXIT_DISK_FULL, EXIT_OK, EXIT_PROVIDER, EXIT_STORAGE, EXIT_USAGE
from .models import add_models_parser, models_command
from .preload import start_preload
from .run import LocalTurns, add_run_parsers, answer_command, run_command
from .storage import STORAGE_COMMANDS, add_storage_parsers, storage_command
from .tasks import add_task_parsers, show_command, skills_command, stop_command, tasks_command
from .wake import wake_command

if TYPE_CHECKING:
    from ..api import Runtime

# And `skills list`: they run beside an app that has the data folder.
READ_COMMANDS = ("tasks", "show", *cli_deliveries.COMMANDS)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hearth", description="Hearth, an offline-first personal agent.")
    p.add_argument("--home", help="data folder (default: $HEARTH_HOME or the user data folder)")
    cli_remote.add_global_options(p)
    sub = p.add_subparsers(dest="command", required=True)
    add_run_parsers(sub)
    add_task_parsers(sub)
    cli_deliveries.add_parser(sub)
    cli_changes.add_parsers(sub)
    add_models_parser(sub)
    cli_mcp.add_parser(sub)
    add_storage_parsers(sub)
    cli_memory.add_parsers(sub)
    add_chat_parser(sub)
    cli_team.add_team_parser(sub)
    cli_server.add_server_parser(sub)
    cli_serve.add_parsers(sub)
    cli_remote.add_parsers(sub)
    return p


async def _open(args: argparse.Namespace) -> Runtime:
    from ..api import Runtime  # imported here: `main` starts loading the model first

    try:
        return await Runtime.open(args.home)
    except DataFolderBusy:
        reads = (args.command in READ_COMMANDS or (args.command == "models" and args.models_command in (None, "list"))
                 or (args.command == "chat" and (args.list or args.show))
                 or (args.command == "skills" and args.skills_command in (None, "list")))
        if not (reads or cli_memory.reads_only(args) or cli_team.reads_only(args) or cli_changes.reads_only(args)):
            raise
        return await Runtime.open(args.home, read_only=True)


async def _main(args: argparse.Namespace) -> int:
    if args.command == "login":
        return await cli_remote.login(args)
    server = cli_remote.server_of(args)
    if server is not None:  # the command goes to a Hearth server
        return await cli_remote.run(args, server)
    if args.command in STORAGE_COMMANDS:  # on the database file itself, without opening the runtime
        return await storage_command(args)
    if args.command in cli_server.COMMANDS:  # the server host's database, without a runtime
        return await cli_server.run(args)
    if args.command in cli_serve.COMMANDS:  # the server host's processes, each with a runtime of its own
        return await cli_serve.run(args)
    rt = await _open(args)
    try:
        if args.command == "run":
            return await run_command(rt, args)
        if args.command == "answer":
            return await answer_command(LocalTurns(rt.tasks), args)
        if args.command == "tasks":
            return await tasks_command(rt.tasks)
        if args.command == "stop":
            return await stop_command(rt.tasks, args, wakeups=rt.wakeups)
        if args.command == "wake":
            return await wake_command(rt)
        if args.command == "skills":
            return await skills_command(rt, args)
        if args.command == "models":
            return await models_command(rt, args)
        if args.command == "mcp":
            return await cli_mcp.run(rt, args)
        if args.command == "chat":
            return await chat_command(rt, args)
        if args.command in cli_memory.COMMANDS:
            return await cli_memory.run(rt, args)
        if args.command in cli_team.COMMANDS:
            return await cli_team.run(rt, args)
        if args.command in cli_deliveries.COMMANDS:
            return await cli_deliveries.run(rt, args)
        if args.command in cli_changes.COMMANDS:
            return await cli_changes.run(rt, args)
        if args.deliveries:
            return await cli_deliveries.show(rt, args)
        return await show_command(rt.tasks, args)
    finally:
        await rt.aclose()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # Everything after `--` is a command line (hearth mcp add NAME -- COMMAND ARGS); argparse's subparsers
    # do not pass it through reliably.
    cut = argv.index("--") if "--" in argv else len(argv)
    args = _parser().parse_args(argv[:cut])
    args.argv = argv[cut + 1 :]
    preload = None
    if args.command == "run" and args.text and not args.task and not args.queued and cli_remote.server_of(args) is None:
        preload = start_preload(args.home, args.model, args.text)  # the model loads while Hearth imports
    _plain_logging()
    try:
        return asyncio.run(_main(args))
    except BrokenPipeError:  # `hearth show ID | head`: the reader has all it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit's flush fails quietly
        return EXIT_OK
    except HearthError as exc:
        if preload is not None:
            preload.abandon()  # also lets llama-cpp-python give stderr back before the message
        print(f"hearth: {redact(str(exc))}", file=sys.stderr)
        return _exit_code(exc)


def _exit_code(exc: HearthError) -> int:
    if isinstance(exc, ServerRefused):  # a Hearth server's answer (cli/remote.py)
        return {400: EXIT_USAGE, 401: EXIT_USAGE, 404: EXIT_USAGE, 503: EXIT_STORAGE}.get(exc.status, EXIT_PROVIDER)
    if isinstance(exc, ServerUnreachable):
        return EXIT_STORAGE
    from ..api import BackupNotFound

    if isinstance(exc, (ConfigError, TaskNotFound, TeamNotFound, RequestNotFound, BackupNotFound, UndoRefused)):
        return EXIT_USAGE
    if isinstance(exc, (DataFolderBusy, ReadOnlyRuntime)):
        return EXIT_BUSY
    if isinstance(exc, StorageFull):
        return EXIT_DISK_FULL
    if isinstance(exc, StorageCorrupt):
        return EXIT_CORRUPT
    if isinstance(exc, StorageError):
        return EXIT_STORAGE
    return EXIT_PROVIDER


class _OneLine(logging.Formatter):
    """`hearth: message (the error)`: a terminal gets what went wrong, not a traceback."""

    def format(self, record: logging.LogRecord) -> str:
        text = f"hearth: {record.getMessage()}"
        if record.exc_info and record.exc_info[1] is not None:
            text += f" ({record.exc_info[1]})"
        return redact(text)


class _CurrentStderr(logging.StreamHandler):
    """Writes to whatever `sys.stderr` is when a record comes: llama-cpp-python swaps it for a /dev/null file
    while `hearth run` preloads the model, which may be just when this handler is made (see cli/status.py)."""

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _value: TextIO) -> None:
        pass


def _plain_logging() -> None:
    handler = _CurrentStderr()
    handler.setFormatter(_OneLine())
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.WARNING)


if __name__ == "__main__":
    sys.exit(main())
