"""`hearth team create|show|run|stop|answer|delete` (runtime/cli/main.py): a team of members working a plan of
assignments.

    hearth team create "Write an essay" --member lead local/qwen "You plan and merge." \\
        --member writer local/qwen --assign A lead "Outline the essay." --assign B writer "Draft it." A \\
        [--max-parallel 2] [--approval full_auto]
    hearth team create "Write an essay" --member lead local/qwen --member writer local/qwen --lead lead
    hearth team create --file plan.json      # {"goal", "members", "assignments", "max_parallel", "lead"}
    hearth team show [ID [KEY]]              # every team; one team's board; one assignment's conversation
    hearth team run ID [--retry KEY] [--skip KEY]
    hearth team stop ID [--assignment KEY]
    hearth team answer ID KEY (--approve | --deny | --text "...")
    hearth team delete ID                    # the team, its plan and conversations (its folder stays)

`--member NAME MODEL [ROLE]` (tools: all, or `--tools NAME all|files|read_only|none|name,name`; approval:
`--approval`, default ask) and `--assign KEY MEMBER INSTRUCTIONS [DEPS]` (DEPS: keys, comma-separated) take
separate words, so a model or an instruction may hold a colon. `--lead NAME` starts the plan with that member
turning the goal into assignments. In the JSON file, members and assignments are objects with the facade's fields
(teams_api.Teams.create; a member's "tools" is a list of tool names or one of "all", "files", "read_only", "none").
`create` prints the team's id on stdout. `run` starts or continues the plan (stopped and interrupted
assignments continue; `--retry` / `--skip` first deal with a failed one), waits until nothing runs and prints the
board: exit 0 when every assignment is done or skipped, 4 when one waits for an approval or an answer (`answer`
gives it and goes on like `run`), 3 when one failed, 130 on Ctrl-C (which stops the team: running assignments
end aborted). A team runs only in the process that runs it, so Ctrl-C is how to stop a running `hearth team
run`. `stop` cannot reach into that process: while another process owns the data folder (a `hearth team run`,
or the app) it is refused with exit 5 like every command that changes something; otherwise nothing of the team
is running, and `stop` says so and prints the board.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigError
from ..teams.specs import TOOL_SETS
from ..workspace import workspace_for
from .exits import EXIT_OK, EXIT_PROVIDER, EXIT_STOPPED, EXIT_WAITING

if TYPE_CHECKING:
    from ..api import Runtime
    from ..infos import TeamInfo

COMMANDS = ("team",)


def add_team_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    team = sub.add_parser("team", help="a team of members working a plan of assignments")
    cmds = team.add_subparsers(dest="team_command", required=True)
    create = cmds.add_parser("create", help="a new team with its members and plan")
    create.add_argument("goal", nargs="?")
    create.add_argument("--member", action="append", nargs="+", default=[], metavar="NAME MODEL [ROLE]")
    create.add_argument("--assign", action="append", nargs="+", default=[], metavar="KEY MEMBER INSTRUCTIONS [DEPS]")
    create.add_argument("--tools", action="append", nargs=2, default=[], metavar=("NAME", "TOOLS"),
                        help="a member's tools: all (default), files, read_only, none, or names with commas")
    create.add_argument("--approval", default="ask", help="the members' approval mode (ask, auto_edit, full_auto)")
    create.add_argument("--max-parallel", type=int, help="assignments running at once (default: settings)")
    create.add_argument("--lead", metavar="NAME", help="a member who first turns the goal into assignments")
    create.add_argument("--file", help="a JSON plan: goal, members, assignments, max_parallel, lead")
    show = cmds.add_parser("show", help="list teams, show a team's board, or an assignment's conversation")
    show.add_argument("team_id", nargs="?")
    show.add_argument("key", nargs="?")
    run = cmds.add_parser("run", help="start or continue a team's plan and wait until nothing runs")
    run.add_argument("team_id")
    run.add_argument("--retry", metavar="KEY", help="first give a failed assignment a new answer")
    run.add_argument("--skip", metavar="KEY", help="first go on without a failed assignment")
    answer = cmds.add_parser("answer", help="answer the approval or question an assignment waits for, and go on")
    answer.add_argument("team_id")
    answer.add_argument("key")
    which = answer.add_mutually_exclusive_group(required=True)
    which.add_argument("--approve", action="store_true")
    which.add_argument("--deny", action="store_true")
    which.add_argument("--text", help="the answer to a question")
    stop = cmds.add_parser("stop", help="stop a team (or one assignment of it)")
    stop.add_argument("team_id")
    stop.add_argument("--assignment", metavar="KEY")
    delete = cmds.add_parser("delete", help="delete a team, its plan and its conversations (its folder stays)")
    delete.add_argument("team_id")


def reads_only(args: argparse.Namespace) -> bool:
    return args.command == "team" and args.team_command == "show"


async def run(rt: Runtime, args: argparse.Namespace) -> int:
    if args.team_command == "create":
        team = await rt.teams.create(**_plan(args))
        print(team.id)
        print(board(team))
        return EXIT_OK
    if args.team_command == "show":
        return await _show(rt, args)
    if args.team_command == "stop":
        return await _stop(rt, args)
    if args.team_command == "delete":
        team = await rt.teams.get(args.team_id)
        await rt.teams.delete(team.id)
        print(f"Deleted team {team.id} ({team.title}); its folder stays at {workspace_for(rt.home, team.id)}.")
        return EXIT_OK
    if args.team_command == "answer":
        await _answer(rt, args)
        return await _follow(rt, args.team_id)
    return await _run(rt, args)


async def _stop(rt: Runtime, args: argparse.Namespace) -> int:
    """This process owns the data folder (another owner refuses the command), so nothing of the team runs here:
    the stop finds nothing to end, and the person is told where a running team is stopped instead."""
    if args.assignment:
        await rt.teams.stop_assignment(args.team_id, args.assignment)
        print(f"Assignment {args.assignment} of team {args.team_id} is not running: a team runs only in the "
              "process that runs it, and Ctrl-C there stops it.")
    else:
        await rt.teams.stop(args.team_id)
        print(f"Nothing of team {args.team_id} is running: a team runs only in the process that runs it, and "
              "Ctrl-C there stops it.")
    print(board(await rt.teams.get(args.team_id)))
    return EXIT_OK


async def _answer(rt: Runtime, args: argparse.Namespace) -> None:
    team = await rt.teams.get(args.team_id)
    assignment = next((a for a in team.assignments if a.key == args.key), None)
    req = assignment.pending_request if assignment is not None and assignment.status == "waiting" else None
    if req is None:
        raise ConfigError(f"Assignment {args.key!r} is not waiting for an answer.")
    if req["kind"] == "approval":
        if args.text is not None:
            raise ConfigError("This assignment waits for an approval: answer with --approve or --deny.")
        answer = "approve" if args.approve else "deny"
    else:
        if args.text is None:
            raise ConfigError(f"This assignment asks: {req['prompt']} Answer with --text \"...\".")
        answer = args.text
    await rt.teams.answer(args.team_id, args.key, req["request_id"], answer)


def _plan(args: argparse.Namespace) -> dict:
    if args.file:
        try:
            plan = json.loads(Path(args.file).expanduser().read_text())
        except OSError as exc:
            raise ConfigError(f"Cannot read {args.file}: {exc.strerror or exc}.") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{args.file} is not valid JSON ({exc}).") from None
        if not isinstance(plan, dict) or set(plan) - {"goal", "members", "assignments", "max_parallel", "lead"}:
            raise ConfigError(f"{args.file} must be an object with goal, members, assignments, max_parallel "
                              "and lead.")
        return plan
    if not args.goal or not args.goal.strip():
        raise ConfigError('Give the team a goal, e.g. hearth team create "Write an essay" --member …')
    members = []
    for words in args.member:
        if len(words) not in (2, 3):
            raise ConfigError(f"--member takes NAME MODEL [ROLE], not {' '.join(words)!r}.")
        members.append({"name": words[0], "model": words[1], "role": words[2] if len(words) == 3 else "",
                        "approval": args.approval})
    for name, tools in args.tools:
        member = next((m for m in members if m["name"] == name), None)
        if member is None:
            raise ConfigError(f"--tools names {name!r}, who is not one of the --member names.")
        tools = tools.strip()
        member["tools"] = tools if tools in TOOL_SETS else [t.strip() for t in tools.split(",") if t.strip()]
    assignments = []
    for words in args.assign:
        if len(words) not in (3, 4):
            raise ConfigError(f"--assign takes KEY MEMBER INSTRUCTIONS [DEPS], not {' '.join(words)!r}.")
        deps = [d.strip() for d in words[3].split(",") if d.strip()] if len(words) == 4 else []
        assignments.append({"key": words[0], "member": words[1], "instructions": words[2], "depends_on": deps})
    return {"goal": args.goal, "members": members, "assignments": assignments, "max_parallel": args.max_parallel,
            "lead": args.lead}


async def _show(rt: Runtime, args: argparse.Namespace) -> int:
    if not args.team_id:
        for team in await rt.teams.list():
            done = sum(a.status in ("done", "skipped") for a in team.assignments)
            print(f"{team.id}  {team.state:<8} {done}/{len(team.assignments)} done  {team.title}")
        return EXIT_OK
    if args.key:
        for msg in await rt.teams.messages(args.team_id, args.key):
            print(f"{'Input' if msg.role == 'user' else 'Answer'}: {msg.text}\n")
        return EXIT_OK
    print(board(await rt.teams.get(args.team_id)))
    return EXIT_OK


async def _run(rt: Runtime, args: argparse.Namespace) -> int:
    if args.retry:
        await rt.teams.retry(args.team_id, args.retry)
    if args.skip:
        await rt.teams.skip(args.team_id, args.skip)
    await rt.teams.run(args.team_id)
    return await _follow(rt, args.team_id)


async def _follow(rt: Runtime, team_id: str) -> int:
    """Wait until nothing of the team runs (Ctrl-C stops it), print the board, and say how it ended."""
    loop = asyncio.get_running_loop()
    stopping: set[asyncio.Task] = set()
    loop.add_signal_handler(signal.SIGINT, lambda: stopping.add(loop.create_task(rt.teams.stop(team_id))))
    try:
        await rt.teams.wait_idle(team_id)
        if stopping:
            await asyncio.gather(*stopping)
            await rt.teams.wait_idle(team_id)
    finally:
        loop.remove_signal_handler(signal.SIGINT)
    team = await rt.teams.get(team_id)
    print(board(team))
    statuses = {a.status for a in team.assignments}
    if stopping or statuses & {"aborted", "interrupted"}:
        return EXIT_STOPPED
    if "failed" in statuses:
        return EXIT_PROVIDER
    if "waiting" in statuses:
        return EXIT_WAITING
    return EXIT_OK


def board(team: TeamInfo) -> str:
    """The team as text: goal and state, members, and each assignment's status, with what it waits for."""
    lines = [f"team {team.id}  [{team.state}]  {team.title}  (at most {team.max_parallel} at once)", "members:"]
    for m in team.members:
        named = next((name for name, tools in TOOL_SETS.items() if tools == m.tools), None)
        tools = named or ", ".join(m.tools)
        lines.append(f"  {m.name:<12} {m.model}  {m.approval}  tools: {tools}" + (f"  — {m.role}" if m.role else ""))
    lines.append("assignments:")
    for a in team.assignments:
        deps = f"  after {', '.join(a.depends_on)}" if a.depends_on else ""
        line = f"  {a.key:<6} {a.status:<11} {a.member:<12} {a.title or a.instructions[:50]}{deps}"
        lines.append(line + (f"  — {a.reason}" if a.reason else ""))
    return "\n".join(lines)
