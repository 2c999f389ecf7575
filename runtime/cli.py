"""Headless CLI: `hearth run | tasks | show | models`, also `python -m runtime.cli`.

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


async def _main(args: argparse.Namespace) -> int:
    rt = await Runtime.open(args.home)
    try:
        if args.command == "run":
            return await _run(rt, args)
        if args.command == "tasks":
            return await _tasks(rt)
        if args.command == "models":
            return await _models(rt)
        return await _show(rt, args.task_id)
    finally:
        await rt.aclose()


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
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
