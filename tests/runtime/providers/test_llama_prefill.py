"""A Continue on a local model writes on from the partial answer: recognising the request (`base.continuation`)
and the prefilled prompt of each llama.cpp path, rendered without a model — the plain chat (the bundled GGUF's own
template, read from its header), the small-model tool prompt (bare ChatML), the function-calling ChatML of a
bigger model without a known call format, and the template path (the three call formats)."""

from __future__ import annotations

import pytest

from runtime.local_models.gguf_info import read_gguf_info
from runtime.providers.base import CONTINUE, continuation
from runtime.providers.llama.calls import CallDetector
from runtime.providers.llama.models import bundled_model_path
from runtime.providers.llama.prefill import prefilled, template_renderer
from runtime.providers.llama.template import HERMES, LLAMA3, MISTRAL, ChatTemplate
from runtime.providers.llama.tool_prompt import render_tool_prompt
from tests.support.chat_templates import TEMPLATES

PARTIAL = "1, 2, 3, 4,"
WEATHER = {"name": "get_weather", "description": "Get the weather.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
TOOLS = [{"type": "function", "function": WEATHER}]
BEFORE = [
    {"role": "system", "content": "You are Hearth."},
    {"role": "user", "content": "Count from 1 to 10 separated by commas"},
]
CONTINUED = [*BEFORE, {"role": "assistant", "content": PARTIAL}, {"role": "user", "content": CONTINUE}]


def test_a_continuation_is_the_instruction_right_after_an_answer_cut_off_in_its_text():
    assert continuation(CONTINUED) == (BEFORE, PARTIAL)
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    not_one = [
        [*BEFORE],  # an ordinary request
        [*BEFORE, {"role": "assistant", "content": PARTIAL}, {"role": "user", "content": "Go on, please."}],
        [*BEFORE, {"role": "assistant", "content": PARTIAL, "tool_calls": [call]},
         {"role": "user", "content": CONTINUE}],  # the answer ended in a call
        [*BEFORE, {"role": "assistant", "content": None}, {"role": "user", "content": CONTINUE}],
        [*BEFORE, {"role": "tool", "tool_call_id": "c1", "content": "x"}, {"role": "user", "content": CONTINUE}],
        [{"role": "user", "content": CONTINUE}],
    ]
    assert [continuation(messages) for messages in not_one] == [None] * len(not_one)


def _opens_the_answer(prompt: str, header: str) -> None:
    """The prompt ends with the assistant's header and the partial text: no instruction, no end of turn."""
    assert prompt.endswith(header + PARTIAL), prompt[-200:]
    assert CONTINUE not in prompt
    assert prompt.count(PARTIAL) == 1


def test_the_plain_chat_prefills_in_the_bundled_models_own_template():
    info = read_gguf_info(str(bundled_model_path()))
    render = template_renderer(info.chat_template, bos="", eos="<|im_end|>")
    prompt = prefilled(render, CONTINUED)
    _opens_the_answer(prompt, "<|im_start|>assistant\n")
    # Up to the partial text it is the prompt a fresh answer to the same request got (its KV cache is reused).
    assert prompt == render(BEFORE) + PARTIAL
    assert prefilled(render, BEFORE) is None  # not a continuation: the chat handler renders it as before


def test_the_small_models_tool_prompt_prefills_right_after_the_header():
    render = lambda messages: render_tool_prompt(messages, [WEATHER], bare=True)  # noqa: E731
    prompt = prefilled(render, CONTINUED)
    _opens_the_answer(prompt, "<|im_start|>assistant\n")
    assert prompt == render(BEFORE) + PARTIAL
    assert "functions.get_weather" in prompt  # the tool list stays: the static prefix is the same


def test_the_function_calling_prompt_prefills_after_message():
    prompt = prefilled(lambda messages: render_tool_prompt(messages, [WEATHER]), CONTINUED)
    _opens_the_answer(prompt, "<|im_start|>assistant\nmessage:\n")


@pytest.mark.parametrize("fmt", [HERMES, LLAMA3, MISTRAL])
def test_the_template_path_prefills_in_each_call_format(fmt):
    chat = ChatTemplate(TEMPLATES[fmt], bos="<s>", eos="</s>", fmt=fmt)
    prompt = prefilled(lambda messages: chat.render(messages, TOOLS), CONTINUED)
    header = {HERMES: "<|im_start|>assistant\n", LLAMA3: "<|start_header_id|>assistant<|end_header_id|>\n\n",
              MISTRAL: "[/INST] "}[fmt]
    _opens_the_answer(prompt, header)
    assert "</s>" not in prompt[prompt.index(PARTIAL):] and "<|eot_id|>" not in prompt[prompt.index(PARTIAL):]


def test_a_format_that_cannot_show_the_text_keeps_the_instruction():
    hides = template_renderer("{% for m in messages %}<{{ m.role }}>{% endfor %}<assistant>", bos="", eos="")
    assert prefilled(hides, CONTINUED) is None
    refuses = template_renderer("{{ raise_exception('no assistant messages here') }}", bos="", eos="")
    assert prefilled(refuses, CONTINUED) is None


def test_text_written_on_from_an_answer_is_never_taken_for_a_call_start():
    for fmt, text in ((LLAMA3, "{5, 6}"), (MISTRAL, "[{5}]")):
        detector = CallDetector(fmt, within=True)
        assert detector.feed(text) == text and not detector.found
    hermes = CallDetector(HERMES, within=True)  # hermes calls may start anywhere, in a continuation too
    assert hermes.feed(" 5, 6.<tool_call>") == " 5, 6." and hermes.found
