"""How a deny rule ("rm -rf") reads a command line: generously, so the usual spellings are caught (tools/approvals.py).

A rule denies a line when it matches any command the line may run:
- every simple command, including those inside substitutions (tools/shell/parse.py);
- behind shell keywords, assignments and wrappers, whose options are skipped together with their arguments
  (`sudo -u bob rm`, `xargs -I {} rm`, `timeout -s KILL 10 rm`); the wrapper itself counts too, so "sudo" denies
  `sudo ls`;
- the command lines that shells (`sh -c`), `su -c`, `flock -c`, `env -S`, `eval` and `ssh host …` run, a whole
  line given as one word (`sudo -i 'rm -rf x'`), the commands that `find -exec` / `-execdir` / `-ok` /
  `-okdir` run, and the string literals of `python -c` / `perl -e` / `ruby -e` / `node -e` code
  (`os.system("rm -rf x")`, `subprocess.run(["rm", "-rf", "x"])`);
- with the variables the line itself sets put in (`a=rm; $a -rf x`, `export A=rm && ${A} -rf x`);
- flags compared as letters, after the synonyms of the usual destructive commands are mapped to one spelling
  (`-R`, `--recursive` and `--rec` are rm's `-r`), so "rm -rf" also denies `rm -fR x` and `rm -r --force x`.
Extra readings only ever add denials, and a command hiding more than 64 others (wrappers, `-exec` actions) or
command lines nested more than 3 deep is denied rather than read to the end; allow rules never use this module.
It catches the usual spellings, not all of them: the sandbox is what keeps a command in its place.
"""

from __future__ import annotations

import os
import re

from .parse import KEYWORDS, ParsedCommand, parse_command

_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash"})
_MAX_DEPTH = 3  # command lines inside command lines: `sh -c "eval 'sh -c …'"`
_MAX_READINGS = 64  # commands hidden in one (`nice sudo env …`, `find -exec`); a command hiding more is refused
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_FLAGS = re.compile(r"-[A-Za-z0-9]+")
_VARIABLE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
_DECLARE = frozenset({"export", "declare", "typeset", "local", "readonly"})
# Interpreters whose -c / -e code may run a command line: its string literals are read as command lines, and
# a list of literals (`subprocess.run(["rm", "-rf", "x"])`) as one.
_INTERPRETER = re.compile(r"python[0-9.]*|perl|ruby|node")
_STRING = re.compile(r"\"((?:[^\"\\]|\\.)*)\"|'((?:[^'\\]|\\.)*)'")
_STRING_LIST = re.compile(r"\[\s*(?:(?:\"[^\"]*\"|'[^']*')\s*,?\s*)+\]")
# ssh's options that take the next word; after them come the host and the command line it runs there.
_SSH_OPTIONS = frozenset("-B -b -c -D -E -e -F -I -i -J -L -l -m -O -o -p -Q -R -S -W -w".split())

# Wrappers run the command that follows their options; these options take the next word as their argument.
_WRAPPER_OPTIONS = {name: frozenset(options.split()) for name, options in {
    "sudo": "-u -g -C -h -p -r -t -U -D -R -T --user --group --close-from --host --prompt --role --type "
            "--other-user --chdir --chroot --command-timeout",
    "doas": "-u -C",
    "env": "-u -C -S -P --unset --chdir --split-string",
    "xargs": "-I -n -P -d -L -s -E -a --max-args --max-procs --delimiter --max-lines --max-chars --arg-file "
             "--process-slot-var",
    "nice": "-n --adjustment",
    "timeout": "-s -k --signal --kill-after",
    "stdbuf": "-i -o -e --input --output --error",
    "ionice": "-c -n -p -P -u --class --classdata --pid --pgid --uid",
    "chrt": "-T -P -D --sched-runtime --sched-period --sched-deadline",
    "flock": "-w -E -c --timeout --wait --conflict-exit-code --command",
    "time": "-f -o --format --output",
    "exec": "-a",
    "runuser": "-u -g -G -s -w --user --group --supp-group --shell --whitelist-environment",
    "command": "", "builtin": "", "nohup": "", "setsid": "", "unbuffer": "", "busybox": "", "taskset": "",
}.items()}
# Words a wrapper takes after its options and before the command: `timeout 10s rm`, `flock /tmp/lock rm`.
_WRAPPER_OPERANDS = {"timeout": 1, "chrt": 1, "taskset": 1, "flock": 1}

