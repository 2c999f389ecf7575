"""The template path on a real GGUF: copies of the bundled SmolLM2 file whose `tokenizer.chat_template` is one of
the three call formats (tests/support/chat_templates.py), run by the real provider as a model of 1 B and more
(its `small` flag cleared: the bundled weights stand in for a bigger model's).

Checked: the format is read from the GGUF's own template, prompts render from it, and full turns through the
runtime where a step's `tool_choice="required"` (set by a test-side subclass on steps that answer the person,
as the llama.cpp-server test does) makes the grammar write the call: a real tool name and arguments that
match the tool's schema, then the result goes back and the turn completes.
"""

from __future__ import annotations

import pytest

from runtime.api import Runtime
from runtime.events import EndReason
from runtime.providers.llama.provider import LlamaCppProvider, bundled_model_path, unload_models
from runtime.providers.llama.template import HERMES, LLAMA3, MISTRAL, chat_of
from runtime.tools.base import Effect, FunctionTool
from tests.support.chat_templates import TEMPLATES, gguf_with_template
from tests.support.helpers import collect

pytestmark = pytest.mark.slow_model


@pytest.fixture(scope="module")
def copies(tmp_path_factory):
    folder = tmp_path_factory.mktemp("templates")
    yield {fmt: gguf_with_template(bundled_model_path(), folder / f"{fmt}.gguf", t) for fmt, t in TEMPLATES.items()}
    unload_models()


class AsBigModel(LlamaCppProvider):
    """The real provider; its model counts as 1 B+ (the bundled weights stand in for a bigger model's)."""

    async def _ensure_model(self, name=None):
        model = await super()._ensure_model(name)
        model.small = False
        return model


class CallsRequired(AsBigModel):
    """Steps that answer the person must call a tool, and only the test's tool is offered (with the runtime's
    dozen built-ins a 135M model picks one at random)."""

    def stream(self, request, **kwargs):
        request.tools = [t for t in request.tools if t["function"]["name"] == "get_weather"] or request.tools
        if request.tools and request.messages[-1]["role"] == "user":
            request.tool_choice = "required"
        return super().stream(request, **kwargs)


