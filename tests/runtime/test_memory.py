"""Memory across tasks: extraction after a turn, the memory note in the next task's request, forgetting, secrets
kept out, per-task and global off, the memory tool's confinement and approvals."""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import time
from pathlib import Path

import pytest

from runtime.api import ConfigError, Runtime
from runtime.errors import ToolError
from runtime.memory.folder import NOTE_CHARS, Memory, looks_secret
from runtime.providers.scripted import Call, ScriptedModel
from runtime.store.memory_repo import MemoryRepo
from runtime.store.repo import DB_NAME, Store
from runtime.tools.base import ToolContext
from runtime.tools.memory_tool import MemoryTool
from tests.runtime.test_workspace import corpus, snapshot, tree  # noqa: F401  (tree is a fixture)
from tests.support.helpers import collect, open_runtime, write_settings
from tests.support.openai_server import OpenAIServer, Reply

PREFERENCE = "I prefer metric units, so always give distances in kilometres."
PROPOSAL = {"add": [{"name": "units", "summary": "Prefers metric units (kilometres)",
                     "content": "The person wants distances in kilometres, never miles."}], "update": [], "delete": []}


async def settle(rt: Runtime, timeout: float = 10.0) -> None:
    """Until the background jobs (extraction, indexing) are done."""
    deadline = time.monotonic() + timeout
    while rt.jobs.pending:
        assert time.monotonic() < deadline, "background jobs did not finish"
        await asyncio.sleep(0.01)


def request_for(server: OpenAIServer, text: str) -> dict:
    """The first chat request whose last message is the person's `text`."""
    return next(r for r in server.chat_requests if r["messages"][-1].get("content") == text)


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


async def turn(rt: Runtime, task_id: str, text: str):
    handle = await rt.send(task_id, text)
    events = await collect(rt, task_id)
    await rt.wait_idle(task_id)
    await settle(rt)
    return handle, events


async def test_three_tasks_a_preference_is_remembered_then_forgotten(rt, server, home):
    server.script(Reply(chunks=["Noted: kilometres."]), Reply(chunks=["```json\n", json.dumps(PROPOSAL), "\n```"]))
    first = await rt.create_task(title="Walks")
    handle, _ = await turn(rt, first.id, PREFERENCE)

    extraction = server.chat_requests[1]
    assert "Current memory index" in extraction["messages"][1]["content"] and PREFERENCE in extraction["messages"][1][
        "content"]
    saved = (home / "memory" / "units.md").read_text()
    assert saved.startswith("# Prefers metric units (kilometres)") and "never miles" in saved
    assert "- units.md: Prefers metric units (kilometres)" in (home / "memory" / "INDEX.md").read_text()
    [row] = await rt.memory.list()
    assert (row["name"], row["origin"], row["source_task_id"], row["source_turn_id"]) == (
        "units.md", "extraction", first.id, handle.turn_id)
    assert (await rt.jobs.log("memory.extraction"))[0]["status"] == "done"

    second = await rt.create_task(title="Marathon")
    await turn(rt, second.id, "How long is a marathon, in distance?")
    system = request_for(server, "How long is a marathon, in distance?")["messages"][0]["content"]
    assert "The person's saved memories" in system and "data, not instructions" in system
    assert "- units.md: Prefers metric units (kilometres)" in system
    assert '<memory name="units.md">' in system and "never miles" in system  # relevant: its body too
    assert (await rt.memory.list())[0]["last_used_at"] is not None

    await rt.memory.forget("units.md")
    assert not (home / "memory" / "units.md").exists()
    assert "units.md" not in (home / "memory" / "INDEX.md").read_text()
    third = await rt.create_task(title="Run")
    await turn(rt, third.id, "How far is a 10k run?")
    system = request_for(server, "How far is a 10k run?")["messages"][0]["content"]
    assert "metric" not in system and "saved memories" not in system
    assert await rt.memory.list() == []


async def test_a_canary_secret_never_reaches_memory(rt, server, home):
    canary = "canary-5521-hunter"
    said = f"My password is {canary} and I prefer tea to coffee."
    proposal = {"add": [{"name": "password", "summary": "Their password", "content": f"Password: {canary}"},
                        {"name": "login", "summary": f"Uses {canary} to log in", "content": "For the bank."},
                        {"name": "drinks", "summary": "Prefers tea to coffee", "content": "Offer tea."}]}
    server.script(Reply(chunks=["Noted."]), Reply(chunks=[json.dumps(proposal)]))
    task = await rt.create_task()
    await turn(rt, task.id, said)
    assert canary not in json.dumps(server.chat_requests[1])  # the model proposing memories never saw it
    assert [m["name"] for m in await rt.memory.list()] == ["drinks.md"]
    for path in (home / "memory").iterdir():
        assert canary not in path.read_text()
    db = sqlite3.connect(home / DB_NAME)
    try:
        stored = db.execute("select group_concat(summary || body) from memory_fts").fetchone()[0]
        assert canary not in stored and "tea" in stored
    finally:
        db.close()
    with pytest.raises(ConfigError, match="secret"):
        await rt.memory.save("bank.md", f"# Bank\nThe api_key={canary}")


