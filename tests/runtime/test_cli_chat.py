"""`hearth chat` as a person runs it: a real child process and a real server; the chat is not a task."""

from __future__ import annotations

from tests.runtime.test_cli import _cli, _result
from tests.support.helpers import write_settings
from tests.support.openai_server import OpenAIServer, Reply


async def test_chat_answers_goes_on_by_id_and_lists_without_making_a_task(home):
    async with OpenAIServer() as server:
        write_settings(home, server.base_url)
        server.script(Reply(chunks=["Paris, ", "of course."]))
        code, out, err = await _result(await _cli("chat", "Capital of France?", home=home))
        assert code == 0, err
        assert out.strip() == "Paris, of course."
        chat_id = err.strip().splitlines()[-1].split()[-1]

        server.script(Reply(chunks=["About 2.1 million."]))
        code, out, err = await _result(await _cli("chat", "--id", chat_id, "How many people live there?", home=home))
        assert code == 0 and out.strip() == "About 2.1 million.", err
        # The second request carried the first exchange: the same conversation went on.
        sent = [m["content"] for m in server.chat_requests[-1]["messages"]]
        assert "Capital of France?" in sent and "Paris, of course." in sent
        offered = {t["function"]["name"] for t in server.chat_requests[-1].get("tools") or []}
        assert offered <= {"memory", "search_knowledge"}  # never files, the shell or MCP

        code, out, _ = await _result(await _cli("chat", "--list", home=home))
        assert code == 0 and chat_id in out
        code, out, _ = await _result(await _cli("chat", "--show", chat_id, home=home))
        assert "How many people live there?" in out and "About 2.1 million." in out
        code, out, _ = await _result(await _cli("tasks", home=home))
        assert code == 0 and chat_id not in out


async def test_a_memory_write_waits_and_chat_approve_goes_on(home):
    """Not in a terminal, a chat whose model wants to save a memory exits 4 saying how to answer; `--approve`
    saves it and the answer goes on, `--deny` keeps the memories as they are."""
    note = {"command": "create", "path": "drinks.md", "content": "Prefers tea to coffee.\nSaid in a chat."}
    async with OpenAIServer() as server:
        write_settings(home, server.base_url)
        server.script(Reply(chunks=[], tool_calls=[("m1", "memory", note)], finish="tool_calls"))
        code, _, err = await _result(await _cli("chat", "Remember: tea beats coffee.", home=home))
        chat_id = next(line.split()[1] for line in err.splitlines() if line.startswith("chat "))
        assert code == 4 and f"hearth chat --id {chat_id} --approve or --deny" in err, err
        assert not (home / "memory" / "drinks.md").exists()

        server.script(Reply(chunks=["Saved."]))
        code, out, err = await _result(await _cli("chat", "--id", chat_id, "--approve", home=home))
        assert code == 0 and out.strip() == "Saved.", err
        assert (home / "memory" / "drinks.md").read_text().startswith("Prefers tea to coffee.")

        server.script(Reply(chunks=[], tool_calls=[("m2", "memory", {"command": "delete", "path": "drinks.md"})],
                            finish="tool_calls"), Reply(chunks=["Kept it."]))
        code, _, err = await _result(await _cli("chat", "--id", chat_id, "Forget it.", home=home))
        assert code == 4, err
        code, out, err = await _result(await _cli("chat", "--id", chat_id, "--deny", home=home))
        assert code == 0 and out.strip() == "Kept it." and (home / "memory" / "drinks.md").exists(), err
        code, _, err = await _result(await _cli("chat", "--id", chat_id, "--deny", home=home))
        assert code == 2 and "is not waiting" in err and "Traceback" not in err


async def test_chat_errors_are_one_plain_sentence(home):
    async with OpenAIServer() as server:
        write_settings(home, server.base_url)
        code, _, err = await _result(await _cli("chat", "--id", "nope", "hello", home=home))
        assert code != 0 and "Traceback" not in err and "nope" in err
        code, _, err = await _result(await _cli("chat", "   ", home=home))
        assert code == 2 and "Traceback" not in err and "text" in err
