"""The store by URL, on SQLite and PostgreSQL: the same repository methods answer alike on both — memory and passage
search (FTS5 there, tsvector here), one running turn's recovery for the server host's lease reaper, values longer
than their column refused, deliveries numbered per path also when writers race, background commands and wake-ups — and
a PostgreSQL that cannot be reached, or stops answering, gets a sentence."""

from __future__ import annotations

import asyncio

import pytest

from runtime.errors import ConfigError, StorageUnavailable
from runtime.parts import OUTCOME_UNKNOWN
from runtime.store.knowledge_repo import COMMON_FLOOR, KnowledgeRepo
from runtime.store.memory_repo import MemoryRepo
from runtime.store.repo import Store
from tests.support.services import PostgresCluster, free_port, postgres_bindir, require


async def test_a_plain_postgresql_url_opens_through_asyncpg(postgres_url):
    for plain in (postgres_url.replace("postgresql+asyncpg://", "postgresql://"),
                  postgres_url.replace("postgresql+asyncpg://", "postgres://")):
        store = await Store.open_url(plain)
        try:
            assert store.engine.dialect.driver == "asyncpg" and store.path is None
            await store.create_task(id=f"t{len(plain)}", model="p/m", workspace="/w", knowledge=[])
        finally:
            await store.aclose()
    store = await Store.open_url(postgres_url)
    assert len(await store.list_tasks()) == 2
    await store.aclose()


async def test_a_sqlite_url_opens_the_data_folders_database(tmp_path):
    store = await Store.open_url(f"sqlite:///{tmp_path / 'hearth.sqlite3'}")
    await store.create_task(id="t1", model="p/m", workspace="/w", knowledge=[])
    await store.aclose()
    store = await Store.open(tmp_path)
    assert [t["id"] for t in await store.list_tasks()] == ["t1"]
    await store.aclose()


@pytest.mark.parametrize(("url", "says"), [
    ("mysql://ada:s3cret@db/hearth", "PostgreSQL (postgresql://…) or SQLite (sqlite:///PATH), not in mysql://ada:***@"),
    ("postgresql+psycopg2://ada:s3cret@db/hearth", "through asyncpg, not psycopg2"),
    ("sqlite://", "names no file"),
    ("sqlite:///:memory:", "names no file"),
    ("ada:s3cret@db.example.org/hearth", "is not one Hearth can read"),
])
async def test_a_url_hearth_cannot_use_gets_a_sentence_without_its_password(url, says):
    with pytest.raises(ConfigError) as found:
        await Store.open_url(url)
    assert says in str(found.value) and "s3cret" not in str(found.value)


async def test_a_postgresql_that_stops_answering_gets_a_sentence():
    require(postgres_bindir(), "PostgreSQL's server (initdb, postgres)", "postgresql")
    with pytest.raises(StorageUnavailable, match="nothing answers there"):
        await Store.open_url(f"postgresql://postgres@127.0.0.1:{free_port()}/hearth")
    # The cluster's own commands wait for processes: in a thread, so the event loop goes on.
    with await asyncio.to_thread(PostgresCluster.start) as pg:
        store = await Store.open_url(pg.url(await asyncio.to_thread(pg.create_database)))
        try:
            await store.create_task(id="t1", model="p/m", workspace="/w", knowledge=[])
            # Its connections ended (a restart): the pool checks them before use and takes new ones.
            await asyncio.to_thread(pg.sql, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
                                    "backend_type = 'client backend' AND pid <> pg_backend_pid()")
            assert [t["id"] for t in await store.list_tasks()] == ["t1"]
            await asyncio.to_thread(pg.stop)
            with pytest.raises(StorageUnavailable, match=r"^Hearth cannot reach the database test_\w+ on "
                                                         r"127\.0\.0\.1:\d+: nothing answers there\."):
                await store.list_tasks()
        finally:
            await store.aclose()


async def test_memory_search_takes_words_and_ranks_a_summary_above_a_body(database):
    store = await Store.open_url(database)
    memory = MemoryRepo(store.engine)
    try:
        await memory.save("travel.md", "Trips", "The person drives long distances in kilometres", "h1", 0.0,
                          origin="person")
        await memory.save("units.md", "Kilometres, not miles", "Metric measures", "h2", 0.0, origin="person")
        await memory.save("tea.md", "Tea", "Green, no sugar", "h3", 0.0, origin="person")
        assert await memory.search("How many kilometre?", 10) == ["units.md", "travel.md"]  # stemmed
        assert await memory.search("kilometres", 1) == ["units.md"]
        # What a person types is never read as query syntax, on either database.
        assert await memory.search('"sugar" OR NEAR(tea* -miles) & !x | (y', 10) == ["tea.md", "units.md"]
        assert await memory.search("the of and", 10) == []  # stopwords only
        assert await memory.search("   ", 10) == []
    finally:
        await store.aclose()


