"""The knowledge library: scoped search with locations, per-file statuses for bad inputs, resuming after a
restart, re-indexing a changed file, hybrid search against a loopback embeddings server, the CLI."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import time

import docx
import pytest
from pypdf import PdfWriter

from runtime.api import ConfigError, Runtime
from runtime.cli.main import main as cli_main
from runtime.knowledge.library import Knowledge
from runtime.store.knowledge_repo import KnowledgeRepo
from runtime.store.repo import DB_NAME, Store
from tests.runtime.test_cli import _cli, _result
from tests.support.helpers import collect, open_runtime, write_settings
from tests.support.openai_server import OpenAIServer, Reply, trigram_vector
from tests.support.pdf import write_pdf

LIGHTHOUSE = "The lighthouse keeper climbs the tower at dusk and lights the great lamp."


async def indexed(rt: Runtime, timeout: float = 30.0) -> dict[str, dict]:
    """Wait until nothing is queued or indexing; the documents by file name."""
    deadline = time.monotonic() + timeout
    while (status := await rt.knowledge.status())["busy"]:
        assert time.monotonic() < deadline, status
        await asyncio.sleep(0.02)
    return {d["path"].rsplit("/", 1)[-1]: d for d in status["documents"]}


@pytest.fixture
def docs(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    notes = folder / "notes.md"
    notes.write_text("# Harbour\n\nBoats come in at noon.\n\n## Lighthouse\n\n" + LIGHTHOUSE + "\n")
    log = folder / "log.txt"
    log.write_text("\n".join(f"day {i}: quiet sea" for i in range(1, 40)) + "\nday 40: the lighthouse lamp failed\n")
    report = write_pdf(folder / "report.pdf", ["Budget for the year.", "The lighthouse needs a new lamp."])
    return {"notes": notes, "log": log, "report": report}


async def test_a_task_sees_only_its_documents_with_their_places(home, docs):
    async with OpenAIServer() as server:
        write_settings(home, server.base_url)
        rt = await Runtime.open(home)
        try:
            await rt.knowledge.add([docs["report"]])  # in the library, not bound to the task
            task = await rt.create_task(knowledge=[str(docs["notes"]), str(docs["log"])])
            assert task.knowledge == [str(docs["notes"].resolve()), str(docs["log"].resolve())]
            await indexed(rt)
            server.script(Reply(tool_calls=[("c1", "search_knowledge", {"query": "lighthouse lamp"})],
                                finish="tool_calls"), Reply(chunks=["The keeper lights the lamp [1]."]))
            await rt.send(task.id, "What happens at the lighthouse?")
            await collect(rt, task.id)
            await rt.wait_idle(task.id)
            first, second = server.chat_requests[-2:]
            assert "search_knowledge" in {t["function"]["name"] for t in first["tools"]}
            assert "cite the passages you use" in first["messages"][0]["content"]
            result = second["messages"][-1]
            assert result["role"] == "tool" and result["tool_call_id"] == "c1"
            shown = result["content"]
            assert f'source="{docs["notes"].resolve()}"' in shown and "“Lighthouse”" in shown and LIGHTHOUSE in shown
            assert f'source="{docs["log"].resolve()}"' in shown and 'lines="' in shown
            assert "report.pdf" not in shown and "Cite the passages you use as [n]" in shown
            hits = await rt.knowledge.search(task.id, "lighthouse lamp")
            assert {h["name"] for h in hits} == {"notes.md", "log.txt"}
            log_hit = next(h for h in hits if h["name"] == "log.txt")
            assert log_hit["line_start"] <= 40 <= log_hit["line_end"] and log_hit["where"].startswith("line")
            other = await rt.create_task(knowledge=[str(docs["report"])])
            [pdf_hit] = await rt.knowledge.search(other.id, "lighthouse lamp")
            assert (pdf_hit["name"], pdf_hit["page"], pdf_hit["where"]) == ("report.pdf", 2, "page 2")
            assert await rt.knowledge.search((await rt.create_task()).id, "lighthouse") == []
        finally:
            await rt.aclose()


def bad_inputs(bad) -> None:
    """A binary file, a damaged, a locked and a 1,000-page PDF, a 2.5 MB log, a file to delete, a Word file."""
    bad.mkdir()
    (bad / "photo.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 8)
    (bad / "broken.pdf").write_bytes(b"%PDF-1.4\nthis is not really a pdf\n")
    plain = write_pdf(bad.parent / "plain.pdf", ["locked content"])
    writer = PdfWriter(clone_from=str(plain))
    writer.encrypt(user_password="secret", algorithm="RC4-128")
    writer.write(bad / "locked.pdf")
    write_pdf(bad / "thick.pdf", [f"page {i} of the long manual about pumps" for i in range(1, 1001)])
    (bad / "big.log").write_text("".join(f"{i:08d} event happened in the pump room\n" for i in range(60_000)))
    (bad / "gone.txt").write_text("soon deleted\n")
    word = docx.Document()
    word.add_heading("Pumps", level=1)
    word.add_paragraph("The pump must be primed before use.")
    word.save(bad / "manual.docx")


HARBOUR_PAGE = """<!doctype html>
<html><head><title>Harbour guide</title>
<style>.beacon { color: red }</style>
<script>var beacon = "flashing script";</script>
</head><body>
<h1>Harbour</h1>
<p>Boats come in at noon &amp; leave at dawn.</p>
<h2>Lighthouse</h2>
<p>The lighthouse keeper climbs the tower at dusk and lights the great lamp.</p>
<ul><li>Spare lamps are kept in the shed.</li></ul>
</body></html>
"""


async def test_an_html_page_is_indexed_by_heading_and_line(home, tmp_path):
    page = tmp_path / "guide.html"
    page.write_text(HARBOUR_PAGE)
    rt = await open_runtime(home)
    try:
        task = await rt.create_task(knowledge=[str(page)])
        assert (await indexed(rt))["guide.html"]["status"] == "ready"
        [hit] = await rt.knowledge.search(task.id, "lighthouse lamp")
        assert (hit["kind"], hit["heading"], hit["line_start"], hit["line_end"]) == ("html", "Lighthouse", 9, 10)
        assert hit["where"] == "lines 9–10, “Lighthouse”"
        assert hit["text"] == LIGHTHOUSE + "\n\nSpare lamps are kept in the shed."
        [harbour] = await rt.knowledge.search(task.id, "boats")
        assert (harbour["heading"], harbour["line_start"]) == ("Harbour", 7)
        assert harbour["text"] == "Boats come in at noon & leave at dawn."  # entities decoded
        assert await rt.knowledge.search(task.id, "beacon flashing") == []  # style and script are not text
    finally:
        await rt.aclose()


async def test_bad_inputs_each_get_a_clear_status(home, tmp_path):
    bad = tmp_path / "bad"
    await asyncio.to_thread(bad_inputs, bad)
    rt = await open_runtime(home)
    rt.kit.knowledge.max_chars = 1_000_000  # big.log is 2.5 MB: it is cut, and says so
    try:
        await rt.knowledge.add([bad])
        found = await indexed(rt, timeout=60)
        assert found["photo.txt"]["status"] == "error" and "binary" in found["photo.txt"]["detail"]
        assert found["broken.pdf"]["status"] == "error" and "could not be read as a PDF" in found["broken.pdf"][
            "detail"]
        assert found["locked.pdf"]["status"] == "error" and "password" in found["locked.pdf"]["detail"]
        thick = found["thick.pdf"]
        assert (thick["status"], thick["progress"], thick["passages"]) == ("ready", 1.0, 1000)
        assert found["big.log"]["status"] == "ready" and "million characters" in found["big.log"]["detail"]
        assert found["manual.docx"]["status"] == "ready"
        task = await rt.create_task(knowledge=[str(bad)])
        [hit] = await rt.knowledge.search(task.id, "primed")
        assert (hit["heading"], hit["where"]) == ("Pumps", "paragraph 2, “Pumps”")
        [page] = await rt.knowledge.search(task.id, "page 777", limit=1)
        assert page["page"] == 777
        (bad / "gone.txt").unlink()
        assert not [h for h in await rt.knowledge.search(task.id, "deleted") if h["name"] == "gone.txt"]
        gone = (await indexed(rt))["gone.txt"]
        assert gone["status"] == "missing" and "deleted" in gone["detail"]
        added = await rt.knowledge.add([tmp_path / "nowhere.txt"])
        assert added.documents == [] and added.not_added == [f"{tmp_path / 'nowhere.txt'} was not found."]
        with pytest.raises(ConfigError, match=r"nowhere\.txt was not found"):  # a task is never half-bound
            await rt.create_task(knowledge=[str(bad / "manual.docx"), str(tmp_path / "nowhere.txt")])
    finally:
        await rt.aclose()


async def test_indexing_cut_off_by_a_crash_resumes_at_the_next_open(home, docs):
    rt = await open_runtime(home)
    await rt.knowledge.add([docs["notes"]])
    await indexed(rt)
    await rt.aclose()
    store = await Store.open(home)  # what a crash mid-index leaves: the document `indexing`, half its passages
    repo = KnowledgeRepo(store.engine)
    [doc] = await repo.documents()
    await repo.clear_passages(doc["id"])
    await repo.update_document(doc["id"], status="indexing", progress=0.5, passages=0)
    await store.aclose()
    rt = await open_runtime(home)
    try:
        done = (await indexed(rt))["notes.md"]
        assert (done["status"], done["progress"]) == ("ready", 1.0) and done["passages"] >= 2
        assert "resource.index" in {j["kind"] for j in await rt.jobs.log()}
    finally:
        await rt.aclose()


async def test_a_document_removed_while_it_is_added_is_not_reported(home, docs):
    """`add` reads its documents back after queueing them; one removed in between (the library's Remove while a
    folder is added) is gone. It was reported as None, which the callers then read as a document."""
    store = await Store.open(home)

    def submit(kind: str, job) -> None:  # the indexing job starts here: the removal lands at this moment
        job.close()
        db = sqlite3.connect(home / DB_NAME)
        with db:
            db.execute("DELETE FROM documents WHERE path = ?", (os.path.realpath(docs["notes"]),))
        db.close()

    try:
        added = await Knowledge(KnowledgeRepo(store.engine), submit, lambda: None).add([docs["notes"], docs["log"]])
        assert [d["path"] for d in added.documents] == [os.path.realpath(docs["log"])]
    finally:
        await store.aclose()


async def test_a_changed_file_is_indexed_again(home, docs):
    rt = await open_runtime(home)
    try:
        task = await rt.create_task(knowledge=[str(docs["log"])])
        await indexed(rt)
        assert await rt.knowledge.search(task.id, "albatross") == []
        docs["log"].write_text("day 1: an albatross landed on the pier\n")
        await rt.knowledge.search(task.id, "albatross")  # notices the change and starts indexing it again
        await indexed(rt)
        [hit] = await rt.knowledge.search(task.id, "albatross")
        assert "albatross" in hit["text"] and hit["line_start"] == 1
        before = (await indexed(rt))["log.txt"]
        os.utime(docs["log"], (time.time() + 60, time.time() + 60))  # touched, same content
        await rt.knowledge.search(task.id, "albatross")
        after = (await indexed(rt))["log.txt"]
        assert after["mtime"] != before["mtime"] and after["indexed_at"] == before["indexed_at"]
    finally:
        await rt.aclose()


async def test_hybrid_search_with_a_loopback_embeddings_server(home, docs):
    async with OpenAIServer(embed=trigram_vector) as server:
        write_settings(home, server.base_url, embeddings={"provider": "local", "model": "embed-model"})
        rt = await Runtime.open(home)
        try:
            task = await rt.create_task(knowledge=[str(docs["notes"])])
            notes = (await indexed(rt))["notes.md"]
            assert notes["embed_model"] == "local/embed-model" and notes["status"] == "ready"
            embeds = [r for r in server.log if r.path == "/v1/embeddings"]
            assert embeds and embeds[0].body["model"] == "embed-model"
            # A misspelling no word index matches; the vectors of its letters still find the passage.
            [hit] = await rt.knowledge.search(task.id, "lighthose keepr", limit=1)
            assert LIGHTHOUSE in hit["text"]
            server.script(Reply(status=500))  # the embeddings server fails: the words still work
            docs["log"].write_text("the lighthouse keeper's log\n")
            await rt.knowledge.add([docs["log"]])
            log = (await indexed(rt))["log.txt"]
            assert log["status"] == "ready" and log["embed_model"] is None and "words only" in log["detail"]
        finally:
            await rt.aclose()


def test_cli_knowledge_and_memory(home, docs, capsys):
    assert cli_main(["--home", str(home), "knowledge", "add", str(docs["notes"])]) == 0
    out = capsys.readouterr().out
    assert "Added 1 document(s)." in out and "ready" in out and "notes.md" in out
    assert cli_main(["--home", str(home), "knowledge", "list"]) == 0
    assert "notes.md" in capsys.readouterr().out
    assert cli_main(["--home", str(home), "knowledge", "add", str(home / "missing.txt")]) == 2
    assert "missing.txt was not found" in capsys.readouterr().err
    empty = docs["notes"].parent / "empty"
    empty.mkdir()
    # One path missing, one folder with nothing to read: the file beside them is still added and indexed.
    assert cli_main(["--home", str(home), "knowledge", "add", str(docs["log"]), str(home / "missing.md"),
                     str(empty)]) == 2
    said = capsys.readouterr()
    assert "Added 1 document(s)." in said.out and "ready" in said.out and "log.txt" in said.out
    assert said.err.splitlines() == [f"Not added: {home / 'missing.md'} was not found.",
                                     f"Not added: {empty} holds no documents Hearth can read (text, Markdown, "
                                     "HTML, PDF, Word)."]
    (home / "memory").mkdir(exist_ok=True)
    (home / "memory" / "tea.md").write_text("# Prefers tea\nGreen tea.\n")
    assert cli_main(["--home", str(home), "memory", "list"]) == 0
    assert "tea.md" in capsys.readouterr().out
    assert cli_main(["--home", str(home), "memory", "show", "tea.md"]) == 0
    assert capsys.readouterr().out == "# Prefers tea\nGreen tea.\n"
    assert cli_main(["--home", str(home), "memory", "show", "../settings.json"]) == 2
    assert "outside the memory folder" in capsys.readouterr().err
    assert cli_main(["--home", str(home), "memory", "forget", "tea.md"]) == 0
    assert not (home / "memory" / "tea.md").exists()
    assert cli_main(["--home", str(home), "memory", "off"]) == 0
    assert json.loads((home / "settings.json").read_text())["memory"] is False
    assert cli_main(["--home", str(home), "memory", "on"]) == 0
    assert "memory" not in json.loads((home / "settings.json").read_text())


async def test_choosing_an_embeddings_model_tries_it_and_gives_the_library_vectors(home, docs):
    async with OpenAIServer(embed=trigram_vector) as server:
        write_settings(home, server.base_url)
        code, out, _ = await _result(await _cli("knowledge", "add", str(docs["notes"]), home=home))
        assert code == 0 and "ready" in out
        code, out, _ = await _result(await _cli("knowledge", "embeddings", home=home))
        assert code == 0 and out.strip() == "Search by words only (no embeddings model)."
        code, _, err = await _result(await _cli("knowledge", "embeddings", "builtin", home=home))
        assert code == 2 and "must look like 'provider_id/model_name'" in err
        rt = await Runtime.open(home)
        try:
            assert await rt.knowledge.set_embeddings_model("local/embed-model") == 1
            assert rt.knowledge.embeddings_model == "local/embed-model"
            assert [r.body["model"] for r in server.log if r.path == "/v1/embeddings"][0] == "embed-model"
            for _ in range(200):  # the library gets its vectors in the background
                notes = (await indexed(rt))["notes.md"]
                if notes["embed_model"] == "local/embed-model":
                    break
                await asyncio.sleep(0.05)
            assert notes["embed_model"] == "local/embed-model" and notes["status"] == "ready"
        finally:
            await rt.aclose()
        assert json.loads((home / "settings.json").read_text())["embeddings"] == {"provider": "local",
                                                                                 "model": "embed-model"}
        code, out, _ = await _result(await _cli("knowledge", "embeddings", "off", home=home))
        assert code == 0 and out.strip() == "Search by words only from now on."
        assert json.loads((home / "settings.json").read_text()).get("embeddings") is None
