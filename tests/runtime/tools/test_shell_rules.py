"""Permission rules match the parsed command line, not a string prefix (tools/shell/parse.py, tools/approvals.py)."""

from __future__ import annotations

import shlex
import subprocess

import pytest

from runtime.errors import ConfigError
from runtime.tools.approvals import Rule, command_words, decide, rule_verdict
from runtime.tools.base import Effect
from runtime.tools.shell.parse import parse_command, suggest_rule

ALLOW_GIT_STATUS = [Rule("run_shell", "allow", ("git", "status"))]


def _commands(text: str) -> list[list[str]]:
    return [c.argv for c in parse_command(text).commands]


@pytest.mark.parametrize(("text", "commands", "problems"), [
    ("git status", [["git", "status"]], False),
    ("git status; rm x", [["git", "status"], ["rm", "x"]], False),
    ("git status && rm -rf /", [["git", "status"], ["rm", "-rf", "/"]], False),
    ("git status || rm x", [["git", "status"], ["rm", "x"]], False),
    ("git status | sh", [["git", "status"], ["sh"]], False),
    ("git status |& tee x", [["git", "status"], ["tee", "x"]], False),
    ("git status & rm x", [["git", "status"], ["rm", "x"]], False),
    ("git status\nrm x", [["git", "status"], ["rm", "x"]], False),
    ("git status\r\nrm x", [["git", "status\r"], ["rm", "x"]], False),
    ("git sta\\\ntus", [["git", "status"]], False),
    ("git 'status;' \"rm x\"", [["git", "status;", "rm x"]], False),
    ("git status # ; rm x", [["git", "status"]], False),
    ("git status#x", [["git", "status#x"]], False),
    ("(cd sub && git status)", [["cd", "sub"], ["git", "status"]], False),
    ("git status $(rm x)", [["rm", "x"], ["git", "status", ""]], True),
    ("git status `rm x`", [["rm", "x"], ["git", "status", ""]], True),
    ('git status "$(rm x)"', [["rm", "x"], ["git", "status", ""]], True),
    ("git status ${X:-$(rm x)}", None, True),
    ("cat <<EOF\nrm x\nEOF", [["cat"], ["rm", "x"], ["EOF"]], True),
    ("diff <(rm x) y", None, True),
    ("git status 'unclosed", [["git", "status", "unclosed"]], True),
    ("f() { rm x; }; f", None, True),
    ("case x in x) rm y;; esac", None, True),
    # `$((` is arithmetic only when its parentheses close with `))`; otherwise bash runs a command substitution.
    ("echo $((echo INJECTED >&2) )", [["echo", "INJECTED"], ["echo", ""]], True),
    ('echo "$((rm x) )"', [["rm", "x"], ["echo", ""]], True),
    ("echo $((rm x) ; (ls) )", [["rm", "x"], ["ls"], ["echo", ""]], True),
    ("echo $((1 + 2", None, True),
    # bash decodes $'…' (ANSI-C quoting): a deny rule must see the command it spells.
    ("$'\\x72m' -rf x; echo $'a\\'b'", [["rm", "-rf", "x"], ["echo", "a'b"]], True),
])
def test_the_lexer_finds_every_simple_command(text, commands, problems):
    parsed = parse_command(text)
    if commands is not None:
        assert [c.argv for c in parsed.commands] == commands
    assert bool(parsed.problems) == problems, parsed.problems


@pytest.mark.parametrize("text", [
    "echo $((echo RAN >&2) )",
    "echo $((echo RAN >&2) ; (true) )",
    "echo $(( (echo RAN >&2) ) )",
])
def test_a_double_parenthesis_that_bash_runs_as_a_command_is_read_as_one(text):
    ran = subprocess.run(["bash", "-c", text], capture_output=True, text=True, timeout=10)
    assert "RAN" in ran.stderr  # bash ran it as a command substitution, not arithmetic
    parsed = parse_command(text)
    assert ["echo", "RAN"] in [c.argv for c in parsed.commands]
    assert parsed.problems  # so no allow rule covers the line


