"""Task-bound approval policy and permission rules.

Modes: `ask` (default): every call that is not read-only waits for the person. `auto_edit`: workspace writes run,
shell and external calls ask. `full_auto`: everything runs, except a shell command that cannot run in the sandbox
(tools/shell/sandbox.py): that asks, unless the person accepted the risk for the task (`unsandboxed_ok`).

Rules override the mode. A rule names a tool, a decision (`allow` or `deny`) and, for `run_shell`, optionally a
command ("git status"); it belongs to one task or is global (the store keeps them; the facade lists, adds and
removes them). Decisions:
- A deny rule wins over any allow rule, whatever their scopes.
- A command rule matches the *parsed* command line (tools/shell/parse.py), never a string prefix. An allow rule
  covers a command line only when every simple command in it starts with the rule's words, each of those words
  is literal (no `$VAR`, glob or `~`), no command sets variables (`GIT_DIR=… git status`), output goes to no file
  but /dev/null, and nothing in the line is unparsable (`$(…)`, backquotes, here-documents, …). Anything else is
  decided by the mode, which usually means the person is asked.
- A deny rule is matched generously (tools/shell/deny.py): in every command the line may run, including those
  inside substitutions, behind wrappers (`sudo -u bob`, `xargs`, `timeout`, …), in `sh -c` / `su -c` / `eval`
  strings and `find -exec`; flags match as letters with their synonyms, so "rm -rf" also denies `rm -fR x` and
  `rm -r --force x`. It is a convenience that catches the usual spellings, not a guarantee: the sandbox is what
  keeps a command in its place.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from runtime.errors import ConfigError

from .base import Effect
from .shell.deny import denies
from .shell.parse import KEYWORDS, ParsedCommand, SimpleCommand, parse_command

APPROVAL_MODES = ("ask", "auto_edit", "full_auto")
COMMAND_TOOLS = frozenset({"run_shell"})  # tools whose rules may name a command line
_QUIET_TARGETS = frozenset({"/dev/null"})

Decision = Literal["allow", "ask", "deny"]


@dataclass(frozen=True)
class Rule:
    tool: str
    decision: Literal["allow", "deny"]
    command: tuple[str, ...] = ()  # the words a command must start with; () = every call of the tool


def command_words(text: str) -> tuple[str, ...]:
    """The words of a rule's command ("git status"); ConfigError unless it is one plain command."""
    parsed = parse_command(text)
    plain = len(parsed.commands) == 1 and not parsed.problems
    cmd = parsed.commands[0] if plain else None
    if cmd is None or cmd.assignments or cmd.redirects or not all(w.literal for w in cmd.words):
        raise ConfigError(f"A rule's command must be one plain command like 'git status', without ;, |, &&, "
                          f"redirections, variables or $(...); {text.strip()[:80]!r} is not.")
    if cmd.words[0].text in KEYWORDS:
        raise ConfigError(f"A rule's command cannot start with the shell word {cmd.words[0].text!r}.")
    return tuple(cmd.argv)


def rule_from_row(row: dict) -> Rule | None:
    """A stored rule (`tool`, `decision`, `command`); None when its command no longer parses."""
    try:
        words = command_words(row["command"]) if row.get("command") else ()
    except ConfigError:
        return None
    return Rule(row["tool"], row["decision"], words)


def rule_verdict(tool: str, command: str | None, rules: Iterable[Rule]) -> Literal["allow", "deny"] | None:
    """What the rules say about this call, or None when they say nothing (the mode decides)."""
    mine = [r for r in rules if r.tool == tool]
    if not mine:
        return None
    parsed = parse_command(command) if command is not None and tool in COMMAND_TOOLS else None
    for rule in mine:
        if rule.decision == "deny" and (not rule.command or (parsed is not None and denies(parsed, rule.command))):
            return "deny"
    if any(r.decision == "allow" and not r.command for r in mine):
        return "allow"
    prefixes = [r.command for r in mine if r.decision == "allow" and r.command]
    if prefixes and parsed is not None and allows(parsed, prefixes):
        return "allow"
    return None


def decide(tool_name: str, effect: Effect | str, mode: str, rules: Iterable[Rule] = (), *,
           command: str | None = None, sandboxed: bool | None = None, unsandboxed_ok: bool = False) -> Decision:
    """`sandboxed` is None for tools without a sandbox, else whether this call would run in one."""
    verdict = rule_verdict(tool_name, command, rules)
    if verdict is not None:
        return verdict
    if effect == Effect.read_only:
        return "allow"
    if mode == "full_auto":
        return "ask" if sandboxed is False and not unsandboxed_ok else "allow"
    if mode == "auto_edit" and effect == Effect.workspace_write:
        return "allow"
    return "ask"


# -- allow: strict --


def allows(parsed: ParsedCommand, prefixes: Sequence[tuple[str, ...]]) -> bool:
    """True when every simple command of the line is covered by one of the allowed prefixes."""
    if parsed.problems or not parsed.commands:
        return False
    return all(_allowed(cmd, prefixes) for cmd in parsed.commands)


def _allowed(cmd: SimpleCommand, prefixes: Sequence[tuple[str, ...]]) -> bool:
    if cmd.assignments or not cmd.words or not all(_quiet(op, target.text, target.literal)
                                                   for op, target in cmd.redirects):
        return False
    for prefix in prefixes:
        head = cmd.words[: len(prefix)]
        if len(head) == len(prefix) and all(w.literal and w.text == p for w, p in zip(head, prefix, strict=True)):
            return True
    return False


def _quiet(op: str, target: str, literal: bool) -> bool:
    """A redirection that writes no file: input, descriptor copies, or output to /dev/null."""
    op = op.lstrip("0123456789")
    if op == "<":
        return True
    if op in ("<&", ">&"):
        return literal and (target.isdigit() or target == "-")
    return op in (">", ">>", ">|", "&>", "&>>") and literal and target in _QUIET_TARGETS
