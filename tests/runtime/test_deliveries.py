"""Deliverables: the `deliver` tool in real turns against the OpenAI-compatible test server, the delivery store
(versions never change), writing a copy out, the workspace boundary, and a task's deletion taking them along."""

from __future__ import annotations

import hashlib
import os
import zipfile
from pathlib import Path

import pytest

from runtime.api import ConfigError, Runtime
from runtime.events import EndReason
from tests.support.helpers import collect, write_settings
from tests.support.openai_server import OpenAIServer, Reply


@pytest.fixture
async def server():
    async with OpenAIServer() as server:
        yield server


@pytest.fixture
async def rt(home, server):
    write_settings(home, server.base_url)
    rt = await Runtime.open(home)
    yield rt
    await rt.aclose()


def calls(*calls: tuple[str, dict]) -> Reply:
    return Reply(chunks=[], tool_calls=[(f"c{i}", name, args) for i, (name, args) in enumerate(calls)],
                 finish="tool_calls")


async def turn(rt: Runtime, task_id: str, text: str) -> list:
    await rt.send(task_id, text)
    events = await collect(rt, task_id)
    assert events[-1].reason == EndReason.completed
    await rt.wait_idle(task_id)
    return [e for e in events if e.type == "tool_call" and e.state in ("done", "error")]


async def test_delivering_a_path_twice_makes_two_versions_and_the_first_never_changes(rt, server, tmp_path):
    task = await rt.create_task(approval="full_auto")
    server.script(
        calls(("write_file", {"path": "out/report.md", "content": "# Report\nfirst draft\n"}),
              ("deliver", {"path": "out/report.md", "note": "The report,\n first draft"})),
        Reply(chunks=["Here it is."]),
        calls(("write_file", {"path": "out/report.md", "content": "# Report\nsecond draft, longer\n"}),
              ("deliver", {"path": "out/report.md", "note": "The report, second draft"})),
        Reply(chunks=["Updated."]),
    )
    first = await turn(rt, task.id, "write the report")
    assert first[-1].name == "deliver" and "version 1" in first[-1].result
    (v1,) = await rt.deliveries.list(task.id)
    kept = Path(v1.file).read_bytes()
    assert kept == b"# Report\nfirst draft\n"
    second = await turn(rt, task.id, "make it longer")
    assert "version 2" in second[-1].result

    v2, old = await rt.deliveries.list(task.id)  # newest first
    assert (old.id, old.version, v2.version) == (v1.id, 1, 2)
    assert Path(old.file).read_bytes() == kept  # byte for byte, although the workspace file was rewritten
    assert Path(v2.file).read_bytes() == b"# Report\nsecond draft, longer\n"
    assert old.file != v2.file and v2.name == old.name == "report.md"
    turns = await rt.tasks.turns(task.id)
    assert [old.turn_id, v2.turn_id] == [t["id"] for t in turns]
    assert (old.path, old.kind, old.size, old.note) == ("out/report.md", "file", len(kept), "The report, first draft")
    assert old.sha256 == hashlib.sha256(kept).hexdigest()
    # Only the delivered file was copied into the data folder, nothing else of the workspace.
    copies = [p for p in (rt.home / "deliveries" / task.id).rglob("*") if p.is_file()]
    assert sorted(copies) == sorted([Path(old.file), Path(v2.file)])

    # Written out: the latest, an older version by number, into a folder under its own name.
    assert await rt.deliveries.get(task.id, "out/report.md") == v2
    assert await rt.deliveries.get(task.id, "report.md", version=1) == old
    saved = await rt.deliveries.save(old, tmp_path / "mine.md")
    assert saved.read_bytes() == kept
    into = tmp_path / "folder"
    into.mkdir()
    assert (await rt.deliveries.save(v2, into)).read_bytes() == Path(v2.file).read_bytes()
    assert (into / "report.md").is_file()