def test_redirections_assignments_and_expansions_are_recorded():
    cmd = parse_command("GIT_DIR=/x LANG=C git status >out.txt 2>&1 <in $HOME *.py ~/y").commands[0]
    assert [a.text for a in cmd.assignments] == ["GIT_DIR=/x", "LANG=C"]
    assert cmd.argv == ["git", "status", "$HOME", "*.py", "~/y"]
    assert [w.literal for w in cmd.words] == [True, True, False, False, False]
    assert [(op, w.text) for op, w in cmd.redirects] == [(">", "out.txt"), ("2>&", "1"), ("<", "in")]


@pytest.mark.parametrize(("command", "verdict"), [
    ("git status", "allow"),
    ("git status --short", "allow"),
    ("git  status\t-s", "allow"),
    ("'git' \"status\"", "allow"),
    ("git status 2>/dev/null", "allow"),
    ("git status 2>&1 </dev/null", "allow"),
    ("git status && git status -s", "allow"),
    ("git status | git status", "allow"),
    ("(git status)", "allow"),
    ("git status; rm x", None),
    ("git status && rm -rf x", None),
    ("git status || rm x", None),
    ("git status | sh", None),
    ("git status & rm x", None),
    ("git status\nrm x", None),
    ("git status $(rm x)", None),
    ("git status `rm x`", None),
    ('git status "$(rm x)"', None),
    ("git status > ~/.bashrc", None),
    ("git status >> log.txt", None),
    ("git status &> out", None),
    ("GIT_DIR=/elsewhere git status", None),
    ("git statusx", None),
    ("git stat", None),
    ("git", None),
    ("$GIT status", None),
    ("g* status", None),
    ("git $SUB", None),
    ("/usr/bin/git status", None),
    ("cat <<EOF\ngit status\nEOF", None),
    ("git status 'unclosed", None),
    ("", None),
])
def test_an_allow_rule_covers_only_lines_made_of_allowed_commands(command, verdict):
    assert rule_verdict("run_shell", command, ALLOW_GIT_STATUS) == verdict


DENY_RM_RF = [Rule("run_shell", "allow", ()), Rule("run_shell", "deny", ("rm", "-rf"))]


@pytest.mark.parametrize(("command", "verdict"), [
    ("rm -rf build", "deny"),
    ("rm -fr build", "deny"),
    ("rm -r -f build", "deny"),
    ("rm -v -rf build", "deny"),
    ("/bin/rm -rf build", "deny"),
    ("ls; rm -rf build", "deny"),
    ("echo $(rm -rf build)", "deny"),
    ("echo `rm -rf build`", "deny"),
    ("echo ${X:-$(rm -rf build)}", "deny"),
    ("sudo rm -rf /", "deny"),
    ("env FOO=1 nice -n 5 timeout 10 rm -rf x", "deny"),
    ("X=1 rm -rf x", "deny"),
    ("if true; then rm -rf x; fi", "deny"),
    ("sh -c 'rm -rf x'", "deny"),
    ("bash -lc \"cd / && rm -rf x\"", "deny"),
    ("eval 'rm -rf x'", "deny"),
    ("find . | xargs rm -rf", "deny"),
    ("rm -r build", "allow"),
    ("rm build", "allow"),
    ("echo rm -rf", "allow"),
    ("ls", "allow"),
    ("a=ls; $a -rf", "allow"),  # a variable the line sets is read as its value, and only then
    ("echo $HOME -rf", "allow"),
    ("ssh host ls -rf", "allow"),
    ("ssh -p 22 host 'echo rm -rf'", "allow"),
    ("python3 -c 'print(1 + 1)'", "allow"),
])
def test_a_deny_rule_catches_the_usual_spellings_and_wins_over_allow(command, verdict):
    assert rule_verdict("run_shell", command, DENY_RM_RF) == verdict


def _nested(line: str, levels: int) -> str:
    for _ in range(levels):
        line = f"sh -c {shlex.quote(line)}"
    return line


