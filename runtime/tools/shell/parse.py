"""A POSIX shell command line split into its simple commands, for permission rules (tools/approvals.py).

A rule such as "always allow `git status`" must match what the shell will run, not a string prefix: `git status;
rm x` is two commands, and only the first one is `git status`. This lexer follows the POSIX shell's quoting and
operators closely enough to find every simple command, and reports what it cannot vouch for instead of guessing:

- Separators `;` `&` `&&` `|` `||` `|&` and newlines end a simple command; `(` `)` open and close subshells.
- Quotes ('…', "…", backslash) are removed from words; a word with an unquoted or double-quoted expansion
  (`$NAME`, `${…}`, `$((…))`: arithmetic only when its parentheses balance up to `))`, else bash reads a command
  substitution `$( (…) )`), an unquoted glob (`* ? [`) or a leading `~` is not *literal*: its value is only known
  when the shell runs, so it never matches a rule's word.
- `problems` lists the constructs that make the line impossible to judge: command substitution (`$(…)`, backquotes),
  process substitution, here-documents, `case` terminators, unclosed quotes, a misplaced parenthesis, bash's `$'…'`
  strings. The text inside a substitution is still lexed as commands of its own and a `$'…'` string is decoded as
  bash would, so a deny rule sees them.
- Redirections are kept per command (operator and target) so that a rule can refuse output written to files.
- `VAR=value` words before the command name are assignments (they can change what a program does).
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field

KEYWORDS = frozenset({"if", "then", "else", "elif", "fi", "do", "done", "while", "until", "for", "case", "esac",
                      "in", "!", "{", "}", "function", "select", "time", "[[", "]]", "coproc"})
_NAME_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_SEPARATORS = ("&&", "||", "|&", ";;", ";&", ";", "&", "|")
_ANSI_C_STRING = re.compile(r"\$'((?:[^'\\]|\\.)*)'", re.DOTALL)
_ANSI_C_ESCAPE = re.compile(r"\\(x[0-9A-Fa-f]{1,2}|u[0-9A-Fa-f]{1,4}|U[0-9A-Fa-f]{1,8}|[0-7]{1,3}|c.|.)", re.DOTALL)
_ANSI_C_LETTERS = {"a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n", "r": "\r", "t": "\t",
                   "v": "\v"}
_REDIRECTS = ("<<<", "<<-", "&>>", "<<", ">>", "<&", ">&", "<>", ">|", "&>", "<", ">")


@dataclass
class Word:
    text: str = ""
    literal: bool = True  # no expansion, glob or tilde: its value is exactly `text`


@dataclass
class SimpleCommand:
    assignments: list[Word] = field(default_factory=list)
    words: list[Word] = field(default_factory=list)
    redirects: list[tuple[str, Word]] = field(default_factory=list)  # operator (with its fd, e.g. "2>"), target

    @property
    def argv(self) -> list[str]:
        return [w.text for w in self.words]

    def empty(self) -> bool:
        return not (self.assignments or self.words or self.redirects)


@dataclass
class ParsedCommand:
    commands: list[SimpleCommand]
    problems: list[str]


class _Lexer:
    def __init__(self, text: str):
        self.s = text
        self.i = 0
        self.commands: list[SimpleCommand] = []
        self.problems: list[str] = []
        self.cmd = SimpleCommand()
        self.word: Word | None = None
        self.redirect: str | None = None  # an operator waiting for its target word
        self.depth = 0  # open `(` and `$(`

    def problem(self, what: str) -> None:
        if what not in self.problems:
            self.problems.append(what)

    # -- building words and commands --

    def add(self, text: str, literal: bool = True) -> None:
        if self.word is None:
            self.word = Word()
        self.word.text += text
        self.word.literal = self.word.literal and literal

    def end_word(self) -> None:
        word, self.word = self.word, None
        if word is None:
            return
        if self.redirect is not None:
            self.cmd.redirects.append((self.redirect, word))
            self.redirect = None
        elif not self.cmd.words and _NAME_ASSIGNMENT.match(word.text):
            self.cmd.assignments.append(word)
        else:
            self.cmd.words.append(word)

    def end_command(self) -> None:
        self.end_word()
        if self.redirect is not None:
            self.problem(f"a redirection '{self.redirect}' without a target")
            self.redirect = None
        if not self.cmd.empty():
            self.commands.append(self.cmd)
        self.cmd = SimpleCommand()

    # -- the scan --

    def run(self) -> ParsedCommand:
        while self.i < len(self.s):
            self.step()
        self.end_command()
        if self.depth > 0:
            self.problem("an unclosed parenthesis")
        return ParsedCommand(self.commands, self.problems)

    def step(self) -> None:
        """One character or token."""
        s, c = self.s, self.s[self.i]
        if c in " \t":
            self.end_word()
            self.i += 1
        elif c == "\n":
            self.end_command()
            self.i += 1
        elif c == "#" and self.word is None:
            end = s.find("\n", self.i)
            self.i = len(s) if end < 0 else end
        elif c == "\\":
            self.backslash()
        elif c == "'":
            self.single_quoted()
        elif c == '"':
            self.double_quoted()
        elif c == "$":
            self.dollar(quoted=False)
        elif c == "`":
            self.backquote()
        elif c in "()":
            self.paren(c)
        elif not self.operator():
            self.add(c, literal=c not in "*?[" and not (c == "~" and self.word is None))
            self.i += 1

    def backslash(self) -> None:
        nxt = self.s[self.i + 1 : self.i + 2]
        if nxt == "\n":  # a line continuation
            self.i += 2
            return
        self.add(nxt or "\\")
        self.i += 2

    def single_quoted(self) -> None:
        end = self.s.find("'", self.i + 1)
        if end < 0:
            self.problem("an unclosed quote")
            self.add(self.s[self.i + 1 :])
            self.i = len(self.s)
            return
        self.add(self.s[self.i + 1 : end])
        self.i = end + 1

    def double_quoted(self) -> None:
        s = self.s
        self.add("")  # "" is an (empty) word
        self.i += 1
        while self.i < len(s):
            c = s[self.i]
            if c == '"':
                self.i += 1
                return
            if c == "\\" and s[self.i + 1 : self.i + 2] in ("$", "`", '"', "\\", "\n"):
                if s[self.i + 1] != "\n":
                    self.add(s[self.i + 1])
                self.i += 2
            elif c == "$":
                self.dollar(quoted=True)
            elif c == "`":
                self.backquote()
            else:
                self.add(c)
                self.i += 1
        self.problem("an unclosed quote")

    def dollar(self, quoted: bool) -> None:
        s = self.s
        nxt = s[self.i + 1 : self.i + 2]
        end = self.arithmetic_end() if s.startswith("$((", self.i) else -1
        if end >= 0:
            inner = s[self.i + 3 : end - 2]
            if "$(" in inner or "`" in inner:
                self.problem("a command substitution inside arithmetic")
            self.add(s[self.i : end], literal=False)
            self.i = end
        elif nxt == "(":  # also `$((cmd) )`: a subshell inside a command substitution, as bash reads it
            self.problem("a command substitution $(...)")
            self.substitution(self.i + 2)
        elif nxt == "{":
            end = s.find("}", self.i)
            inner = s[self.i + 2 : end if end >= 0 else len(s)]
            if "$(" in inner or "`" in inner:
                self.problem("a command substitution inside ${...}")
                self.commands.extend(parse_command(inner).commands)
            self.add(s[self.i : end + 1 if end >= 0 else len(s)], literal=False)
            self.i = end + 1 if end >= 0 else len(s)
        elif nxt == "'" and not quoted:
            self.problem("a $'...' string")  # bash's ANSI-C quoting; another shell reads it differently
            quoted_text = _ANSI_C_STRING.match(s, self.i)
            if quoted_text is None:
                self.problem("an unclosed quote")
                self.add(s[self.i :], literal=False)
                self.i = len(s)
            else:  # decoded as bash would, so a deny rule sees `$'\x72m' -rf` as `rm -rf`
                self.add(_ANSI_C_ESCAPE.sub(_ansi_c_char, quoted_text.group(1)), literal=False)
                self.i = quoted_text.end()
        elif nxt and (nxt.isalnum() or nxt in "_@*#?$!-"):
            m = re.match(r"[A-Za-z_][A-Za-z0-9_]*|[0-9@*#?$!-]", s[self.i + 1 :])
            assert m is not None
            self.add("$" + m.group(), literal=False)
            self.i += 1 + m.end()
        else:
            self.add("$")
            self.i += 1

    def arithmetic_end(self) -> int:
        """Where `$((…))` ends when its parentheses balance up to a closing `))`, else -1: bash then reads
        `$((echo x) )` as a command substitution."""
        depth = 0
        for j in range(self.i + 3, len(self.s)):
            c = self.s[j]
            if c == "(":
                depth += 1
            elif c == ")" and depth:
                depth -= 1
            elif c == ")":
                return j + 2 if self.s.startswith("))", j) else -1
        return -1

    def substitution(self, start: int) -> None:
        """`$(`: the word it sits in has an unknown value; its inside is lexed as commands of their own."""
        self.add("", literal=False)
        outer_cmd, outer_word, outer_redirect = self.cmd, self.word, self.redirect
        self.cmd, self.word, self.redirect = SimpleCommand(), None, None
        self.depth += 1
        self.i = start
        self.inner_until(")")
        self.cmd, self.word, self.redirect = outer_cmd, outer_word, outer_redirect

    def backquote(self) -> None:
        self.problem("a command substitution `...`")
        end = self.s.find("`", self.i + 1)
        inner = self.s[self.i + 1 : end if end >= 0 else len(self.s)]
        self.commands.extend(parse_command(inner).commands)
        self.add("", literal=False)
        self.i = end + 1 if end >= 0 else len(self.s)

    def inner_until(self, closer: str) -> None:
        """Lex a substitution's inside into separate commands, up to its closing parenthesis."""
        depth = self.depth
        while self.i < len(self.s) and self.depth >= depth:
            c = self.s[self.i]
            if c == closer and self.depth == depth:
                self.end_command()
                self.depth -= 1
                self.i += 1
                return
            self.step()
        self.end_command()

    def paren(self, c: str) -> None:
        if c == "(":
            if self.word is not None or self.cmd.words or self.cmd.assignments or self.redirect:
                self.problem("a parenthesis inside a command (a function definition or a syntax error)")
            self.end_command()
            self.depth += 1
        else:
            self.end_command()
            if self.depth == 0:
                self.problem("a closing parenthesis without an opening one")
            self.depth = max(0, self.depth - 1)
        self.i += 1

    def operator(self) -> bool:
        s, i = self.s, self.i
        for op in _REDIRECTS:
            if s.startswith(op, i):
                if op in ("<", ">") and s.startswith("(", i + 1):
                    self.problem("a process substitution")
                if op in ("<<", "<<-"):
                    self.problem("a here-document")
                fd = ""
                if self.word is not None and self.word.literal and self.word.text.isdigit():
                    fd, self.word = self.word.text, None  # `2>`: the digits are the descriptor, not a word
                self.end_word()
                if self.redirect is not None:
                    self.problem(f"a redirection '{self.redirect}' without a target")
                self.redirect = fd + op
                self.i += len(op)
                return True
        for op in _SEPARATORS:
            if s.startswith(op, i):
                if op in (";;", ";&"):
                    self.problem("a case statement")
                self.end_command()
                self.i += len(op)
                return True
        return False