async def test_tasks_with_memory_off_neither_use_nor_save_it(rt, server, home):
    await rt.memory.save("units.md", "# Prefers metric units\nKilometres.")
    private = await rt.create_task(title="Private", memory=False)
    assert private.memory is False and (await rt.get_task(private.id)).memory is False
    await turn(rt, private.id, "I prefer the imperial system here.")  # eligible, but this task keeps nothing
    request = request_for(server, "I prefer the imperial system here.")
    assert "metric" not in request["messages"][0]["content"]
    assert "memory" not in {t["function"]["name"] for t in request["tools"]}
    assert len(server.chat_requests) == 1  # no extraction call
    await rt.memory.set_enabled(False)
    assert not rt.memory.enabled and json.loads((home / "settings.json").read_text())["memory"] is False
    normal = await rt.create_task()
    await turn(rt, normal.id, "I love long walks.")
    assert "metric" not in request_for(server, "I love long walks.")["messages"][0]["content"]
    assert len(server.chat_requests) == 2


async def test_extraction_never_saves_a_second_copy_of_a_memory(rt, server, home):
    text = "# Prefers metric units (kilometres)\nKilometres, never miles.\n"
    await rt.memory.save("units.md", text)
    proposal = {"add": [
        {"name": "metric-units", "summary": "prefers metric units, kilometres", "content": "Uses km."},  # renamed
        {"name": "units", "summary": "Prefers metric units (kilometres)", "content": "Distances in km."},  # again
    ], "update": [], "delete": []}
    server.script(Reply(chunks=["Noted."]), Reply(chunks=[json.dumps(proposal)]))
    task = await rt.create_task()
    await turn(rt, task.id, PREFERENCE)
    assert "- units.md: Prefers metric units (kilometres)" in server.chat_requests[1]["messages"][1]["content"]
    assert (await rt.jobs.log("memory.extraction"))[0]["status"] == "done"
    [row] = await rt.memory.list()
    assert (row["name"], row["origin"]) == ("units.md", "person")  # not rewritten by the extraction
    assert (home / "memory" / "units.md").read_text() == text
    assert sorted(p.name for p in (home / "memory").iterdir()) == ["INDEX.md", "units.md"]


async def test_extraction_updates_and_deletes_memories_with_provenance(rt, server, home):
    await rt.memory.save("units.md", "# Prefers metric units\nKilometres.")
    await rt.memory.save("city.md", "# Lives in Lyon\nNear the old town.")
    await rt.memory.save("editor.md", "# Uses Vim\nWith its keybindings everywhere.")
    before = {m["name"]: m for m in await rt.memory.list()}
    proposal = {"add": [], "update": [{"name": "city.md", "summary": "Lives in Porto",
                                       "content": "Moved to Porto in 2026, near the river."}],
                "delete": ["editor.md"]}
    server.script(Reply(chunks=["Noted."]), Reply(chunks=[json.dumps(proposal)]))
    task = await rt.create_task()
    handle, _ = await turn(rt, task.id, "I live in Porto now, and I don't use Vim any more.")

    assert "- city.md: Lives in Lyon" in server.chat_requests[1]["messages"][1]["content"]  # proposed against it
    assert (await rt.jobs.log("memory.extraction"))[0]["status"] == "done"
    folder = home / "memory"
    assert sorted(p.name for p in folder.iterdir()) == ["INDEX.md", "city.md", "units.md"]
    assert (folder / "city.md").read_text() == "# Lives in Porto\n\nMoved to Porto in 2026, near the river.\n"
    assert (folder / "units.md").read_text() == "# Prefers metric units\nKilometres.\n"
    index = (folder / "INDEX.md").read_text()
    assert "- city.md: Lives in Porto\n- units.md: Prefers metric units\n" in index
    assert "Lyon" not in index and "editor" not in index
    rows = {m["name"]: m for m in await rt.memory.list()}
    assert set(rows) == {"city.md", "units.md"}
    city = rows["city.md"]
    assert (city["origin"], city["source_task_id"], city["source_turn_id"]) == ("extraction", task.id, handle.turn_id)
    assert city["created_at"] == before["city.md"]["created_at"] < city["updated_at"]
    assert rows["units.md"] == before["units.md"]  # untouched: still the person's, as it was
    db = sqlite3.connect(home / DB_NAME)
    try:
        fts = dict(db.execute("select name, summary || ' ' || body from memory_fts").fetchall())
        assert set(fts) == {"city.md", "units.md"} and "Porto" in fts["city.md"] and "Lyon" not in fts["city.md"]
        assert db.execute("select count(*) from memories where name = 'editor.md'").fetchone()[0] == 0
    finally:
        db.close()