async def test_passage_search_ranks_text_above_heading_within_the_documents_asked(database):
    store = await Store.open_url(database)
    knowledge = KnowledgeRepo(store.engine)
    try:
        docs = await knowledge.add_documents([{"path": p, "kind": "markdown", "size": 1, "mtime": 0}
                                              for p in ("/docs/coast.md", "/docs/other.md")])
        coast, other = (d["id"] for d in sorted(docs, key=lambda d: d["path"]))
        await knowledge.add_passages(coast, 0, [{"text": "Storms close the harbour", "heading": "Lighthouses"},
                                                {"text": "The lighthouse keepers' logbooks", "heading": None}])
        await knowledge.add_passages(other, 0, [{"text": "A lighthouse elsewhere", "heading": None}])
        for doc_id, n in ((coast, 2), (other, 1)):
            await knowledge.update_document(doc_id, passages=n, status="ready")
        found = await knowledge.bm25(["lighthouse"], [coast], 10)
        assert [r["seq"] for r in found] == [1, 0] and found[0]["score"] < found[1]["score"]  # lower is better
        assert {r["document_id"] for r in await knowledge.bm25(["lighthouse"], [coast, other], 10)} == {coast, other}
        assert await knowledge.bm25(["nothing"], [coast], 10) == []
    finally:
        knowledge.close()
        await store.aclose()


async def test_a_large_librarys_search_leaves_out_words_in_most_passages(database):
    """Past COMMON_FLOOR passages both databases choose the same words: one in more than half of the passages
    carries no weight and is left out, so the rare word's passages come alone."""
    store = await Store.open_url(database)
    knowledge = KnowledgeRepo(store.engine)
    try:
        [doc] = await knowledge.add_documents([{"path": "/docs/port.md", "kind": "markdown", "size": 1, "mtime": 0}])
        count = COMMON_FLOOR + 100
        await knowledge.add_passages(doc["id"], 0, [
            {"text": f"harbour entry {i}" + (" with a lighthouse" if i in (7, 1500) else ""), "heading": None}
            for i in range(count)])
        await knowledge.update_document(doc["id"], passages=count, status="ready")
        assert sorted(r["seq"] for r in await knowledge.bm25(["harbour", "lighthouse"], [doc["id"]], 10)) == [7, 1500]
        assert await knowledge.bm25(["harbour"], [doc["id"]], 10) == []
    finally:
        knowledge.close()
        await store.aclose()


async def _running_turn(store: Store, task_id: str, turn_id: str) -> int:
    """A turn that got as far as a checkpoint: some text, a write that was running, a read not started."""
    await store.create_task(id=task_id, model="p/m", workspace="/w", knowledge=[])
    _, started = await store.add_input(task_id, [{"type": "text", "text": "go"}], client_msg_id=None,
                                       turn_id=turn_id)
    await store.checkpoint(started.output_id, [
        {"type": "text", "text": "Writing the file now"},
        {"type": "tool_call", "part_id": "p1", "call_id": "c1", "name": "write_file", "state": "running",
         "effect": "workspace_write", "args": {}},
        {"type": "tool_call", "part_id": "p2", "call_id": "c2", "name": "read_file", "state": "pending",
         "effect": "read_only", "args": {}}])
    return started.output_id


async def test_one_turn_whose_lease_expired_is_recovered_as_startup_recovers_them_all(database):
    store = await Store.open_url(database)
    try:
        out_id = await _running_turn(store, "t1", "turn1")
        await _running_turn(store, "t2", "turn2")
        assert [(r.turn_id, r.owner_id) for r in await store.running_turns()] == [("turn1", "t1"), ("turn2", "t2")]

        assert await store.interrupt_turn("t2", "turn1") is False  # not that task's turn: nothing changes
        assert await store.interrupt_turn("t1", "turn1") is True
        [turn] = await store.turns("t1")
        assert (turn["status"], turn["reason"]) == ("ended", "interrupted") and turn["ended_at"]
        [answer] = [m for m in await store.messages("t1") if m["id"] == out_id]
        assert answer["status"] == "complete" and answer["parts"][0]["text"] == "Writing the file now"
        assert [(p["state"], p["note"]) for p in answer["parts"][1:]] == [
            ("interrupted", OUTCOME_UNKNOWN), ("interrupted", "interrupted before it ran")]
        task = await store.get_task("t1")
        assert (task["state"], task["last_reason"]) == ("idle", "interrupted")
        assert (await store.get_task("t2"))["state"] == "running"  # only the one turn
        assert [r.turn_id for r in await store.running_turns()] == ["turn2"]
        assert await store.interrupt_turn("t1", "turn1") is False  # once
    finally:
        await store.aclose()


