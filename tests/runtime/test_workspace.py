"""The workspace gate: a corpus of path-escape attempts, all refused, nothing outside touched; attachments."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from runtime.errors import ToolError
from runtime.tools.base import ToolContext
from runtime.tools.files import EditFile, ReadFile, WriteFile
from runtime.workspace import copy_attachments, resolve_in_workspace, workspace_for


@pytest.fixture
def tree(tmp_path: Path) -> dict[str, Path]:
    """tmp/ws (the workspace), tmp/ws-evil (sibling prefix), tmp/outside (sentinel), with traps inside ws."""
    ws = tmp_path / "ws"
    evil = tmp_path / "ws-evil"
    outside = tmp_path / "outside"
    for d in (ws, evil, outside, ws / "sub"):
        d.mkdir()
    (outside / "secret.txt").write_text("outside secret\n")
    (evil / "secret.txt").write_text("evil secret\n")
    (ws / "notes.txt").write_text("hello\n")
    (ws / "link_out_file").symlink_to(outside / "secret.txt")
    (ws / "link_out_dir").symlink_to(outside)
    (ws / "dangling_out").symlink_to(outside / "not-yet.txt")
    (ws / "dangling_rel").symlink_to("../outside/also-not-yet.txt")
    (ws / "link_evil").symlink_to("../ws-evil")
    (ws / "sub" / "up").symlink_to("../..")
    (ws / "loop").symlink_to("loop")
    (ws / "loop_a").symlink_to("loop_b")
    (ws / "loop_b").symlink_to("loop_a")
    return {"tmp": tmp_path, "ws": ws, "evil": evil, "outside": outside}


def corpus(t: dict[str, Path]) -> list[str]:
    """Escape attempts that are safe to try for writing too (every target is under tmp_path)."""
    ws, out, evil = t["ws"], t["outside"], t["evil"]
    return [
        # plain traversal
        "..",
        "../",
        "../outside/secret.txt",
        "../outside/new.txt",
        "./../outside/secret.txt",
        "../../../../../../../../hearth-escape-test.txt",
        "../ws-evil/secret.txt",
        "../ws-evil/new.txt",
        # `..` in the middle
        "sub/../../outside/secret.txt",
        "sub/./../../outside/new.txt",
        "sub/../sub/../../outside/secret.txt",
        "a/b/c/../../../../outside/new.txt",
        "notes.txt/../../outside/secret.txt",
        # absolute paths
        str(out / "secret.txt"),
        str(out / "new.txt"),
        str(t["tmp"] / "created.txt"),
        str(ws / ".." / "outside" / "secret.txt"),
        str(ws) + "/../outside/new.txt",
        # sibling prefix: /ws-evil is not inside /ws
        str(evil / "secret.txt"),
        str(ws) + "-evil/new.txt",
        str(ws) + "-evil",
        # home directory
        "~",
        "~/",
        "~/.bashrc",
        "~root/.ssh/authorized_keys",
        # symlinks to outside, for reading and for a new file
        "link_out_file",
        "link_out_file/",
        "link_out_dir/secret.txt",
        "link_out_dir/new.txt",
        "link_out_dir/newdir/new.txt",
        "link_out_dir/../outside/secret.txt",
        "dangling_out",
        "dangling_rel",
        "link_evil/secret.txt",
        "link_evil/new.txt",
        "sub/up/outside/secret.txt",
        "sub/up/outside/new.txt",
        # symlink loops
        "loop",
        "loop/x",
        "loop_a",
        # NUL bytes and control characters
        "notes.txt\x00.png",
        "\x00",
        "../outside/secret.txt\x00",
        "line\nbreak/../../outside/new.txt",
        "tab\there.txt",
        # empty
        "",
        "   ",
        # too long
        "a" * 256,
        "sub/" + "b" * 300 + "/x.txt",
        "d/" * 2100 + "x.txt",
        # backslashes
        "..\\outside\\secret.txt",
        "sub\\..\\..\\outside\\new.txt",
        "C:\\Windows\\win.ini",
        # unicode look-alikes and invisible characters
        "\uff0e\uff0e/outside/secret.txt",
        "\u2025/outside/new.txt",
        "..\uff0foutside\uff0fsecret.txt",
        "\u200b../outside/secret.txt",
        "notes\u202etxt.exe",
        "\ufeff../outside/new.txt",
        "\ud800.txt",
    ]


READ_ONLY_EXTRA = ["/etc/passwd", "/", "//etc/passwd", "/proc/self/root/etc/passwd", "../../etc/shadow"]


def snapshot(root: Path) -> dict[str, tuple]:
    snap: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            if p.is_symlink():
                snap[str(p)] = ("link", os.readlink(p))
            elif p.is_dir():
                snap[str(p)] = ("dir", st.st_mode)
            else:
                snap[str(p)] = ("file", st.st_size, st.st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
    return snap


def test_corpus_is_big_enough(tree):
    assert len(corpus(tree)) + len(READ_ONLY_EXTRA) >= 40
    assert len(set(corpus(tree))) == len(corpus(tree))


def test_every_escape_refused_for_read_and_write(tree):
    before = snapshot(tree["tmp"])
    for path in corpus(tree) + READ_ONLY_EXTRA:
        with pytest.raises(ToolError) as e:
            resolve_in_workspace(tree["ws"], path)
        assert str(e.value), path
        if path not in READ_ONLY_EXTRA:
            with pytest.raises(ToolError):
                resolve_in_workspace(tree["ws"], path, for_write=True)
    assert snapshot(tree["tmp"]) == before


async def test_every_escape_refused_by_the_file_tools(tree):
    ctx = ToolContext(task_id="t", turn_id="u", workspace=tree["ws"], call_id="c")
    before = snapshot(tree["tmp"])
    for path in corpus(tree):
        with pytest.raises(ToolError):
            await ReadFile().run({"path": path}, ctx)
        with pytest.raises(ToolError):
            await WriteFile().run({"path": path, "content": "pwned"}, ctx)
        with pytest.raises(ToolError):
            await EditFile().run({"path": path, "old_string": "secret", "new_string": "pwned"}, ctx)
    for path in READ_ONLY_EXTRA:
        with pytest.raises(ToolError):
            await ReadFile().run({"path": path}, ctx)
    assert snapshot(tree["tmp"]) == before
    assert (tree["outside"] / "secret.txt").read_text() == "outside secret\n"


def test_refusal_messages_are_readable(tree):
    with pytest.raises(ToolError, match=r"Path '\.\./outside/secret\.txt' is outside this task's workspace"):
        resolve_in_workspace(tree["ws"], "../outside/secret.txt")
    with pytest.raises(ToolError, match="NUL"):
        resolve_in_workspace(tree["ws"], "a\x00b")
    with pytest.raises(ToolError, match="too long"):
        resolve_in_workspace(tree["ws"], "a" * 256)
    with pytest.raises(ToolError, match="empty"):
        resolve_in_workspace(tree["ws"], "")
    with pytest.raises(ToolError, match="home directory"):
        resolve_in_workspace(tree["ws"], "~/x")
    with pytest.raises(ToolError, match=r"\\u202e"):
        resolve_in_workspace(tree["ws"], "a\u202eb")
    with pytest.raises(ToolError, match="loop"):
        resolve_in_workspace(tree["ws"], "loop")


def test_paths_inside_are_resolved(tree):
    ws = tree["ws"]
    real = Path(os.path.realpath(ws))
    (ws / "link_in").symlink_to("notes.txt")
    (ws / "dangling_in").symlink_to("sub/later.txt")
    (ws / "sub_link").symlink_to("sub")
    assert resolve_in_workspace(ws, "notes.txt") == real / "notes.txt"
    assert resolve_in_workspace(ws, "./sub/../notes.txt") == real / "notes.txt"
    assert resolve_in_workspace(ws, str(ws / "notes.txt")) == real / "notes.txt"
    assert resolve_in_workspace(ws, "link_in") == real / "notes.txt"
    assert resolve_in_workspace(ws, "sub/up/ws/notes.txt") == real / "notes.txt"
    assert resolve_in_workspace(ws, ".") == real
    assert resolve_in_workspace(ws, "sub/") == real / "sub"
    assert resolve_in_workspace(ws, "a/b/new.txt", for_write=True) == real / "a/b/new.txt"
    assert resolve_in_workspace(ws, "sub_link/new.txt", for_write=True) == real / "sub/new.txt"
    assert resolve_in_workspace(ws, "dangling_in", for_write=True) == real / "sub/later.txt"
    assert resolve_in_workspace(ws, "café ☕.txt", for_write=True) == real / "café ☕.txt"
    assert resolve_in_workspace(ws, "...", for_write=True) == real / "..."
    assert resolve_in_workspace(ws, "x" * 255, for_write=True) == real / ("x" * 255)
    assert resolve_in_workspace(ws, "a~b/~c", for_write=True) == real / "a~b/~c"


def test_workspace_folder_itself_is_not_a_write_target(tree):
    with pytest.raises(ToolError, match="workspace folder itself"):
        resolve_in_workspace(tree["ws"], ".", for_write=True)


def test_workspace_reached_through_a_symlink(tree):
    alias = tree["tmp"] / "alias"
    alias.symlink_to(tree["ws"])
    assert resolve_in_workspace(alias, "notes.txt") == Path(os.path.realpath(tree["ws"])) / "notes.txt"
    assert resolve_in_workspace(alias, str(tree["ws"] / "notes.txt")).name == "notes.txt"
    with pytest.raises(ToolError):
        resolve_in_workspace(alias, "../outside/secret.txt")


def test_workspace_for(tmp_path):
    ws = workspace_for(tmp_path, "task-1")
    assert ws == tmp_path / "workspaces" / "task-1"
    assert ws.is_dir()
    assert workspace_for(tmp_path, "task-1") == ws
    for bad in ("", ".", "..", "a/b", "a\x00"):
        with pytest.raises(ValueError):
            workspace_for(tmp_path, bad)


# attachments


@pytest.fixture
def src(tmp_path: Path) -> Path:
    d = tmp_path / "src"
    (d / "one").mkdir(parents=True)
    (d / "two").mkdir()
    (d / "one" / "report.pdf").write_bytes(b"%PDF one")
    (d / "two" / "report.pdf").write_bytes(b"%PDF two")
    (d / "notes").write_text("no suffix")
    return d


def test_attachments_copied_with_clashes_resolved(tmp_path, src):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "report.pdf").write_bytes(b"already here")
    names = copy_attachments(
        ws, [src / "one" / "report.pdf", str(src / "two" / "report.pdf"), src / "notes", src / "notes"]
    )
    assert names == ["report (1).pdf", "report (2).pdf", "notes", "notes (1)"]
    assert (ws / "report.pdf").read_bytes() == b"already here"
    assert (ws / "report (1).pdf").read_bytes() == b"%PDF one"
    assert (ws / "report (2).pdf").read_bytes() == b"%PDF two"
    assert (ws / "notes (1)").read_text() == "no suffix"
    assert copy_attachments(ws, [src / "one" / "report.pdf"]) == ["report (3).pdf"]


def test_attachment_too_big_copies_nothing(tmp_path, src):
    ws = tmp_path / "ws"
    ws.mkdir()
    big = src / "big.bin"
    big.write_bytes(b"x" * 2048)
    with pytest.raises(ToolError, match=r"'big.bin' is 2.0 KiB; the limit is 1.0 KiB"):
        copy_attachments(ws, [src / "notes", big], max_bytes=1024)
    assert list(ws.iterdir()) == []


def test_attachment_missing_or_folder(tmp_path, src):
    ws = tmp_path / "ws"
    ws.mkdir()
    with pytest.raises(ToolError, match="was not found"):
        copy_attachments(ws, [src / "notes", src / "nope.txt"])
    with pytest.raises(ToolError, match="not a regular file"):
        copy_attachments(ws, [src / "one"])
    assert list(ws.iterdir()) == []


def test_attachments_default_limit_is_50_mib(tmp_path, src):
    ws = tmp_path / "ws"
    ws.mkdir()
    huge = src / "huge.bin"
    with open(huge, "wb") as f:
        f.truncate(50 * 1024 * 1024 + 1)  # sparse: cheap to make
    with pytest.raises(ToolError, match=r"limit is 50\.0 MiB"):
        copy_attachments(ws, [huge])
    assert copy_attachments(ws, []) == []
