"""`hearth memory list|show|add|forget|off|on`, `hearth knowledge add|list|remove|embeddings` and `hearth jobs`, wired
into runtime/cli/main.py.

`memory list`, `memory show` and `knowledge list` only read, so they also run beside the app (read-only); the
rest change something. `memory add NAME [TEXT]` writes a memory with the memory tool's checks (name, size, no
secrets), its text from stdin when not given. `knowledge add` adds what it can, says which paths it could not add
and why, waits for the indexing and prints each document's status as it settles (Ctrl-C stops waiting; what is
left is indexed at the next start, of the app or the CLI); it exits 2 when a path was not added or a document
could not be read. `knowledge embeddings [PROVIDER/MODEL | off]` shows or chooses the embeddings model that lets
search find passages by meaning too. `jobs` is the log of the background work behind them (saving memories after
a turn, indexing a document, a backup): newest first, and why one failed.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import TYPE_CHECKING

from ..errors import ConfigError

if TYPE_CHECKING:  # runtime.cli imports this module before it starts the model's preload: keep it light
    from ..api import Runtime

COMMANDS = ("memory", "knowledge", "jobs")
_READS = {("memory", "list"), ("memory", "show"), ("knowledge", "list"), ("jobs", None)}


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    memory = sub.add_parser("memory", help="the memories Hearth keeps about you across tasks")
    msub = memory.add_subparsers(dest="memory_command", required=True)
    listing = msub.add_parser("list", help="your memories, with where each came from")
    listing.add_argument("--search", help="only those matching these words")
    show = msub.add_parser("show", help="print one memory file")
    show.add_argument("name")
    new = msub.add_parser("add", help="add a memory: a name and its text (from stdin when no text is given)")
    new.add_argument("name", help="a file name such as units.md (.md is added when it has none)")
    new.add_argument("text", nargs="?", help="the memory: a first line that sums it up, then the details")
    forget = msub.add_parser("forget", help="delete a memory (or --all of them)")
    forget.add_argument("name", nargs="?")
    forget.add_argument("--all", action="store_true", help="forget everything")
    msub.add_parser("off", help="stop using and saving memories in every task")
    msub.add_parser("on", help="use and save memories again")
    knowledge = sub.add_parser("knowledge", help="the documents tasks can work from")
    ksub = knowledge.add_subparsers(dest="knowledge_command", required=True)
    add = ksub.add_parser("add", help="add files or folders to the library and index them")
    add.add_argument("paths", nargs="+")
    add.add_argument("--no-wait", action="store_true", help="do not wait for the indexing")
    ksub.add_parser("list", help="the library's documents and their status")
    remove = ksub.add_parser("remove", help="take a document out of the library (the file stays)")
    remove.add_argument("path")
    embeddings = ksub.add_parser("embeddings", help="show or choose the embeddings model (search by meaning too)")
    embeddings.add_argument("model", nargs="?", help="provider/model of an OpenAI-compatible server, or off")
    jobs = sub.add_parser("jobs", help="the log of background work: saving memories, indexing documents, backups")
    jobs.add_argument("--failed", action="store_true", help="only the jobs that failed")
    jobs.add_argument("--limit", type=int, default=20, help="how many of the newest (default 20)")


def reads_only(args: argparse.Namespace) -> bool:
    sub = getattr(args, f"{args.command}_command", None)
    return (args.command, sub) in _READS


async def run(rt: Runtime, args: argparse.Namespace) -> int:
    if args.command == "memory":
        return await _memory(rt, args)
    if args.command == "jobs":
        return await _jobs(rt, args)
    return await _knowledge(rt, args)


async def _jobs(rt: Runtime, args: argparse.Namespace) -> int:
    if args.limit < 1:
        raise ConfigError("--limit must be at least 1.")
    jobs = await rt.jobs.log(limit=args.limit, failed=args.failed)
    for j in jobs:
        task = f"  task {j['task_id'][:8]}" if j.get("task_id") else ""
        outcome = f"failed: {j['error']}" if j["status"] == "failed" and j.get("error") else j["status"]
        print(f"{_when(j['created_at'])}  {j['label'].lower():<20}{task}  {outcome}")
    if not jobs:
        print("No failed background jobs." if args.failed else "No background jobs yet.")
    return 0


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts)) if ts else "never"


async def _memory(rt: Runtime, args: argparse.Namespace) -> int:
    command = args.memory_command
    if command == "list":
        rows = await rt.memory.list(args.search)
        if not rt.memory.enabled:
            print("Memory is off (hearth memory on turns it back on).", file=sys.stderr)
        for m in rows:
            source = f"task {m['source_task_id']}" if m.get("source_task_id") else m.get("origin") or "file"
            print(f"{m['name']:<28} {m['summary']}  [{source}, used {_when(m.get('last_used_at'))}]")
        if not rows:
            print("No memories." if not args.search else "No memory matches.")
        print(f"Folder: {rt.memory.folder}", file=sys.stderr)
    elif command == "show":
        print(await rt.memory.text(args.name), end="")
    elif command == "add":
        text = args.text if args.text not in (None, "-") else await _read_stdin()
        print(f"Added {await rt.memory.add(args.name, text)}.")
    elif command == "forget":
        if args.all == bool(args.name):
            raise ConfigError("Give the name of a memory to forget, or --all.")
        if args.all:
            print(f"Forgot {await rt.memory.forget_all()} memories.")
        else:
            await rt.memory.forget(args.name)
            print(f"Forgot {args.name}.")
    else:
        await rt.memory.set_enabled(command == "on")
        print("Memory is on." if command == "on" else "Memory is off: no task uses or saves memories.")
    return 0


async def _read_stdin() -> str:
    if sys.stdin.isatty():
        print("Type the memory (a first line that sums it up, then the details); end with Ctrl-D.", file=sys.stderr)
    return await asyncio.to_thread(sys.stdin.read)


async def _knowledge(rt: Runtime, args: argparse.Namespace) -> int:
    command = args.knowledge_command
    if command == "list":
        docs = await rt.knowledge.list()
        for d in docs:
            _print_doc(d)
        if not docs:
            print("The library is empty: hearth knowledge add PATH…")
        return 0
    if command == "embeddings":
        return await _embeddings(rt, args.model)
    if command == "remove":
        if not await rt.knowledge.remove(args.path):
            raise ConfigError(f"{args.path} is not in the library.")
        print(f"Removed {args.path} from the library.")
        return 0
    added = await rt.knowledge.add(args.paths)
    docs = added.documents
    print(f"Added {len(docs)} document(s).")
    for why in added.not_added:
        print(f"Not added: {why}", file=sys.stderr)
    failed = 2 if added.not_added else 0
    if args.no_wait or not docs:
        return failed
    wanted = {d["id"] for d in docs}
    shown: set[int] = set()
    async for status in rt.knowledge.changes():
        for d in status["documents"]:
            if d["id"] in wanted and d["id"] not in shown and d["status"] not in ("queued", "indexing"):
                shown.add(d["id"])
                _print_doc(d)
        if shown == wanted:
            break
        await asyncio.sleep(0)
    unreadable = [d for d in (await rt.knowledge.list()) if d["id"] in wanted and d["status"] != "ready"]
    return 2 if unreadable else failed


async def _embeddings(rt: Runtime, model: str | None) -> int:
    if model is None:
        chosen = rt.knowledge.embeddings_model
        print(f"Search by meaning with {chosen}." if chosen else "Search by words only (no embeddings model).")
        return 0
    off = model.strip().lower() == "off"
    queued = await rt.knowledge.set_embeddings_model(None if off else model)
    if off:
        print("Search by words only from now on.")
    else:
        later = f" {queued} document(s) get vectors at the next indexing." if queued else ""
        print(f"Search by meaning with {model.strip()} too.{later}")
    return 0


def _print_doc(d: dict) -> None:
    state = d["status"] if d["status"] != "indexing" else f"indexing {round(100 * (d['progress'] or 0))}%"
    detail = f"  {d['detail']}" if d.get("detail") else ""
    print(f"{state:<14} {d['passages']:>7} passages  {d['path']}{detail}")
