"""`hearth mcp list|add|remove|approve|import` (runtime/cli/main.py): the MCP servers tasks may launch, and consent.

    hearth mcp list                          # each server, its command line, approved / paused / not approved
    hearth mcp add NAME [--yes] -- COMMAND [ARGS...]   |   hearth mcp add NAME --url URL
    hearth mcp approve NAME [--yes]          # consent to its command line; for a paused one, to its new tools
    hearth mcp remove NAME
    hearth mcp import PATH                   # a Claude Desktop / Cursor / VS Code config file; nothing approved

A server whose tools changed since they were approved is paused (its tools are not offered). `approve` on it
prints what changed, tool by tool, and asks before the new tools become the approved ones (`--yes` in a script).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from ..errors import ConfigError

if TYPE_CHECKING:
    from ..api import Runtime


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    mcp = sub.add_parser("mcp", help="manage MCP servers").add_subparsers(dest="mcp_command", required=True)
    mcp.add_parser("list", help="configured servers, their command lines and consent")
    add = mcp.add_parser("add", help="add a stdio server: hearth mcp add NAME -- COMMAND [ARGS...]")
    add.add_argument("name")
    add.add_argument("--url", help="a streamable HTTP server instead of a command")
    add.add_argument("--yes", action="store_true", help="approve launching it without asking")
    remove = mcp.add_parser("remove", help="remove a server and its consent")
    remove.add_argument("name")
    approve = mcp.add_parser("approve", help="consent to launching a server, or to a paused server's new tools")
    approve.add_argument("name")
    approve.add_argument("--yes", action="store_true", help="accept changed tools without asking")
    imp = mcp.add_parser("import", help="import a Claude Desktop / Cursor config file")
    imp.add_argument("path")


def _ask(question: str, yes: bool, refused: str) -> bool:
    if yes:
        return True
    if not sys.stdin.isatty():
        print(refused, file=sys.stderr)
        return False
    return input(question).strip().lower() in ("y", "yes")


async def run(rt: Runtime, args: argparse.Namespace) -> int:
    """The exit code: 0 done, 2 when nothing was approved."""
    if args.mcp_command == "list":
        paused = {c.server for c in rt.mcp.tool_changes()}
        for name, line, approved in rt.mcp.servers():
            state = "not approved" if not approved else (
                f"paused: its tools changed, see `hearth mcp approve {name}`" if name in paused else "approved")
            print(f"{name}  [{state}]  {line}")
    elif args.mcp_command == "add":
        command = args.argv
        if bool(command) == bool(args.url):
            raise ConfigError("Give either a command after `--` or --url.")
        cfg = {"url": args.url} if args.url else {"command": command[0], "args": command[1:]}
        line = await rt.mcp.add(args.name, cfg)
        print(f"Command line: {line}")
        if _ask("Allow Hearth to launch this when a task needs it? [y/N] ", args.yes,
                "Not approved (no terminal to ask); run `hearth mcp approve NAME` to allow it."):
            rt.mcp.approve(args.name)
            print(f"Added and approved {args.name}.")
        else:
            print(f"Added {args.name}; it will not be launched until approved.")
    elif args.mcp_command == "remove":
        await rt.mcp.remove(args.name)
        print(f"Removed {args.name}.")
    elif args.mcp_command == "approve":
        return _approve(rt, args)
    else:
        imported = await rt.mcp.import_config(args.path)
        for name, line in imported.items():
            print(f"Imported {name} (not approved yet): {line}")
        print("Approve each with `hearth mcp approve NAME` after checking its command line.")
    return 0


def _approve(rt: Runtime, args: argparse.Namespace) -> int:
    change = next((c for c in rt.mcp.tool_changes() if c.server == args.name), None)
    approved = any(name == args.name and ok for name, _, ok in rt.mcp.servers())
    if change is None or not approved:
        print(f"Approved {args.name}: {rt.mcp.approve(args.name)}")
        return 0
    print(f"{args.name} is paused: its tools changed since you approved them.\n")
    for c in change.changes:
        print(c["text"] + "\n")
    if not _ask(f"Approve these tools of {args.name}? [y/N] ", args.yes,
                f"Not approved (no terminal to ask); run `hearth mcp approve {args.name} --yes` to accept them."):
        return 2
    rt.mcp.approve_tools(args.name)
    print(f"Approved the new tools of {args.name}; tasks can use it again.")
    return 0