# Programs that run a command line given as a word: the short option letter (also inside `-lc`) and long options.
_COMMAND_LETTER = {**dict.fromkeys(_SHELLS, "c"), "su": "c", "runuser": "c", "flock": "c", "env": "S"}
_COMMAND_LONG = frozenset({"--command", "--session-command", "--split-string"})
_FIND_ACTIONS = frozenset({"-exec", "-execdir", "-ok", "-okdir"})

# One spelling for the flags of the usual destructive commands: letter synonyms and long options.
_RECURSIVE = {"R": "r"}
_SYNONYMS: dict[str, tuple[dict[str, str], dict[str, str]]] = {
    "rm": (_RECURSIVE, {"recursive": "r", "force": "f"}),
    "cp": (_RECURSIVE, {"recursive": "r", "force": "f"}),
    "mv": ({}, {"force": "f"}),
    **dict.fromkeys(("chmod", "chown", "chgrp"), (_RECURSIVE, {"recursive": "r", "silent": "f", "quiet": "f"})),
}


def denies(parsed: ParsedCommand, prefix: tuple[str, ...], depth: int = 0) -> bool:
    """True when any command the line may run starts with the rule's command and carries its flags."""
    values: dict[str, str] = {}
    for cmd in parsed.commands:
        argv = cmd.argv
        _remember(values, [w.text for w in cmd.assignments])
        if argv and argv[0] in _DECLARE:
            _remember(values, argv[1:])
        if _denied(argv, prefix, depth):
            return True
        expanded = _expanded(argv, values)
        if expanded != argv and _denied(expanded, prefix, depth):
            return True
    return False


def _remember(values: dict[str, str], words: list[str]) -> None:
    for word in words:
        if _ASSIGNMENT.match(word):
            name, _, value = word.partition("=")
            values[name] = value


def _expanded(argv: list[str], values: dict[str, str]) -> list[str]:
    """The words with the line's own variables put in (`a=rm; $a -rf x`) and split as an unquoted expansion
    is; variables the line does not set stay as they are."""
    if not values or not any("$" in word for word in argv):
        return argv
    words: list[str] = []
    for word in argv:
        if "$" not in word:
            words.append(word)
            continue
        filled = _VARIABLE.sub(lambda m: values.get(m.group(1) or m.group(2), m.group(0)), word)
        words.extend(filled.split() if filled != word else [word])
    return words


def _denied(argv: list[str], prefix: tuple[str, ...], depth: int) -> bool:
    readings = _readings(argv)
    if len(readings) > _MAX_READINGS:
        return True
    for words in readings:
        if _matches(words, prefix):
            return True
        lines = _lines_run(words)
        if lines and depth >= _MAX_DEPTH:  # command lines nested deeper than they are read: refused
            return True
        if any(denies(parse_command(line), prefix, depth + 1) for line in lines):
            return True
    return False


def _matches(words: list[str], prefix: tuple[str, ...]) -> bool:
    name = os.path.basename(words[0])
    if name != os.path.basename(prefix[0]):
        return False
    args = _one_spelling(name, words[1:])
    letters = {ch for a in args if _FLAGS.fullmatch(a) for ch in a[1:]}
    for token in _one_spelling(name, list(prefix[1:])):
        if token in args:
            continue
        if not (_FLAGS.fullmatch(token) and set(token[1:]) <= letters):
            return False
    return True


def _one_spelling(name: str, args: list[str]) -> list[str]:
    """Flags with their synonyms mapped: `-Rf` → `-rf`, `--recursive` (or a prefix such as `--rec`) → `-r`."""
    if name not in _SYNONYMS:
        return args
    letters, longs = _SYNONYMS[name]
    spelled = []
    for arg in args:
        if _FLAGS.fullmatch(arg):
            arg = "-" + "".join(letters.get(ch, ch) for ch in arg[1:])
        elif arg.startswith("--") and len(arg) > 2:
            # GNU tools accept any unambiguous prefix; an ambiguous one fails, so mapping it denies nothing real.
            arg = next((f"-{short}" for long, short in longs.items() if long.startswith(arg[2:])), arg)
        spelled.append(arg)
    return spelled