def weather_tool(calls: list[dict]) -> FunctionTool:
    async def get_weather(args, ctx):
        calls.append(args)
        return f"Sunny, 21 degrees in {args['city']}."

    return FunctionTool(
        name="get_weather", description="Get the current weather in a city.",
        parameters={"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                    "required": ["city"]},
        effect=Effect.read_only, fn=get_weather,
    )


@pytest.mark.parametrize("fmt", [HERMES, LLAMA3, MISTRAL])
async def test_the_gguf_template_is_used_and_renders_the_tools(copies, fmt):
    provider = AsBigModel("local", str(copies[fmt]))
    await provider.load()
    chat = chat_of(provider._model)
    assert chat is not None and chat.format == fmt
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    prompt = chat.render([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], [tool])
    assert "get_weather" in prompt and "Be brief." in prompt and "Hi" in prompt
    # The GGUF's own BOS/EOS text reaches the template (SmolLM2's are <|im_start|> / <|im_end|>).
    if fmt == LLAMA3:
        assert prompt.startswith("<|im_start|>")


@pytest.mark.parametrize("fmt", [HERMES, LLAMA3, MISTRAL])
async def test_a_full_turn_where_the_grammar_writes_the_call(home, copies, fmt):
    calls: list[dict] = []
    provider = CallsRequired("local", str(copies[fmt]), temperature=0.0, seed=11, max_tokens=64)
    rt = await Runtime.open(home, providers={"local": provider}, tools=[weather_tool(calls)])
    try:
        task = await rt.create_task(model="local/weather")
        handle = await rt.send(task.id, "What's the weather in Paris?")
        events = await collect(rt, task.id)
        assert events[-1].reason == EndReason.completed, events[-1]
        tool_events = [(e.name, e.state) for e in events if e.type == "tool_call"]
        assert tool_events[:3] == [("get_weather", "pending"), ("get_weather", "running"), ("get_weather", "done")]
        assert isinstance(calls[0]["city"], str) and calls[0]["city"]  # the schema's required string
        assert set(calls[0]) <= {"city", "days"} and isinstance(calls[0].get("days", 0), int)
        steps = await rt.core.store.steps(handle.turn_id)
        assert steps[0]["finish_reason"] == "tool_calls" and len(steps) >= 2  # the result went back to the model
        await rt.wait_idle(task.id)
        reply = (await rt.messages(task.id))[-1]
        part = next(p for p in reply.parts if p["type"] == "tool_call")
        assert part["args"] == calls[0] and "Sunny" in part["result"]
    finally:
        await rt.aclose()


@pytest.mark.parametrize("fmt", [HERMES, LLAMA3])
async def test_text_streams_token_by_token_when_the_model_answers_in_words(copies, fmt):
    from runtime.providers.base import FINISH, TEXT, TOOL_CALLS, ModelRequest

    weather = {"name": "get_weather", "description": "Get the current weather in a city.",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
    provider = AsBigModel("local", str(copies[fmt]))
    request = ModelRequest(model="x", messages=[{"role": "user", "content": "What's the weather in Paris?"}],
                           tools=[{"type": "function", "function": weather}], max_tokens=40, temperature=0.0, seed=7)
    items = [i async for i in provider.stream(request)]
    texts = [i[1] for i in items if i[0] == TEXT]
    assert len(texts) > 3 and "".join(texts).strip() and not [i for i in items if i[0] == TOOL_CALLS]
    assert items[-1][0] == FINISH
    await provider.aclose()


@pytest.mark.parametrize("fmt", [HERMES, LLAMA3])
async def test_a_continue_writes_on_from_the_partial_answer_in_the_models_template(copies, fmt):
    from runtime.providers.base import CONTINUE, TEXT, TOOL_CALLS, ModelRequest

    weather = {"name": "get_weather", "description": "Get the current weather in a city.",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
    partial = "1, 2, 3, 4,"
    messages = [{"role": "user", "content": "Count from 1 to 10 separated by commas"},
                {"role": "assistant", "content": partial}, {"role": "user", "content": CONTINUE}]
    provider = AsBigModel("local", str(copies[fmt]))
    request = ModelRequest(model="x", messages=messages, tools=[{"type": "function", "function": weather}],
                           max_tokens=16, temperature=0.0, seed=7)
    items = [i async for i in provider.stream(request)]
    prompt = provider._model.last_prompt
    await provider.aclose()
    header = "<|im_start|>assistant\n" if fmt == HERMES else "<|start_header_id|>assistant<|end_header_id|>\n\n"
    assert prompt.endswith(header + partial) and CONTINUE not in prompt
    text = "".join(i[1] for i in items if i[0] == TEXT)
    assert not [i for i in items if i[0] == TOOL_CALLS]
    assert text.lstrip().startswith("5"), f"the answer started over instead of going on: {text!r}"


async def test_a_long_prompt_is_read_with_progress_on_the_template_path(copies):
    from runtime.providers.base import STATUS, TEXT, ModelRequest

    notes = "".join(f"Note {i}: the meeting moved to room {i % 7}.\n" for i in range(60))
    provider = AsBigModel("local", str(copies[HERMES]))
    weather = {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
    request = ModelRequest(model="x", messages=[{"role": "user", "content": "Summarise these notes.\n" + notes}],
                           tools=[{"type": "function", "function": weather}], max_tokens=4, temperature=0.0, seed=7)
    await provider.load()
    provider._model.llm.reset()
    items = [i async for i in provider.stream(request)]
    await provider.aclose()
    first_text = next(i for i, item in enumerate(items) if item[0] == TEXT)
    statuses = [item[1] for item in items[:first_text] if item[0] == STATUS]
    assert statuses[0] == "Reading your message… 0%" and len(statuses) >= 3


@pytest.mark.parametrize("fmt", [HERMES, LLAMA3, MISTRAL])
async def test_a_named_tool_choice_is_written_by_the_grammar_as_that_call(copies, fmt):
    from runtime.providers.base import FINISH, TEXT, TOOL_CALLS, ModelRequest, named_choice

    weather = {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
    plan = {"name": "submit_plan", "parameters": {"type": "object", "properties": {
        "steps": {"type": "array", "items": {"type": "string"}}}, "required": ["steps"]}}
    provider = AsBigModel("local", str(copies[fmt]))
    request = ModelRequest(model="x", messages=[{"role": "user", "content": "What's the weather in Paris?"}],
                           tools=[{"type": "function", "function": f} for f in (weather, plan)],
                           tool_choice=named_choice("submit_plan"), max_tokens=96, temperature=0.0, seed=7)
    items = [i async for i in provider.stream(request)]
    await provider.aclose()
    (calls,) = [i[1] for i in items if i[0] == TOOL_CALLS]
    assert [c.name for c in calls] == ["submit_plan"] and not [i for i in items if i[0] == TEXT]
    assert items[-1][0] == FINISH and items[-1][1] in ("tool_calls", "length")
