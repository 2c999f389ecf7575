"""A turn's changes to its workspace, by file tools and by a real shell command (`rm` in the sandbox): listed,
diffed, undone, refused where a file changed since, the size cap of what is kept to undo them, and the same in the
CLI (real child processes)."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import pytest

from runtime.api import ConfigError, UndoRefused
from runtime.cli.exits import EXIT_USAGE
from runtime.providers.scripted import Call, ScriptedModel
from tests.runtime.test_cli import _cli, _result
from tests.support.helpers import MODEL, open_runtime


@pytest.fixture
async def model():
    return ScriptedModel()


@pytest.fixture
async def rt(home, model):
    rt = await open_runtime(home, model)
    yield rt
    await rt.aclose()


async def _task_with_files(rt):
    task = await rt.create_task(model=MODEL, approval="full_auto")
    return task, Path((await rt.core.store.get_task(task.id))["workspace"])


async def _turn(rt, task_id: str, text: str) -> None:
    await rt.send(task_id, text)
    await rt.wait_idle(task_id)


async def _two_writes_and_an_rm(rt, model):
    """Turn 1 makes notes.txt and old.txt; turn 2 rewrites notes.txt, writes new.txt and `rm`s old.txt in the
    sandboxed shell."""
    task, ws = await _task_with_files(rt)
    model.add_steps([Call("write_file", {"path": "notes.txt", "content": "one\ntwo\nthree\n"})],
                    [Call("write_file", {"path": "old.txt", "content": "keep me\n"})], ["made them"])
    await _turn(rt, task.id, "make the files")
    model.add_steps([Call("write_file", {"path": "notes.txt", "content": "one\n2\nthree\n"})],
                    [Call("write_file", {"path": "sub/new.txt", "content": "brand new\n"})],
                    [Call("run_shell", {"command": "rm old.txt"})], ["done"])
    await _turn(rt, task.id, "change them")
    return task, ws


async def test_a_turns_tool_writes_and_shell_rm_are_listed_diffed_and_undone(rt, model):
    task, ws = await _two_writes_and_an_rm(rt, model)
    shell = [p for m in await rt.messages(task.id) for p in m.parts if p.get("name") == "run_shell"]
    assert shell and shell[0]["state"] == "done", shell  # the rm really ran, as a child process
    assert not (ws / "old.txt").exists()

    first, second = await rt.changes.list(task.id)
    assert first.number == 1 and [(f.path, f.kind) for f in first.files] == [
        ("notes.txt", "created"), ("old.txt", "created")]
    assert second.number == 2 and [(f.path, f.kind) for f in second.files] == [
        ("notes.txt", "modified"), ("old.txt", "deleted"), ("sub/", "created"), ("sub/new.txt", "created")]
    assert second.file_count == 3
    assert all(f.cannot_undo is None for f in second.files)
    assert (await rt.changes.list(task.id, turn=2)) == [second]

    diff = await rt.changes.diff(task.id, second.turn_id, "notes.txt")
    assert "-two\n" in diff and "+2\n" in diff and diff.startswith("--- a/notes.txt")

    put_back = await rt.changes.undo(task.id, 2)
    assert sorted(put_back) == ["notes.txt", "old.txt", "sub/", "sub/new.txt"]
    assert (ws / "notes.txt").read_text() == "one\ntwo\nthree\n"
    assert (ws / "old.txt").read_text() == "keep me\n"
    assert not (ws / "sub").exists()  # the folder the turn made goes with the file
    assert (await rt.changes.list(task.id, turn=2))[0].undone
    with pytest.raises(ConfigError, match="already undone"):
        await rt.changes.undo(task.id, 2)


async def test_undo_is_refused_naming_the_file_the_person_changed_unless_forced(rt, model):
    task, ws = await _two_writes_and_an_rm(rt, model)
    (ws / "sub/new.txt").write_text("the person's own words\n")
    with pytest.raises(UndoRefused) as refused:
        await rt.changes.undo(task.id, 2)
    assert refused.value.paths == ["sub/new.txt"] and "sub/new.txt" in str(refused.value)
    assert "changed since turn 2" in str(refused.value)
    assert (ws / "notes.txt").read_text() == "one\n2\nthree\n"  # nothing was undone
    assert not (ws / "old.txt").exists()

    assert sorted(await rt.changes.undo(task.id, 2, force=True)) == ["notes.txt", "old.txt", "sub/", "sub/new.txt"]
    assert (ws / "old.txt").read_text() == "keep me\n" and not (ws / "sub/new.txt").exists()


async def test_a_later_turns_change_refuses_the_earlier_turns_undo(rt, model):
    task, _ = await _two_writes_and_an_rm(rt, model)
    with pytest.raises(UndoRefused, match=r"notes\.txt"):
        await rt.changes.undo(task.id, 1)  # turn 2 changed notes.txt and removed old.txt since
    with pytest.raises(ConfigError, match="has no turn 9"):
        await rt.changes.list(task.id, turn=9)


async def test_a_command_that_rewrites_a_file_in_place_is_listed_as_not_undoable(rt, model):
    task, ws = await _task_with_files(rt)
    (ws / "data.txt").write_text("before\n")
    model.add_steps([Call("run_shell", {"command": "echo after > data.txt"})], ["rewrote it"])
    await _turn(rt, task.id, "rewrite")
    (turn,) = await rt.changes.list(task.id)
    (change,) = turn.files
    assert change.kind == "modified" and "in place" in change.cannot_undo
    with pytest.raises(UndoRefused, match=r"cannot be put back: data\.txt"):
        await rt.changes.undo(task.id, 1)


async def test_over_the_size_cap_the_oldest_turns_restore_data_goes(rt, model):
    task, ws = await _task_with_files(rt)
    (ws / "big.txt").write_text("a" * 5000)
    for n in range(3):
        model.add_steps([Call("write_file", {"path": "big.txt", "content": str(n) * 5000})], ["ok"])
        await _turn(rt, task.id, f"rewrite {n}")
    # Contents a, 0, 1 and 2 (each turn's before and after), each kept once though turns share them.
    assert await rt.changes.usage() == (20_000, 2_000_000_000)
    await rt.changes.set_cap(12_000)
    # Turn 1 goes (frees a; 0 is still turn 2's), then turn 2 (frees 0; 1 is still turn 3's): 10,000 left.
    assert await rt.changes.usage() == (10_000, 12_000)
    first, second, third = await rt.changes.list(task.id)
    assert [t.files[0].cannot_undo for t in (first, second, third)] == [
        "restore data dropped by the size cap", "restore data dropped by the size cap", None]
    with pytest.raises(UndoRefused, match=r"cannot be put back: big\.txt"):
        await rt.changes.undo(task.id, 1)
    assert sorted(p.name for p in (rt.home / "changes").rglob("*") if p.is_file()) == sorted(
        hashlib.sha256(c.encode() * 5000).hexdigest() for c in "12")
    assert rt.settings.changes_max_bytes == 12_000  # kept in settings.json


async def test_the_cli_lists_diffs_refuses_and_undoes_a_turns_changes(home, model):
    rt = await open_runtime(home, model)
    try:
        task, ws = await _two_writes_and_an_rm(rt, model)
    finally:
        await rt.aclose()
    (ws / "notes.txt").write_text("the person's edit\n")

    code, out, err = await _result(await _cli("changes", task.id[:8], "--turn", "2", "--diff", home=home))
    assert code == 0, err
    assert out.splitlines()[:4] == ["Turn 2: 3 file(s) changed", "  modified  notes.txt", "    --- a/notes.txt",
                                    "    +++ b/notes.txt"]
    assert "  deleted   old.txt" in out and "  created   sub/\n  created   sub/new.txt" in out and "    -two" in out

    code, out, err = await _result(await _cli("undo", task.id, "--turn", "2", home=home))
    assert code == EXIT_USAGE and out == ""
    assert err.strip() == (f"hearth: Not undone: changed since turn 2: notes.txt. Undo anyway to overwrite them "
                           f"(hearth undo {task.id} --turn 2 --force).")
    assert not (ws / "old.txt").exists()

    code, out, err = await _result(await _cli("undo", task.id, "--turn", "2", "--force", home=home))
    assert code == 0, err
    assert out.splitlines() == ["Turn 2's changes undone; put back:", "  notes.txt", "  old.txt", "  sub/",
                                "  sub/new.txt"]
    assert (ws / "old.txt").read_text() == "keep me\n" and (ws / "notes.txt").read_text() == "one\ntwo\nthree\n"

    code, out, err = await _result(await _cli("undo", task.id, "--turn", "7", home=home))
    assert code == EXIT_USAGE and err.strip() == f"hearth: Task {task.id} has no turn 7 (it has 2)."
    code, out, err = await _result(await _cli("changes", "--cap", "a lot", home=home))
    assert code == EXIT_USAGE and "is not a size" in err
    code, out, err = await _result(await _cli("changes", "--cap", "500MB", home=home))
    assert code == 0 and out.startswith("Kept to undo changes: ") and out.strip().endswith(
        "of at most 500 MB (change it: hearth changes --cap SIZE).")


async def test_deleting_a_task_forgets_its_changes_and_their_kept_contents(rt, model):
    task, _ = await _two_writes_and_an_rm(rt, model)
    blobs = [p for p in (rt.home / "changes").rglob("*") if p.is_file()]
    assert blobs
    await rt.tasks.delete(task.id)
    assert await rt.core.store.changes(task.id) == []
    assert [p for p in (rt.home / "changes").rglob("*") if p.is_file()] == []


def test_files_beyond_the_open_file_budget_are_watched_by_stat_and_say_why_they_cannot_be_undone(tmp_path,
                                                                                               monkeypatch):
    from runtime.tools import changes

    ws = tmp_path / "ws"
    ws.mkdir()
    for name in ("a.txt", "b.txt", "c.txt"):
        (ws / name).write_text(name)
    monkeypatch.setattr(changes, "_fd_budget", lambda: 1)  # the process could keep one file open
    watch = changes.Watch(ws)
    watch.take()
    kept = [rel for rel, seen in watch.seen.items() if seen.fd is not None]
    assert len(kept) == 1
    for name in ("a.txt", "b.txt", "c.txt"):
        (ws / name).unlink()
    found = {c["path"]: c for c in watch.changes(changes.BlobStore(tmp_path / "blobs"))}
    assert sorted(found) == ["a.txt", "b.txt", "c.txt"] and all(c["kind"] == "deleted" for c in found.values())
    assert found[kept[0]]["lost"] is None and found[kept[0]]["before_sha"] is not None
    assert [c["lost"] for p, c in found.items() if p != kept[0]] == [
        "the workspace had more files than Hearth could keep open"] * 2
    assert changes._held == 0  # every descriptor given back


async def _indexed(rt) -> None:
    deadline = asyncio.get_running_loop().time() + 30
    while (status := await rt.knowledge.status())["busy"]:
        assert asyncio.get_running_loop().time() < deadline, status
        await asyncio.sleep(0.05)


async def test_a_document_a_turn_rewrites_is_indexed_again_for_the_tasks_that_work_from_it(rt, model):
    writer, ws = await _task_with_files(rt)
    model.add_steps([Call("write_file", {"path": "plan.md", "content": "The launch is in March.\n"})], ["written"])
    await _turn(rt, writer.id, "write the plan")
    reader = await rt.create_task(model=MODEL, knowledge=[str(ws / "plan.md")])  # works from the writer's file
    await _indexed(rt)
    assert "March" in (await rt.knowledge.search(reader.id, "launch"))[0]["text"]

    model.add_steps([Call("write_file", {"path": "plan.md", "content": "The launch moved to September.\n"})],
                    ["moved"])
    await _turn(rt, writer.id, "move the launch")
    await _indexed(rt)  # the post-turn resource.index job
    hits = await rt.knowledge.search(reader.id, "launch")
    assert len(hits) == 1 and "September" in hits[0]["text"], hits
    model.add_steps([Call("run_shell", {"command": "rm plan.md"})], ["gone"])
    await _turn(rt, writer.id, "remove it")
    await _indexed(rt)
    (doc,) = await rt.knowledge.list()
    assert doc["status"] == "missing"