def _ansi_c_char(escape: re.Match[str]) -> str:
    """One backslash escape of a `$'…'` string: `\\x72`, `\\162`, `\\u0072`, `\\cA`, `\\n`, `\\'`, …"""
    e = escape.group(1)
    if e[0] in "xuU" and len(e) > 1:
        return chr(min(int(e[1:], 16), 0x10FFFF))
    if e[0] in "01234567":
        return chr(int(e, 8) & 0xFF)
    if e[0] == "c" and len(e) == 2:
        return chr(ord(e[1]) & 0x1F)
    return _ANSI_C_LETTERS.get(e, e)


def parse_command(text: str) -> ParsedCommand:
    """The simple commands of a shell command line and what could not be judged (see the module notes)."""
    return _Lexer(text).run()


# Programs whose second word says what they do: a suggested rule keeps it ("git status", not "git").
SUBCOMMANDS = frozenset({"git", "hg", "svn", "npm", "pnpm", "yarn", "npx", "cargo", "go", "uv", "pip", "pip3",
                         "poetry", "docker", "podman", "kubectl", "make", "gh", "dotnet", "mvn", "gradle", "apt",
                         "brew", "systemctl", "conda", "rustup", "deno", "bun"})


def suggest_rule(command: str) -> str | None:
    """A command rule an approval card can offer for this line, when it is one plain command: its command word
    ("ls" for `ls -la`), with the subcommand for programs that have them ("git status" for `git status -s`)."""
    parsed = parse_command(command)
    if parsed.problems or len(parsed.commands) != 1:
        return None
    cmd = parsed.commands[0]
    if cmd.assignments or not cmd.words or not cmd.words[0].literal or cmd.words[0].text in KEYWORDS:
        return None
    words = [cmd.words[0].text]
    if (os.path.basename(words[0]) in SUBCOMMANDS and len(cmd.words) > 1 and cmd.words[1].literal
            and re.fullmatch(r"[A-Za-z][\w.:-]*", cmd.words[1].text)):
        words.append(cmd.words[1].text)
    return shlex.join(words)
