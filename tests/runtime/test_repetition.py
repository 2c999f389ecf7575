"""A model that repeats itself is cut off while it streams: the answer ends marked "repeating", the generation (or
the server's stream) stops, and the next input works as usual. Loops from the bundled model's own answers. And the
bundled model is sampled with the repeat penalty its makers use, which keeps it from most loops."""

from __future__ import annotations

import pytest

from runtime.api import Runtime
from runtime.engine.agent.repetition import repeating
from runtime.events import EndReason
from runtime.local_models.library import ModelLibrary, ModelRecord
from runtime.providers.llama.provider import LlamaCppProvider
from runtime.providers.scripted import ScriptedModel
from tests.support.helpers import collect, open_runtime, text_from, write_settings
from tests.support.openai_server import OpenAIServer, Reply

# What SmolLM2-135M wrote for "I'm vegetarian and my name is Sam. Suggest a dinner." without a repeat penalty.
OPENING = ("I'm not sure what to suggest, but I can make a meal for you. I can prepare a vegetarian meal using "
           "ingredients you can find at home. ")
LOOP = "I can make a vegetarian meal with a vegan meal. I can even make a vegetarian meal with a vegan meal. "
POEM = "A moment to cherish, a moment to cherish,\n"


def words(text: str) -> list[str]:
    """Deltas of a few characters, as a model streams them."""
    return [text[i : i + 4] for i in range(0, len(text), 4)]


def streamed(text: str) -> bool:
    """Whether `repeating` says so at some join while `text` streams in 64-delta joins."""
    tail = ""
    deltas = words(text)
    for at in range(0, len(deltas), 64):
        tail += "".join(deltas[at : at + 64])
        if repeating(tail[-4096:]):
            return True
    return False


def test_loops_are_told_from_text_that_goes_on():
    assert streamed(OPENING + LOOP * 6)
    assert streamed("The warmth of tea, a gentle caress,\n" + POEM * 12)
    assert streamed("ha" * 400)
    # Text that differs from line to line, short repeats, and a repeat that stops.
    numbered = "".join(f"{i}. Eat a vegetable with rice and beans tonight.\n" for i in range(1, 60))
    table = "| a | b |\n|---|---|\n" + "".join(f"| {i} | {i * i} |\n" for i in range(80))
    rules = "\n".join(["---"] * 5 + ["Some text after the rules, which goes on and says new things."] * 1)
    prose = " ".join(f"Sentence {i} says something about the {i % 7}th colour of the sky." for i in range(80))
    twice = OPENING + LOOP * 2 + "Then I'd suggest a lentil curry with rice, and a salad of fresh herbs on the side."
    for text in (numbered, table, rules, prose, twice):
        assert not streamed(text), text[:80]


async def test_a_looping_answer_ends_marked_and_the_stream_stops(home):
    model = ScriptedModel([[*words(OPENING), *words(LOOP * 300)]])
    rt = await open_runtime(home, model)
    try:
        task = await rt.create_task(model="scripted/test")
        handle = await rt.send(task.id, "Suggest a vegetarian dinner.")
        events = await collect(rt, task.id)
        ended = events[-1]
        assert ended.type == "turn_ended" and ended.reason == EndReason.completed
        text = text_from(events)
        assert text.startswith(OPENING) and LOOP * 2 in text
        assert len(text) < len(OPENING) + 8 * len(LOOP), "the loop was not cut off soon"  # of 300 copies
        warning = next(e for e in events if e.type == "warning")
        assert (warning.code, warning.message) == ("repeating", "Stopped: the model was repeating itself.")
        await rt.wait_idle(task.id)

        answer = (await rt.messages(task.id))[-1]
        assert answer.text == text  # what streamed, byte for byte
        assert {"type": "marker", "marker": "repeating", "step": 0} in answer.parts
        assert not answer.truncated  # not a length cut: no Continue
        assert [s["finish_reason"] for s in await rt.core.store.steps(handle.turn_id)] == ["repeating"]

        model.add_steps(["A lentil curry."])
        await rt.tasks.retry(task.id)  # the way on: another answer
        again = await collect(rt, task.id)
        assert again[-1].reason == EndReason.completed and text_from(again) == "A lentil curry."
    finally:
        await rt.aclose()