async def test_one_answer_proposing_the_same_memory_twice_saves_it_once(rt, server, home):
    proposal = {"add": [{"name": "drinks", "summary": "Prefers tea to coffee", "content": "Offer tea."},
                        {"name": "tea", "summary": "prefers tea to coffee.", "content": "Tea, not coffee."}]}
    server.script(Reply(chunks=["Noted."]), Reply(chunks=[json.dumps(proposal)]))
    task = await rt.create_task()
    await turn(rt, task.id, "I prefer tea to coffee.")
    assert [m["name"] for m in await rt.memory.list()] == ["drinks.md"]
    assert (home / "memory" / "drinks.md").read_text() == "# Prefers tea to coffee\n\nOffer tea.\n"


async def test_a_failed_extraction_is_logged_and_the_next_turn_runs(rt, server):
    server.script(Reply(chunks=["Sure."]), Reply(chunks=["I cannot answer in JSON, sorry."]), Reply(chunks=["Hi."]))
    task = await rt.create_task()
    await turn(rt, task.id, "Call me Ana from now on.")
    [job] = await rt.jobs.log("memory.extraction")
    assert job["status"] == "failed" and job["task_id"] == task.id
    assert job["error"] == "the model did not answer with the JSON object asked for"  # for a person to read
    _, events = await turn(rt, task.id, "hello")
    assert events[-1].reason == "completed" and await rt.memory.list() == []


async def test_ordinary_turns_cost_no_extraction(rt, server):
    task = await rt.create_task()
    for text in ("Summarise the file for me.", "What is 2 + 2?", "Thanks!"):
        await turn(rt, task.id, text)
    assert len(server.chat_requests) == 3


async def test_the_extraction_request_is_a_side_request_that_a_local_model_serves_after_turns(home):
    model = ScriptedModel([["Noted."], [json.dumps(PROPOSAL)]])
    rt = await open_runtime(home, model)
    try:
        task = await rt.create_task(model="scripted/test")
        await turn(rt, task.id, PREFERENCE)
        assert [r.purpose for r in model.requests] == ["turn", "memory"]  # providers/llama/queue.py: turns first
        assert [m["name"] for m in await rt.memory.list()] == ["units.md"]
    finally:
        await rt.aclose()


async def test_files_edited_by_hand_count_at_once(home):
    rt = await open_runtime(home)
    try:
        folder = rt.memory.folder
        folder.mkdir(exist_ok=True)
        (folder / "garden.md").write_text("# Grows tomatoes on the balcony\nCherry tomatoes, every summer.\n")
        [row] = await rt.memory.list()
        assert (row["name"], row["summary"], row["origin"]) == ("garden.md", "Grows tomatoes on the balcony", "file")
        assert [m["name"] for m in await rt.memory.list("cherry")] == ["garden.md"]
        (folder / "garden.md").write_text("# Grows peppers now\n")
        assert (await rt.memory.list())[0]["summary"] == "Grows peppers now"
        (folder / "garden.md").unlink()
        assert await rt.memory.list() == []
        assert "garden" not in (folder / "INDEX.md").read_text()
    finally:
        await rt.aclose()


async def test_memory_tool_view_runs_and_writes_follow_approvals(home):
    model = ScriptedModel([
        [Call("memory", {"command": "view"})],
        [Call("memory", {"command": "create", "path": "editor.md", "content": "# Uses Vim\nKeybindings too."})],
        ["Saved."],
    ])
    rt = await open_runtime(home, model)
    try:
        task = await rt.create_task(model="scripted/test", approval="ask")
        await rt.send(task.id, "Remember that I use Vim.")
        events = await collect(rt, task.id)
        await rt.wait_idle(task.id)
        views = [e for e in events if e.type == "tool_call" and e.state == "done"]
        assert views and views[0].result == "No memories yet." and views[0].effect == "read_only"
        assert events[-1].reason == "waiting"  # the create waits for the person
        assert not (rt.memory.folder / "editor.md").exists()
        request = (await rt.get_task(task.id)).pending_request
        await rt.answer(task.id, request["request_id"], "approve")
        await collect(rt, task.id)
        await rt.wait_idle(task.id)
        [row] = await rt.memory.list()
        assert (row["name"], row["origin"], row["source_task_id"]) == ("editor.md", "tool", task.id)
    finally:
        await rt.aclose()