@pytest.mark.parametrize("command", [
    "rm -Rf x", "rm -fR x", "rm -R -f x", "rm --recursive --force x", "rm -r --force x", "rm --force -R x",
    "rm --rec --force x", "rm --recursive -f x",
    "sudo -u bob rm -rf x", "sudo --user bob rm -rf x", "sudo -g wheel -u bob -- rm -rf x", "doas -u bob rm -rf x",
    "xargs -I {} rm -rf {}", "xargs -d '\\n' rm -rf", "env -u HOME rm -rf x", "env -C /tmp rm -rf x",
    "timeout -s KILL 10 rm -rf x", "stdbuf -o L rm -rf x", "taskset 0x3 rm -rf x", "flock /tmp/lock rm -rf x",
    "nohup sudo -u bob rm -rf x",
    "bash -c -- 'rm -rf x'", "bash -c -e 'rm -rf x'", "su -c 'rm -rf x'", "su - root -c 'rm -rf x'",
    "su --command='rm -rf x'", "su root --command 'rm -rf x'", "runuser -u bob -- rm -rf x",
    "flock /tmp/lock -c 'rm -rf x'", "env -S 'rm -rf x'", "eval 'sudo -u bob rm -Rf x'",
    "find . -exec rm -rf {} +", "find . -execdir rm -rf {} \\;", "find . -ok rm -rf {} ';'",
    "find . -name '*.o' -okdir sudo -u bob rm --recursive --force {} +",
    "find . -exec echo {} ';' -exec rm -rf {} +",
    "echo $((rm -rf x) )",
    "$'\\x72m' -rf x", "$'\\162m' -Rf x", "sudo $'r\\u006d' -r --force x",
    "a=rm; $a -rf x", "c='rm -rf'; $c x", "export A=rm && ${A} -Rf x", "r=r; ${r}m -rf x",
    "declare -x B=rm; sudo $B -rf x",
    "sudo -i 'rm -rf x'", "sudo -s \"rm -rf x\"", "ssh host rm -rf x", "ssh -p 22 -i key host 'rm -rf x'",
    "ssh -o StrictHostKeyChecking=no user@host sudo rm --recursive --force x",
    "python3 -c 'import os; os.system(\"rm -rf x\")'",
    "python -c \"import subprocess; subprocess.run(['rm', '-rf', 'x'])\"",
    "perl -e 'system(\"rm -Rf x\")'", "node -e \"require('child_process').execSync('rm -rf x')\"",
    "nice " * 100 + "ls",  # nested beyond any real use: refused rather than read to the end
    *(_nested("rm -rf x", levels) for levels in (3, 4, 6)),  # sh -c 'sh -c …': read 3 deep, refused deeper
    _nested("ls", 4),
])
def test_a_deny_rule_catches_option_synonyms_wrapper_arguments_and_nested_commands(command):
    assert rule_verdict("run_shell", command, DENY_RM_RF) == "deny"


@pytest.mark.parametrize("command", [
    "rm -Rf DIR", "rm -fR DIR", "rm --recursive --force DIR", "rm -r --force DIR", "rm --rec --force DIR",
    "bash -c -- 'rm -rf DIR'", "env -C / rm -rf DIR", "env -S 'rm -rf DIR'", "timeout -s KILL 10 rm -rf DIR",
    "stdbuf -o L rm -rf DIR", "taskset 0x1 rm -rf DIR", "flock DIR.lock rm -rf DIR", "flock DIR.lock -c 'rm -rf DIR'",
    "echo DIR | xargs -I {} rm -rf {}", "echo DIR | xargs -d '\\n' rm -rf", "find DIR -maxdepth 0 -exec rm -rf {} +",
    "$'\\x72m' -rf DIR", "$'\\162m' -Rf DIR",
    "a=rm; $a -rf DIR", "c='rm -rf'; $c DIR", "export A=rm && ${A} -Rf DIR", "r=r; ${r}m -rf DIR",
    "python3 -c 'import os; os.system(\"rm -rf DIR\")'",
    "python3 -c \"import subprocess; subprocess.run(['rm', '-rf', 'DIR'], check=True)\"",
])
def test_spellings_that_really_delete_a_tree_are_denied(command, tmp_path):
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "file").write_text("x")
    line = command.replace("DIR", str(tree))
    assert rule_verdict("run_shell", line, DENY_RM_RF) == "deny"
    subprocess.run(["bash", "-c", line], check=True, timeout=10)  # bash: /bin/sh on Fedora, Arch and macOS
    assert not tree.exists()