async def test_a_folder_is_delivered_as_a_zip_of_its_contents_without_the_links_out(rt, server, tmp_path):
    task = await rt.create_task(approval="full_auto")
    site = Path(task.workspace) / "site"
    (site / "css").mkdir(parents=True)
    (site / "index.html").write_text("<h1>hi</h1>")
    (site / "css" / "main.css").write_text("h1 {}")
    (site / "empty").mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text("do not ship")
    os.symlink(secret, site / "leak.txt")
    server.script(calls(("deliver", {"path": "site", "note": "The site"})), Reply(chunks=["Done."]))
    (result,) = await turn(rt, task.id, "ship the site")
    assert result.state == "done" and "zip" in result.result and "1 symlink" in result.result
    (d,) = await rt.deliveries.list(task.id)
    assert (d.kind, d.name, d.path) == ("folder", "site.zip", "site")
    with zipfile.ZipFile(d.file) as archive:
        assert sorted(archive.namelist()) == ["site/css/main.css", "site/empty/", "site/index.html"]
        assert archive.read("site/index.html") == b"<h1>hi</h1>"
    assert d.size == Path(d.file).stat().st_size and d.sha256 == hashlib.sha256(Path(d.file).read_bytes()).hexdigest()


async def test_paths_outside_the_workspace_are_refused_with_a_sentence(rt, server, tmp_path):
    task = await rt.create_task(approval="full_auto")
    outside = tmp_path / "private.txt"
    outside.write_text("private")
    os.symlink(outside, Path(task.workspace) / "link.txt")
    server.script(
        calls(("deliver", {"path": str(outside), "note": "x"}), ("deliver", {"path": "../../private.txt", "note": "x"}),
              ("deliver", {"path": "link.txt", "note": "x"}), ("deliver", {"path": "missing.txt", "note": "x"}),
              ("deliver", {"path": ".", "note": "everything"})),
        Reply(chunks=["Could not."]),
    )
    results = await turn(rt, task.id, "deliver those")
    assert [r.state for r in results] == ["error"] * 5
    for r in results[:3]:
        assert "is outside this task's workspace. Use a path inside it." in r.result
    assert "does not exist in the workspace" in results[3].result
    assert "whole workspace" in results[4].result
    assert await rt.deliveries.list(task.id) == []
    assert not (rt.home / "deliveries").exists() or not any((rt.home / "deliveries").rglob("*.txt"))


async def test_a_note_is_one_line(rt, server):
    task = await rt.create_task(approval="full_auto")
    (Path(task.workspace) / "a.txt").write_text("a")
    server.script(calls(("deliver", {"path": "a.txt", "note": "  "}),
                        ("deliver", {"path": "a.txt", "note": "x" * 301})), Reply(chunks=["ok"]))
    results = await turn(rt, task.id, "deliver")
    assert [r.state for r in results] == ["error", "error"]
    assert "one-line 'note'" in results[0].result and "at most 300" in results[1].result


async def test_finding_one_by_name_says_what_there_is(rt, server):
    task = await rt.create_task(approval="full_auto")
    for folder in ("a", "b"):
        (Path(task.workspace) / folder).mkdir()
        (Path(task.workspace) / folder / "notes.txt").write_text(folder)
    with pytest.raises(ConfigError, match="It has delivered nothing yet"):
        await rt.deliveries.get(task.id, "notes.txt")
    server.script(calls(("deliver", {"path": "a/notes.txt", "note": "A"}), ("deliver", {"path": "b/notes.txt",
                                                                                       "note": "B"})),
                  Reply(chunks=["ok"]))
    await turn(rt, task.id, "deliver both")
    with pytest.raises(ConfigError, match=r"2 deliverables are named 'notes.txt': give the path, one of a/notes.txt, "
                                          r"b/notes.txt\."):
        await rt.deliveries.get(task.id, "notes.txt")
    with pytest.raises(ConfigError, match=r"delivered nothing named 'c.txt'\. Its deliverables: a/notes.txt, "):
        await rt.deliveries.get(task.id, "c.txt")
    with pytest.raises(ConfigError, match=r"a/notes.txt has only version 1; there is no version 3\."):
        await rt.deliveries.get(task.id, "a/notes.txt", version=3)