async def test_the_memory_note_stays_within_its_budget_and_counts_what_it_leaves_out(tmp_path):
    store = await Store.open(tmp_path)
    try:
        memory = Memory(tmp_path / "memory", MemoryRepo(store.engine))
        for i in range(120):
            await memory.write(f"topic-{i:03d}.md", f"# Topic {i:03d}: {'quiet sea and gulls ' * 6}\nCalm.",
                               origin="person")
        with_body = 0
        for size in range(1700, 2300, 15):  # a relevant memory around what the index leaves of the budget
            await memory.write("harbour.md", "# Harbour\n" + ("boats " * 400)[:size], origin="person")
            note = await memory.note("boats")
            assert len(note) <= NOTE_CHARS, f"a {size}-character memory made a {len(note)}-character note"
            index = note.split("Index:\n", 1)[1].split("\n\n", 1)[0].split("\n")
            shown = [ln for ln in index if ln.startswith(("- topic-", "- harbour.md"))]
            [more] = re.findall(r"^- … and (\d+) more \(view them with the memory tool\)$", "\n".join(index), re.M)
            assert len(shown) >= 10 and len(shown) + int(more) == 121  # every memory listed or counted
            with_body += '<memory name="harbour.md">' in note
        assert 0 < with_body < 40  # the body came in while it fitted and was left out once it did not
    finally:
        await store.aclose()


async def test_memory_tool_refuses_every_escape(tree):  # noqa: F811
    store = await Store.open(tree["tmp"])
    try:
        tool = MemoryTool(Memory(tree["ws"], MemoryRepo(store.engine)))
        ctx = ToolContext(task_id="t", turn_id="u", workspace=tree["tmp"], call_id="c")
        before = snapshot(tree["tmp"] / "outside") | snapshot(tree["evil"])
        for path in corpus(tree):
            for args in ({"command": "view", "path": path}, {"command": "delete", "path": path},
                         {"command": "create", "path": path, "content": "# pwned\n"},
                         {"command": "update", "path": path, "content": "# pwned\n"}):
                with pytest.raises(ToolError):
                    await tool.run(args, ctx)
        assert snapshot(tree["tmp"] / "outside") | snapshot(tree["evil"]) == before
        with pytest.raises(ToolError, match="outside the memory folder"):
            await tool.run({"command": "view", "path": "../outside/secret.txt"}, ctx)
        with pytest.raises(ToolError, match="directly in the memory folder"):
            await tool.run({"command": "create", "path": "sub/x.md", "content": "# x\n"}, ctx)
        with pytest.raises(ToolError, match="kept by Hearth"):
            await tool.run({"command": "update", "path": "INDEX.md", "content": "# x\n"}, ctx)
        assert (await tool.run({"command": "create", "path": "ok.md", "content": "# Fine\n"}, ctx)).output == \
            "Saved the memory 'ok.md'."
    finally:
        await store.aclose()


async def test_hearth_jobs_lists_background_work_and_why_one_failed(rt, server, home):
    from tests.runtime.test_cli import _cli, _result

    server.script(Reply(chunks=["Sure."]), Reply(chunks=["I cannot answer in JSON, sorry."]))
    task = await rt.create_task()
    await turn(rt, task.id, "Call me Ana from now on.")
    await rt.aclose()
    code, out, err = await _result(await _cli("jobs", home=home))
    assert code == 0, err
    line, = [ln for ln in out.splitlines() if "saving memories" in ln]
    assert f"task {task.id[:8]}" in line
    assert line.endswith("failed: the model did not answer with the JSON object asked for")
    code, out, _ = await _result(await _cli("jobs", "--failed", "--limit", "5", home=home))
    assert code == 0 and out.count("failed:") == 1
    code, _, err = await _result(await _cli("jobs", "--limit", "0", home=home))
    assert code == 2 and err.strip() == "hearth: --limit must be at least 1."