def _readings(argv: list[str]) -> list[list[str]]:
    """Every command these words may run: themselves, what their wrappers wrap and what `find -exec` runs."""
    found: list[list[str]] = []
    todo = [argv]
    while todo and len(found) <= _MAX_READINGS:
        words = todo.pop()
        while words and ((words[0] in KEYWORDS and words[0] not in _WRAPPER_OPTIONS) or _ASSIGNMENT.match(words[0])):
            words = words[1:]
        if not words:
            continue
        found.append(words)
        name = os.path.basename(words[0])
        if name in _WRAPPER_OPTIONS:
            todo.append(_wrapped(name, words[1:]))
        elif name == "find":
            todo.extend(_find_actions(words[1:]))
    return found


def _wrapped(name: str, args: list[str]) -> list[str]:
    """The words after a wrapper's options (with their arguments) and operands: the command it runs."""
    return _wrapped_by(args, _WRAPPER_OPTIONS[name], _WRAPPER_OPERANDS.get(name, 0))


def _wrapped_by(args: list[str], with_argument: frozenset[str], operands: int) -> list[str]:
    options, i = True, 0
    while i < len(args):
        arg = args[i]
        if options and arg == "--":
            options = False
            i += 1
        elif options and arg.startswith("-") and arg != "-":
            i += 2 if _takes_next_word(arg, with_argument) else 1
        elif operands:
            operands -= 1
            i += 1
        else:
            break
    return args[i:]


def _takes_next_word(arg: str, with_argument: frozenset[str]) -> bool:
    if arg.startswith("--"):
        return "=" not in arg and arg in with_argument
    for k, letter in enumerate(arg[1:], start=1):
        if f"-{letter}" in with_argument:
            return k == len(arg) - 1  # otherwise the rest of the word is its argument (`-ubob`)
    return False


def _find_actions(args: list[str]) -> list[list[str]]:
    """The commands of `find … -exec CMD … ;` (or `{} +`). An action's own words are not searched again: a
    `find` inside it is read as a command of its own, which keeps nested `-exec find -exec …` linear."""
    commands, i = [], 0
    while i < len(args):
        if args[i] in _FIND_ACTIONS:
            end = i + 1
            while end < len(args) and args[end] != ";" and not (args[end] == "+" and args[end - 1] == "{}"):
                end += 1
            commands.append(args[i + 1 : end])
            i = end
        i += 1
    return commands


def _strings_run(code: str) -> list[str]:
    """What a program's code may run: each string literal, and each list of them joined."""
    lines = [a or b for a, b in _STRING.findall(code)]
    for listed in _STRING_LIST.findall(code):
        lines.append(" ".join(a or b for a, b in _STRING.findall(listed)))
    return [line for line in lines if line.strip()]


def _lines_run(words: list[str]) -> list[str]:
    """The command lines a program runs from its arguments: `eval …`, `sh -c …`, `su -c …`, `env -S …`.
    Every word after the option is read as one, since a shell takes further options before its string."""
    name, args = os.path.basename(words[0]), words[1:]
    if name == "eval" or any(ch.isspace() for ch in words[0]):
        return [" ".join(words if name != "eval" else args)]  # a whole line as one word: `sudo -i 'rm -rf x'`
    if name == "ssh":
        remote = _wrapped_by(args, _SSH_OPTIONS, operands=1)
        return [" ".join(remote)] if remote else []
    if _INTERPRETER.fullmatch(name):
        code = next((args[i + 1] for i, a in enumerate(args[:-1]) if a in ("-c", "-e")), None)
        return _strings_run(code) if code else []
    letter = _COMMAND_LETTER.get(name)
    if letter is None:
        return []
    for i, arg in enumerate(args):
        option, equals, value = arg.partition("=")
        if option in _COMMAND_LONG:
            return ([value] if equals else []) + args[i + 1 :]
        short = re.match(rf"-[A-Za-z0-9]*?{letter}(.*)", arg, re.DOTALL)
        if short:
            return ([short.group(1)] if short.group(1) else []) + args[i + 1 :]
    return []