async def test_a_damaged_copy_is_not_handed_out(rt, server, tmp_path):
    task = await rt.create_task(approval="full_auto")
    (Path(task.workspace) / "a.txt").write_text("right")
    server.script(calls(("deliver", {"path": "a.txt", "note": "A"})), Reply(chunks=["ok"]))
    await turn(rt, task.id, "deliver")
    (d,) = await rt.deliveries.list(task.id)
    Path(d.file).write_text("wrong")
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(ConfigError, match="has changed since it was delivered"):
        await rt.deliveries.save(d, out / "a.txt")
    assert os.listdir(out) == []  # no half file, no temporary left behind
    with pytest.raises(ConfigError, match="does not exist"):
        await rt.deliveries.save(d, tmp_path / "no" / "out.txt")
    Path(d.file).unlink()
    with pytest.raises(ConfigError, match=r"The kept copy of a.txt \(version 1\) is missing from the data folder"):
        await rt.deliveries.save(d, out / "a.txt")


async def test_deleting_a_task_deletes_its_deliverables_and_keeps_its_workspace(rt, server):
    task = await rt.create_task(approval="full_auto")
    (Path(task.workspace) / "a.txt").write_text("a")
    server.script(calls(("deliver", {"path": "a.txt", "note": "A"})), Reply(chunks=["ok"]))
    await turn(rt, task.id, "deliver")
    assert await rt.deliveries.count(task.id) == 1
    await rt.tasks.delete(task.id)
    assert await rt.deliveries.count(task.id) == 0
    assert not (rt.home / "deliveries" / task.id).exists()
    assert (Path(task.workspace) / "a.txt").read_text() == "a"


async def test_export_writes_every_version_under_names_that_say_which(rt, server, tmp_path):
    task = await rt.create_task(approval="full_auto")
    ws = Path(task.workspace)
    (ws / "a").mkdir()
    (ws / "a" / "r.txt").write_text("a1")
    (ws / "r.txt").write_text("top")
    server.script(calls(("deliver", {"path": "a/r.txt", "note": "A"})), Reply(chunks=["ok"]),
                  calls(("write_file", {"path": "a/r.txt", "content": "a2"}), ("deliver", {"path": "a/r.txt",
                                                                                           "note": "A again"}),
                        ("deliver", {"path": "r.txt", "note": "top"})), Reply(chunks=["ok"]))
    await turn(rt, task.id, "one")
    await turn(rt, task.id, "two")
    written = await rt.deliveries.export(task.id, tmp_path / "out")
    names = {(d.path, d.version): name for d, name in written}
    assert names == {("r.txt", 1): "r.txt", ("a/r.txt", 2): "r (a ∕ r.txt).txt", ("a/r.txt", 1): "r (version 1).txt"}
    assert {p.name: p.read_text() for p in (tmp_path / "out").iterdir()} == {
        "r.txt": "top", "r (a ∕ r.txt).txt": "a2", "r (version 1).txt": "a1"}


async def test_a_helper_reports_back_and_never_delivers(rt, server):
    """Handing results to the person is the task's turn's: a helper (delegate) is not offered deliver."""
    task = await rt.create_task(approval="full_auto")
    server.script(calls(("delegate", {"agent": "researcher", "task": "look around"})),
                  Reply(chunks=["Nothing there."]), Reply(chunks=["Done."]))
    await turn(rt, task.id, "look around")
    parent, helper = (server.chat_requests[0], server.chat_requests[1])
    assert "deliver" in {t["function"]["name"] for t in parent["tools"]}
    assert helper["messages"][-1]["content"].startswith("look around")
    assert "deliver" not in {t["function"]["name"] for t in helper["tools"]}