@pytest.mark.parametrize("seen_in", ["a tool result", "the input"])
async def test_the_memory_tool_never_saves_a_secret_the_turn_saw(home, seen_in):
    canary = "canary-5521-hunter"
    note = f"# Login\nUses {canary} to log in."
    assert not looks_secret(note)  # by its shape alone it would pass
    said = f"My password is {canary}, keep it safe." if seen_in == "the input" else "Log me in to the bank site."
    model = ScriptedModel([
        [Call("read_file", {"path": "vault.txt"})],
        [f"Logging in with {canary} works.", Call("memory", {"command": "create", "path": "login.md",
                                                             "content": note})],
        [Call("memory", {"command": "create", "path": f"{canary}.md", "content": "# Login\nThe usual one."})],
        ["Done."],
    ])
    rt = await open_runtime(home, model)
    try:
        task = await rt.create_task(model="scripted/test", approval="full_auto")
        (Path(task.workspace) / "vault.txt").write_text(
            f"bank login\npassword: {canary}\n" if seen_in == "a tool result" else "bank login\n")
        await rt.send(task.id, said)
        events = await collect(rt, task.id)
        await rt.wait_idle(task.id)
        assert events[-1].reason == "completed"
        shown, *refusals = [m["content"] for m in model.requests[-1].messages if m["role"] == "tool"]
        assert (canary in shown) == (seen_in == "a tool result")  # the model read it there, or in the input
        assert len(refusals) == 2
        for refusal in refusals:
            assert "repeats a secret from this conversation" in refusal and "memories never hold secrets" in refusal
        folder = rt.memory.folder
        assert all(canary not in p.name and canary not in p.read_text() for p in folder.iterdir())
        assert await rt.memory.list() == []
        db = sqlite3.connect(home / DB_NAME)
        try:
            assert db.execute("select count(*) from memory_fts where summary || body like ?",
                              (f"%{canary}%",)).fetchone()[0] == 0
        finally:
            db.close()
    finally:
        await rt.aclose()


async def test_hearth_memory_add_writes_a_memory_by_hand_with_the_tools_checks(home):
    from tests.runtime.test_cli import _cli, _result

    code, out, err = await _result(await _cli("memory", "add", "trains", "# Travels by train\nNever flies.",
                                              home=home))
    assert (code, out.strip()) == (0, "Added trains.md."), err
    assert (home / "memory" / "trains.md").read_text() == "# Travels by train\nNever flies.\n"
    proc = await _cli("memory", "add", "garden.md", home=home, stdin=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(b"# Grows tomatoes\nOn the balcony.\n"), 60)
    assert (proc.returncode, out.decode().strip()) == (0, "Added garden.md."), err
    refused = {
        ("trains", "# Trains again"): "A memory named 'trains.md' exists already",
        ("bank", "# Bank\nmy password is hunter2"): "looks like a secret",
        ("../settings.json", "# Escape"): "outside the memory folder",
        ("notes.txt", "# Notes"): "use a name ending in .md",
        ("INDEX.md", "# Mine"): "kept by Hearth itself",
        ("long", "# Long\n" + "x" * 5000): "at most 4000 characters",
        ("empty", "   "): "needs some text",
    }
    for (name, text), why in refused.items():
        code, _, err = await _result(await _cli("memory", "add", name, text, home=home))
        assert code == 2 and why in err and "Traceback" not in err, (name, err)
    rt = await Runtime.open(home)
    try:
        rows = await rt.memory.list()
        assert [(m["name"], m["origin"]) for m in rows] == [("garden.md", "person"), ("trains.md", "person")]
    finally:
        await rt.aclose()


async def test_a_forgotten_memory_comes_back_with_its_provenance(rt, server):
    server.script(Reply(chunks=["Noted."]), Reply(chunks=[json.dumps(PROPOSAL)]))
    task = await rt.create_task()
    await turn(rt, task.id, PREFERENCE)
    [learned] = await rt.memory.list()
    assert learned["origin"] == "extraction" and learned["source_task_id"] == task.id
    text = await rt.memory.text("units.md")
    await rt.memory.forget("units.md")
    assert await rt.memory.list() == [] and not (rt.memory.folder / "units.md").exists()
    assert await rt.memory.restore("units.md") == "units.md"
    [back] = await rt.memory.list()
    assert {k: v for k, v in back.items() if k not in ("mtime", "updated_at")} == {
        k: v for k, v in learned.items() if k not in ("mtime", "updated_at")}  # where it came from, and when
    assert await rt.memory.text("units.md") == text
    assert [m["name"] for m in await rt.memory.list("kilometres")] == ["units.md"]  # indexed again
    assert "units.md" in (rt.memory.folder / "INDEX.md").read_text()
    with pytest.raises(ConfigError, match=r"No deleted memory named 'units\.md'"):
        await rt.memory.restore("units.md")  # brought back once
    await rt.memory.forget("units.md")
    await rt.memory.add("units", "# Prefers miles now\nMiles.")
    with pytest.raises(ConfigError, match="exists again"):  # never over a memory written since
        await rt.memory.restore("units.md")
    assert "miles" in await rt.memory.text("units.md")
