"""Headless CLI: `hearth run | tasks | show | models | mcp`, also `python -m runtime.cli`.

Exit codes: 0 completed (or waiting for an answer, which is printed), 2 usage or config error,
3 provider error, 130 stopped (Ctrl-C stops the turn, waits for finalize, then exits).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from .api import Runtime
from .errors import ConfigError, HearthError, TaskNotFound
from .events import EndReason

EXIT_OK, EXIT_USAGE, EXIT_PROVIDER, EXIT_STOPPED = 0, 2, 3, 130


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hearth", description="Hearth, an offline-first personal agent.")
    p.add_argument("--home", help="data folder (default: $HEARTH_HOME or the user data folder)")
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="send an input and stream the turn")
    run.add_argument("text")
    run.add_argument("--task", help="continue this task (default: a new task)")
    run.add_argument("--model", help="provider_id/model_name for a new task")
    run.add_argument("--approval", default="ask", choices=["ask", "auto_edit", "full_auto"])
    sub.add_parser("tasks", help="list tasks")
    show = sub.add_parser("show", help="show a task's conversation")
    show.add_argument("task_id")
    sub.add_parser("models", help="list the models of configured and detected local servers")
    mcp = sub.add_parser("mcp", help="manage MCP servers").add_subparsers(dest="mcp_command", required=True)
    mcp.add_parser("list", help="configured servers, their command lines and consent")
    add = mcp.add_parser("add", help="add a stdio server: hearth mcp add NAME -- COMMAND [ARGS...]")
    add.add_argument("name")
    add.add_argument("--url", help="a streamable HTTP server instead of a command")
    add.add_argument("--yes", action="store_true", help="approve launching it without asking")
    remove = mcp.add_parser("remove", help="remove a server and its consent")
    remove.add_argument("name")
    approve = mcp.add_parser("approve", help="consent to launching a configured server")
    approve.add_argument("name")
    imp = mcp.add_parser("import", help="import a Claude Desktop / Cursor config file")
    imp.add_argument("path")
    return p


async def _run(rt: Runtime, args: argparse.Namespace) -> int:
    if args.task:
        task = await rt.get_task(args.task)
    else:
        task = await rt.create_task(model=args.model, approval=args.approval)
    handle = await rt.send(task.id, args.text)
    loop = asyncio.get_running_loop()
    stopped = False
    stopping: set[asyncio.Task] = set()

    def on_sigint() -> None:
        nonlocal stopped
        stopped = True
        stopping.add(loop.create_task(rt.stop(task.id)))

    loop.add_signal_handler(signal.SIGINT, on_sigint)
    try:
        ended = None
        async for ev in rt.subscribe(task.id, turn_id=handle.turn_id):
            if ev.type == "text_delta":
                sys.stdout.write(ev.text)
                sys.stdout.flush()
            elif ev.type == "tool_call" and ev.state in ("running", "done", "error", "denied", "interrupted"):
                print(f"\n[{ev.name} {ev.state}]", file=sys.stderr)
            elif ev.type == "input_requested":
                print(f"\n[waiting] {ev.prompt} (request {ev.request_id})", file=sys.stderr)
            elif ev.type == "warning":
                print(f"\n[warning] {ev.message}", file=sys.stderr)
            elif ev.type == "turn_ended":
                ended = ev
        await rt.wait_idle(task.id)
    finally:
        loop.remove_signal_handler(signal.SIGINT)
    print()
    print(f"task {task.id}", file=sys.stderr)
    if ended is None:
        return EXIT_PROVIDER
    if ended.reason in (EndReason.aborted, EndReason.interrupted) or stopped:
        return EXIT_STOPPED
    if ended.reason == EndReason.error:
        print(f"error: {ended.error}", file=sys.stderr)
        return EXIT_PROVIDER
    return EXIT_OK


async def _tasks(rt: Runtime) -> int:
    for t in await rt.list_tasks():
        state = t.state if t.state != "idle" else (t.last_reason or "idle")
        print(f"{t.id}  {state:<11}  {t.model:<28}  {t.title or '(untitled)'}")
    return EXIT_OK


async def _show(rt: Runtime, task_id: str) -> int:
    task = await rt.get_task(task_id)
    print(f"# {task.title or '(untitled)'}  [{task.state}{', ' + task.last_reason if task.last_reason else ''}]")
    for m in await rt.messages(task_id):
        print(f"\n## {m.role}")
        for part in m.parts:
            kind = part.get("type")
            if kind in ("text", "reasoning") and part.get("text"):
                print(part["text"] if kind == "text" else f"(thinking) {part['text']}")
            elif kind == "tool_call":
                print(f"[{part['name']} {part['state']}] {part.get('result') or ''}".rstrip())
            elif kind == "attachment":
                print(f"(attached {part['name']})")
            elif kind == "answer":
                print(f"(answered: {part['answer']})")
    return EXIT_OK


async def _models(rt: Runtime) -> int:
    configured, detected = await asyncio.gather(rt.all_models(), rt.detect_local_servers())
    for provider_id, models in configured.items():
        if isinstance(models, str):
            print(f"{provider_id}: unavailable: {models}")
        else:
            print("\n".join(models) if models else f"{provider_id}: no models")
    known = {p.base_url for p in rt.settings.providers}
    for preset in rt.presets():
        if preset.id in detected and preset.base_url not in known:
            models = ", ".join(detected[preset.id])
            print(f"\nDetected {preset.label} at {preset.base_url} (not configured yet): {models}")
    return EXIT_OK


def _confirm(line: str, yes: bool) -> bool:
    print(f"Command line: {line}")
    if yes:
        return True
    if not sys.stdin.isatty():
        print("Not approved (no terminal to ask); run `hearth mcp approve NAME` to allow it.", file=sys.stderr)
        return False
    return input("Allow Hearth to launch this when a task needs it? [y/N] ").strip().lower() in ("y", "yes")


async def _mcp(rt: Runtime, args: argparse.Namespace) -> int:
    if args.mcp_command == "list":
        for name, line, approved in rt.mcp_servers():
            print(f"{name}  [{'approved' if approved else 'not approved'}]  {line}")
    elif args.mcp_command == "add":
        command = args.argv
        if bool(command) == bool(args.url):
            raise ConfigError("Give either a command after `--` or --url.")
        cfg = {"url": args.url} if args.url else {"command": command[0], "args": command[1:]}
        line = await rt.add_mcp_server(args.name, cfg)
        if _confirm(line, args.yes):
            rt.approve_mcp_server(args.name)
            print(f"Added and approved {args.name}.")
        else:
            print(f"Added {args.name}; it will not be launched until approved.")
    elif args.mcp_command == "remove":
        await rt.remove_mcp_server(args.name)
        print(f"Removed {args.name}.")
    elif args.mcp_command == "approve":
        print(f"Approved {args.name}: {rt.approve_mcp_server(args.name)}")
    else:
        imported = await rt.import_mcp_config(args.path)
        for name, line in imported.items():
            print(f"Imported {name} (not approved yet): {line}")
        print("Approve each with `hearth mcp approve NAME` after checking its command line.")
    return EXIT_OK


async def _main(args: argparse.Namespace) -> int:
    rt = await Runtime.open(args.home)
    try:
        if args.command == "run":
            return await _run(rt, args)
        if args.command == "tasks":
            return await _tasks(rt)
        if args.command == "models":
            return await _models(rt)
        if args.command == "mcp":
            return await _mcp(rt, args)
        return await _show(rt, args.task_id)
    finally:
        await rt.aclose()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # Everything after `--` is a command line (hearth mcp add NAME -- COMMAND ARGS); argparse's subparsers
    # do not pass it through reliably.
    cut = argv.index("--") if "--" in argv else len(argv)
    args = _parser().parse_args(argv[:cut])
    args.argv = argv[cut + 1 :]
    try:
        return asyncio.run(_main(args))
    except (ConfigError, TaskNotFound) as exc:
        print(f"hearth: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except HearthError as exc:
        print(f"hearth: {exc}", file=sys.stderr)
        return EXIT_PROVIDER


if __name__ == "__main__":
    sys.exit(main())