async def test_a_turn_recovered_while_its_task_runs_another_leaves_the_task_running(database):
    """A send may start the next turn before the reaper settles the dead one: the task stays running."""
    store = await Store.open_url(database)
    try:
        await _running_turn(store, "t1", "dead")
        await store.add_input("t1", [{"type": "text", "text": "again"}], client_msg_id=None, turn_id="next")
        assert await store.interrupt_turn("t1", "dead") is True
        assert (await store.get_task("t1"))["state"] == "running"
        assert [r.turn_id for r in await store.running_turns()] == ["next"]
    finally:
        await store.aclose()


async def test_reapers_racing_for_one_turn_settle_it_once(database):
    store = await Store.open_url(database)
    try:
        await _running_turn(store, "t1", "turn1")
        assert sorted(await asyncio.gather(*(store.interrupt_turn("t1", "turn1") for _ in range(6)))) == [
            False] * 5 + [True]
    finally:
        await store.aclose()


async def test_values_longer_than_their_column_are_refused_on_both(database):
    """PostgreSQL would refuse the statement with a driver's message; SQLite would keep any length."""
    store = await Store.open_url(database)
    try:
        with pytest.raises(ConfigError, match=r"^A model name may be at most 200 characters long; this one has 201\.$"):
            await store.create_task(id="t0", model="p/" + "m" * 199, workspace="/w", knowledge=[])
        assert await store.list_tasks() == []
        await store.create_task(id="t1", model="p/" + "m" * 198, workspace="/w", knowledge=[])
        with pytest.raises(ConfigError, match=r"^A client message id may be at most 100 characters long"):
            await store.add_input("t1", [{"type": "text", "text": "hi"}], client_msg_id="c" * 101, turn_id="x")
        assert await store.messages("t1") == [] and (await store.get_task("t1"))["state"] == "idle"
        msg_id, _ = await store.add_input("t1", [{"type": "text", "text": "hi"}], client_msg_id="c" * 100,
                                          turn_id="y")
        assert (await store.find_client_message("t1", "c" * 100))["id"] == msg_id
    finally:
        await store.aclose()


async def test_writers_racing_for_a_paths_next_delivery_each_get_their_own_version(database):
    store = await Store.open_url(database)
    try:
        await store.create_task(id="t1", model="p/m", workspace="/w", knowledge=[])
        values = {"task_id": "t1", "turn_id": "turn1", "kind": "file", "size": 3, "sha256": "0" * 64, "note": "n"}
        rows = await asyncio.gather(*(store.add_delivery(dict(values, path="a.txt", stored=f"{i}/a.txt"))
                                      for i in range(4)))
        assert sorted(r["version"] for r in rows) == [1, 2, 3, 4]
        other = await store.add_delivery(dict(values, path="b.txt", stored="x/b.txt"))
        assert other["version"] == 1 and await store.delivery_count("t1") == 5
        listed = await store.deliveries("t1")
        assert listed[0]["id"] == other["id"] and {r["stored"] for r in listed} == {r["stored"] for r in rows} | {
            "x/b.txt"}
        await store.delete_task("t1")
        assert await store.delivery_count("t1") == 0
    finally:
        await store.aclose()


async def test_background_commands_and_wake_ups_answer_alike_on_postgresql(postgres_url):
    """The rows behind background commands and wake-ups (store/background.py): one wake-up per task, replaced by
    the next, dropped only while it is the one named; a command's end recorded; both gone with their task."""
    store = await Store.open_url(postgres_url)
    try:
        await store.create_task(id="tb", model="p/m", workspace="/w", knowledge=[])
        await store.add_background({"id": "c1", "task_id": "tb", "command": "make", "status": "running",
                                    "started_at": 1.0, "pgid": 42, "proc_start": "boot:7", "log_path": "/l",
                                    "sandboxed": True})
        assert [r["id"] for r in await store.running_background()] == ["c1"]
        await store.end_background("c1", "exited", 3, 2.0)
        (row,) = await store.background_commands("tb")
        assert (row["status"], row["exit_code"], row["sandboxed"]) == ("exited", 3, True)
        assert await store.running_background() == []
        for wake_id in ("w1", "w2"):
            await store.set_wakeup({"id": wake_id, "task_id": "tb", "turn_id": None, "note": "n", "due_at": 5.0,
                                    "command_id": None, "created_at": 1.0})
        assert [w["id"] for w in await store.wakeups()] == ["w2"]
        assert not await store.delete_wakeup("tb", "w1") and await store.delete_wakeup("tb", "w2")
        await store.set_wakeup({"id": "w3", "task_id": "tb", "turn_id": None, "note": "n", "due_at": None,
                                "command_id": "c1", "created_at": 1.0})
        await store.delete_task("tb")
        assert await store.wakeups() == [] and await store.background_commands("tb") == []
    finally:
        await store.aclose()
