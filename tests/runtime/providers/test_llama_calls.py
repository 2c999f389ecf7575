"""The pieces of the template path that need no model: format detection, message shaping, the streaming call
detector, the call grammar and call parsing (real models' own formats; see tests/support/chat_templates.py)."""

from __future__ import annotations

import json

import pytest

from runtime.errors import ProviderError
from runtime.providers.llama.calls import CallDetector, call_grammar, parse_call
from runtime.providers.llama.template import HERMES, LLAMA3, MISTRAL, ChatTemplate, detect_format, template_messages
from tests.support.chat_templates import TEMPLATES

WEATHER = {
    "name": "get_weather",
    "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
READ = {"name": "read_file", "description": "Read a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}
TOOLS = [{"type": "function", "function": WEATHER}, {"type": "function", "function": READ}]
CONVERSATION = [
    {"role": "system", "content": "You are Hearth."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_0123456789abcdef", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
    {"role": "tool", "tool_call_id": "call_0123456789abcdef", "content": "Sunny, 21 C"},
    {"role": "assistant", "content": "It is sunny."},
    {"role": "user", "content": "[2 earlier messages were left out to fit the context.]"},
    {"role": "user", "content": "And tomorrow?"},
]


def feed(fmt: str, pieces: list[str]) -> tuple[list[str], bool]:
    detector = CallDetector(fmt)
    shown = []
    for piece in pieces:
        shown.append(detector.feed(piece))
        if detector.found:
            break
    else:
        shown.append(detector.flush())
    return [s for s in shown if s], detector.found


def test_the_call_format_is_read_from_the_template():
    assert {fmt: detect_format(t) for fmt, t in TEMPLATES.items()} == {f: f for f in TEMPLATES}
    chatml = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    assert detect_format(chatml) is None  # no tool format: the generic protocol stays


@pytest.mark.parametrize("fmt", [HERMES, LLAMA3, MISTRAL])
def test_each_family_renders_tools_calls_and_results(fmt):
    chat = ChatTemplate(TEMPLATES[fmt], bos="<s>", eos="</s>", fmt=fmt)
    prompt = chat.render(CONVERSATION, TOOLS)
    assert prompt.count("get_weather") >= 2 and "read_file" in prompt  # listed, and called in the history
    assert '"city": "Paris"' in prompt and "Sunny, 21 C" in prompt
    assert "[2 earlier messages were left out to fit the context.]\n\nAnd tomorrow?" in prompt  # merged
    if fmt == HERMES:
        assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in prompt
        assert "<tool_response>\nSunny, 21 C\n</tool_response>" in prompt
        assert prompt.endswith("<|im_start|>assistant\n")
    elif fmt == LLAMA3:
        assert prompt.startswith("<s><|start_header_id|>system")
        assert '{"name": "get_weather", "parameters": {"city": "Paris"}}<|eot_id|>' in prompt
        first_user = prompt.index("Given the following functions")
        assert prompt.index('"name": "read_file"') > first_user  # the tool list went into the first user message
    else:
        call = prompt[prompt.index("[TOOL_CALLS] ["):]
        call_id = json.loads(call[len("[TOOL_CALLS] ") : call.index("]</s>") + 1])[0]["id"]
        assert len(call_id) == 9 and f'"call_id": "{call_id}"' in prompt  # the result names the same call
        assert prompt.index("[AVAILABLE_TOOLS]") > prompt.index("It is sunny.")  # before the last user message


def test_a_template_that_refuses_the_conversation_is_a_clear_error():
    chat = ChatTemplate(TEMPLATES[LLAMA3], bos="", eos="", fmt=LLAMA3)
    two_calls = dict(CONVERSATION[2], tool_calls=CONVERSATION[2]["tool_calls"] * 2)
    with pytest.raises(ProviderError, match="refused this conversation: This model calls one tool at a time"):
        chat.render([CONVERSATION[1], two_calls], TOOLS)


def test_messages_are_shaped_for_templates():
    shaped = template_messages(CONVERSATION, MISTRAL)
    assert shaped[2]["content"] == "" and shaped[2]["tool_calls"][0]["function"]["arguments"] == {"city": "Paris"}
    assert shaped[2]["tool_calls"][0]["id"] == shaped[3]["tool_call_id"] and len(shaped[3]["tool_call_id"]) == 9
    assert len(shaped) == len(CONVERSATION) - 1
    assert template_messages(CONVERSATION, HERMES)[2]["tool_calls"][0]["id"] == "call_0123456789abcdef"


def test_hermes_text_streams_until_a_tool_call_block():
    shown, found = feed(HERMES, ["Let me ", "check. <tool", "_call>", '\n{"name"'])
    assert shown == ["Let me ", "check. "] and found  # "<tool" was held back, then recognised
    shown, found = feed(HERMES, ["a <b", "> c <", "tool"])
    assert "".join(shown) == "a <b> c <tool" and not found  # a false start is shown after all


def test_llama3_calls_are_a_bare_json_object_at_the_start():
    assert feed(LLAMA3, ["  ", '{"name": "get_weather"']) == ([], True)
    assert feed(LLAMA3, ["<|python", "_tag|>"]) == ([], True)
    shown, found = feed(LLAMA3, ["Hello", " {not a call}"])
    assert "".join(shown) == "Hello {not a call}" and not found


def test_mistral_calls_start_with_the_tool_calls_token():
    assert feed(MISTRAL, ["[TOOL_CALLS]", " ["]) == ([], True)
    assert feed(MISTRAL, ["[", '{"name"']) == ([], True)
    shown, found = feed(MISTRAL, ["[note] ", "fine"])
    assert "".join(shown) == "[note] fine" and not found


@pytest.mark.parametrize("fmt", [HERMES, LLAMA3, MISTRAL])
def test_the_call_grammar_compiles_for_each_format(fmt):
    from llama_cpp.llama_grammar import LlamaGrammar

    gbnf = call_grammar(fmt, [WEATHER, READ])
    assert '"\\"get_weather\\""' in gbnf and '"\\"read_file\\""' in gbnf  # the names are constants
    assert ("parameters" in gbnf) == (fmt == LLAMA3)
    LlamaGrammar.from_string(gbnf, verbose=False)


def test_calls_are_parsed_per_format():
    assert parse_call(HERMES, '{"name": "get_weather", "arguments": {"city": "Paris"}}') == (
        "get_weather", '{"city": "Paris"}', {"city": "Paris"})
    assert parse_call(LLAMA3, '{"name": "read_file", "parameters": {"path": "a.txt"}}')[2] == {"path": "a.txt"}
    assert parse_call(MISTRAL, '[{"name": "read_file", "arguments": {"path": "b"}}]')[0] == "read_file"
    name, raw, args = parse_call(HERMES, '{"name": "get_weather", "arguments": {"ci')  # cut off by the limit
    assert (name, args) == ("get_weather", None) and raw.endswith('{"ci')