@pytest.mark.parametrize(("rule", "command"), [
    (("rm", "-r"), "rm -R x"),
    (("rm", "-r"), "rm --recursive x"),
    (("rm", "--recursive"), "rm -rf x"),
    (("chmod", "-R"), "chmod --recursive 777 /"),
    (("sudo",), "sudo ls"),
    (("sudo",), "nice sudo ls"),
    (("xargs",), "find . | xargs rm"),
    (("find", "-delete"), "sudo -u bob find . -delete"),
])
def test_a_deny_rule_reads_its_own_words_the_same_way(rule, command):
    assert rule_verdict("run_shell", command, [Rule("run_shell", "deny", rule)]) == "deny"


@pytest.mark.parametrize(("command", "allowed_alone"), [
    ("rm -r --force x", "allow"),  # an allow rule is a literal prefix: it covers what starts with `rm -r` ...
    ("rm -Rf x", None),  # ... and nothing that only means the same
    ("rm -R -f x", None),
    ("rm --recursive --force x", None),
    ("sudo -u bob rm -rf x", None),
    ("find . -exec rm -rf {} +", None),
])
def test_allow_rules_stay_literal_and_a_deny_rule_wins_over_them(command, allowed_alone):
    allow_rm_r = Rule("run_shell", "allow", ("rm", "-r"))
    assert rule_verdict("run_shell", command, [allow_rm_r]) == allowed_alone
    assert rule_verdict("run_shell", command, [allow_rm_r, Rule("run_shell", "deny", ("rm", "-rf"))]) == "deny"


@pytest.mark.parametrize(("command", "verdict"), [
    ("echo $((echo INJECTED >&2) )", None),
    ("echo $((1 + 2", None),
    ("echo $((1 + 2)) $(( (1 + 2) * 3 )) $((a[1] + (2)))", "allow"),
])
def test_an_allow_rule_does_not_cover_a_command_substitution_that_looks_like_arithmetic(command, verdict):
    assert rule_verdict("run_shell", command, [Rule("run_shell", "allow", ("echo",))]) == verdict


def test_rule_scopes_and_modes():
    # A whole-tool rule applies to any call; rules of another tool say nothing.
    assert rule_verdict("write_file", None, [Rule("write_file", "deny")]) == "deny"
    assert rule_verdict("write_file", None, [Rule("run_shell", "deny")]) is None
    # Without a rule the mode decides; full_auto asks for a command that cannot run sandboxed ...
    shell = {"command": "make", "sandboxed": False}
    assert decide("run_shell", Effect.external, "full_auto", **shell) == "ask"
    assert decide("run_shell", Effect.external, "full_auto", **shell, unsandboxed_ok=True) == "allow"
    assert decide("run_shell", Effect.external, "full_auto", command="make", sandboxed=True) == "allow"
    # ... unless the person allowed that command.
    assert decide("run_shell", Effect.external, "full_auto", [Rule("run_shell", "allow", ("make",))], **shell) == \
        "allow"
    assert decide("run_shell", Effect.external, "ask", ALLOW_GIT_STATUS, command="git status") == "allow"
    assert decide("run_shell", Effect.external, "ask", ALLOW_GIT_STATUS, command="git status; rm x") == "ask"
    assert decide("mcp__x", Effect.external, "full_auto") == "allow"  # nothing to sandbox: as before


@pytest.mark.parametrize("text", ["git status; rm x", "git $X", "A=1 git", "git > f", "if true", "", "  ",
                                  "git $(x)", "ls *"])
def test_a_rule_command_must_be_one_plain_command(text):
    with pytest.raises(ConfigError) as err:
        command_words(text)
    assert "\n" not in str(err.value) and len(str(err.value)) < 200


def test_rule_commands_and_suggestions():
    assert command_words("  git   'status' ") == ("git", "status")
    assert suggest_rule("git status --short") == "git status"
    assert suggest_rule("ls -la") == "ls"
    assert suggest_rule("python3 build.py") == "python3"
    assert suggest_rule("echo hi") == "echo"
    assert suggest_rule("/usr/bin/git log -3") == "/usr/bin/git log"
    assert suggest_rule("git status; rm x") is None
    assert suggest_rule("FOO=1 make") is None
    assert suggest_rule("$(x) y") is None