async def test_a_long_answer_that_does_not_repeat_is_not_cut(home):
    prose = " ".join(f"Step {i}: stir the pot for {i % 9 + 1} minutes." for i in range(400))
    rt = await open_runtime(home, ScriptedModel([words(prose)]))
    try:
        task = await rt.create_task(model="scripted/test")
        await rt.send(task.id, "A long recipe, please.")
        events = await collect(rt, task.id)
        assert text_from(events) == prose and not [e for e in events if e.type == "warning"]
    finally:
        await rt.aclose()


@pytest.fixture
async def server():
    async with OpenAIServer() as server:
        yield server


async def test_a_server_model_that_loops_is_cut_off_and_its_stream_closed(home, server):
    """A remote model's loop costs money per token: the connection is closed as soon as the loop shows."""
    write_settings(home, server.base_url)
    server.script(Reply(chunks=words(POEM * 2000), delay=0.0005), Reply(chunks=["A short poem."]))
    rt = await Runtime.open(home)
    try:
        task = await rt.create_task()
        await rt.send(task.id, "Write a short poem about tea.")
        events = await collect(rt, task.id)
        assert events[-1].reason == EndReason.completed
        assert any(e.type == "warning" and e.code == "repeating" for e in events)
        assert len(text_from(events)) < 20 * len(POEM)  # of 2,000 copies
        await server.wait_for_disconnect()  # the client hung up mid-stream
        await rt.wait_idle(task.id)
        await rt.send(task.id, "Another, shorter.")
        assert text_from(await collect(rt, task.id)) == "A short poem."
    finally:
        await rt.aclose()


async def test_the_cli_says_the_model_repeated_itself_and_how_to_get_another_answer(home, server):
    from tests.runtime.test_cli import _cli, _result

    write_settings(home, server.base_url)
    server.script(Reply(chunks=words(OPENING + LOOP * 200)), Reply(chunks=["A lentil curry."]))
    code, out, err = await _result(await _cli("run", "Suggest a vegetarian dinner.", home=home))
    assert code == 0, err
    task_id = err.strip().splitlines()[-1].split()[-1]
    assert "[warning] Stopped: the model was repeating itself." in err
    assert f"Ask for another answer: hearth run --task {task_id} --retry" in err
    assert "Continue" not in err
    code, out, _ = await _result(await _cli("show", task_id, home=home))
    assert "stopped: the model was repeating itself" in out
    code, out, err = await _result(await _cli("run", "--task", task_id, "--retry", home=home))
    assert code == 0 and out.strip() == "A lentil curry.", err
    code, _, err = await _result(await _cli("run", "--retry", home=home))
    assert code == 2 and "--retry answers a task's last input again" in err


def test_the_bundled_model_is_sampled_as_its_makers_recommend(home):
    bundled = LlamaCppProvider("builtin", library=ModelLibrary(home))
    assert bundled.sampling_for("smollm2-135m") == {"temperature": 0.2, "top_p": 0.9, "repeat_penalty": 1.1}
    # A temperature set in settings.json wins; the model's other recommendations stay.
    assert LlamaCppProvider("builtin", temperature=0.0).sampling_for(None) == {
        "temperature": 0.0, "top_p": 0.9, "repeat_penalty": 1.1}
    library = ModelLibrary(home)  # a catalog model that records no sampling: llama-cpp-python's defaults
    library.add(ModelRecord(name="qwen2.5-3b-instruct", source="hub", path="models/q.gguf", size=1,
                            catalog_id="qwen2.5-3b-instruct"))
    assert LlamaCppProvider("builtin", library=library).sampling_for("qwen2.5-3b-instruct") == {
        "temperature": 0.2, "top_p": 0.95, "repeat_penalty": 1.0}
