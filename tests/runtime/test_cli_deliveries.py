"""`hearth show TASK --deliveries` and `hearth deliveries get` as a person uses them: real child processes on a data
folder whose deliverables real turns made through the OpenAI-compatible test server; plain errors, exit 2."""

from __future__ import annotations

import hashlib

from runtime.api import Runtime
from tests.runtime.test_cli import _cli, _result
from tests.runtime.test_deliveries import calls, turn
from tests.support.helpers import write_settings
from tests.support.openai_server import OpenAIServer, Reply


async def _delivered_twice(home) -> str:
    """A task that delivered report.txt twice ("one", then "two, longer") and nothing else."""
    async with OpenAIServer() as server:
        write_settings(home, server.base_url)
        rt = await Runtime.open(home)
        try:
            task = await rt.create_task(title="Report", approval="full_auto")
            for text in ("one", "two, longer"):
                server.script(calls(("write_file", {"path": "report.txt", "content": text}),
                                    ("deliver", {"path": "report.txt", "note": f"The report: {text}"})),
                              Reply(chunks=["ok"]))
                await turn(rt, task.id, "write it")
        finally:
            await rt.aclose()
    return task.id


async def test_show_lists_every_version_and_get_writes_one_out(home, tmp_path):
    task_id = await _delivered_twice(home)
    code, out, err = await _result(await _cli("show", task_id[:10], "--deliveries", home=home))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "# Report: 2 deliverables"
    assert lines[1].split() == ["DELIVERED", "VERSION", "SIZE", "PATH", "NOTE"]
    assert lines[2].split()[2:] == ["2", "11", "B", "report.txt", "The", "report:", "two,", "longer"]
    assert lines[3].split()[2:] == ["1", "3", "B", "report.txt", "The", "report:", "one"]
    assert "hearth deliveries get" in out

    # The latest, into the current folder under its own name; then that name is taken and left alone.
    work = tmp_path / "work"
    work.mkdir()
    code, out, err = await _result(await _cli("deliveries", "get", task_id[:10], "report.txt", home=home, cwd=work))
    assert code == 0, err
    assert (work / "report.txt").read_text() == "two, longer"
    assert out.strip() == f"Wrote report.txt (version 2, 11 B) to {work / 'report.txt'}."
    code, _, err = await _result(await _cli("deliveries", "get", task_id, "report.txt", home=home, cwd=work))
    assert code == 2 and "already exists; give -o PATH" in err and "Traceback" not in err
    # An older version, to a path of the person's choosing (over a file there).
    target = work / "first.txt"
    target.write_text("something else")
    code, _, err = await _result(await _cli("deliveries", "get", task_id, "report.txt", "--version", "1",
                                            "-o", str(target), home=home))
    assert code == 0, err
    assert target.read_text() == "one"
    assert hashlib.sha256(target.read_bytes()).hexdigest() == hashlib.sha256(b"one").hexdigest()


async def test_get_says_plainly_what_is_wrong(home, tmp_path):
    task_id = await _delivered_twice(home)
    for args, said in (
        (("report.txt", "--version", "3"), "report.txt has versions 1 to 2; there is no version 3."),
        (("notes.txt",), "This task delivered nothing named 'notes.txt'. Its deliverables: report.txt."),
        (("report.txt", "-o", str(tmp_path / "no" / "such" / "x.txt")), "does not exist"),
    ):
        code, out, err = await _result(await _cli("deliveries", "get", task_id, *args, home=home))
        assert code == 2 and out == "" and said in err and "Traceback" not in err, (args, err)
    code, _, err = await _result(await _cli("deliveries", "get", "zzzz", "report.txt", home=home))
    assert code == 2 and "zzzz" in err and "Traceback" not in err
    code, _, err = await _result(await _cli("deliveries", "get", task_id, "report.txt", "--version", "x", home=home))
    assert code == 2 and "invalid int value" in err


async def test_a_task_that_delivered_nothing_says_so(home):
    async with OpenAIServer() as server:
        write_settings(home, server.base_url)
        rt = await Runtime.open(home)
        task = await rt.create_task(title="Quiet")
        await rt.aclose()
    code, out, err = await _result(await _cli("show", task.id, "--deliveries", home=home))
    assert code == 0, err
    assert out.strip() == "Quiet: nothing delivered yet."


async def test_reading_deliverables_works_beside_the_app(home, tmp_path):
    task_id = await _delivered_twice(home)
    rt = await Runtime.open(home)  # the data folder's owner, as the app is
    try:
        code, out, err = await _result(await _cli("show", task_id, "--deliveries", home=home))
        assert code == 0 and "2 deliverables" in out, err
        code, _, err = await _result(await _cli("deliveries", "get", task_id, "report.txt", "-o",
                                                str(tmp_path / "r.txt"), home=home))
        assert code == 0, err
        assert (tmp_path / "r.txt").read_text() == "two, longer"
    finally:
        await rt.aclose()
