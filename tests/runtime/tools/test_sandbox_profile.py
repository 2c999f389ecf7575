"""The macOS sandbox-exec profile (it cannot run here): what it allows, checked as text against the policy."""

from __future__ import annotations

from pathlib import Path

from runtime.tools.shell.sandbox_macos import SANDBOX_EXEC, argv, profile


def test_the_profile_denies_by_default_and_allows_only_the_policy(tmp_path):
    ws, tmp = tmp_path / "data" / "workspaces" / "t1", tmp_path / "cmd-tmp"
    ws.mkdir(parents=True)
    ssh_key = tmp_path / "home" / ".netrc"
    ssh_key.parent.mkdir()
    ssh_key.write_text("x")
    text = profile(ws, tmp, (tmp_path / "data", ssh_key), network=False)
    lines = text.splitlines()
    assert lines[:2] == ["(version 1)", "(deny default)"]
    assert not any(line.startswith("(deny") for line in lines[2:])  # only allows: no rule order to get wrong
    reads = next(line for line in lines if line.startswith("(allow file-read* (require-all"))
    assert f'(require-not (subpath "{tmp_path / "data"}"))' in reads
    assert f'(require-not (literal "{ssh_key}"))' in reads  # a file is hidden exactly, a folder with what is in it
    writes = [line for line in lines if "file-write*" in line]
    assert writes == [f'(allow file-read* file-write* (subpath "{ws}") (subpath "{tmp}"))']
    assert "network" not in text
    assert "(allow network* system-socket)" in profile(ws, tmp, (), network=True)
    assert "(allow file-read*)" in profile(ws, tmp, (), network=False)


def test_quotes_in_paths_cannot_end_a_rule_early(tmp_path):
    odd = tmp_path / 'a") (allow file-write* (subpath "/'
    text = profile(odd, tmp_path, (), network=False)
    assert '(subpath "/")' not in text and '\\"' in text
    command = argv(Path("/w"), Path("/t"), (), False, ["/bin/sh", "-c", "true"])
    assert command[:2] == [SANDBOX_EXEC, "-p"] and command[-3:] == ["/bin/sh", "-c", "true"]


def test_paths_are_matched_as_their_real_paths(tmp_path):
    """macOS's temporary folders are symlinks (/var → /private/var) and Seatbelt matches the real path."""
    real = tmp_path / "private" / "var"
    (real / "folders" / "cmd").mkdir(parents=True)
    (real / "data" / "ws").mkdir(parents=True)
    (tmp_path / "var").symlink_to(real)
    via_link = tmp_path / "var"
    text = profile(via_link / "data" / "ws", via_link / "folders" / "cmd", (via_link / "data",), network=False)
    assert f'(subpath "{real / "folders" / "cmd"}")' in text and f'(subpath "{real / "data" / "ws"}")' in text
    assert f'(require-not (subpath "{real / "data"}"))' in text
    assert str(via_link) + "/" not in text
