"""Chat templates in the three call formats of the catalog's families, written for these tests (compact, but with
the wire format and the checks of the families' own templates), and copies of the bundled GGUF that carry them.

- HERMES: ChatML with the tool list in `<tools>` in the system message and calls as `<tool_call>` JSON blocks
  (Qwen2.5, Hermes); tool results come back as `<tool_response>` in a user message.
- LLAMA3: Llama 3.1/3.2 headers; the tool list in the first user message; a call is a bare
  `{"name", "parameters"}` object; one call per message; results in `ipython` messages.
- MISTRAL: `[AVAILABLE_TOOLS]` before the last user message, `[TOOL_CALLS] [...]`, `[TOOL_RESULTS]`; call ids
  must be nine characters and user/assistant roles must alternate (it raises otherwise, as Mistral's does).
"""

from __future__ import annotations

from pathlib import Path

HERMES = """{%- if messages[0].role == 'system' %}{%- set system = messages[0].content %}{%- else %}\
{%- set system = 'You are a helpful assistant.' %}{%- endif %}
{{- '<|im_start|>system\\n' + system }}
{%- if tools %}
{{- '\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with \
function signatures within <tools></tools> XML tags:\\n<tools>' }}
{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}
{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within \
<tool_call></tool_call> XML tags:\\n<tool_call>\\n{"name": <function-name>, "arguments": <args-json-object>}\\n\
</tool_call>' }}
{%- endif %}
{{- '<|im_end|>\\n' }}
{%- for message in messages %}
{%- if message.role == 'user' or (message.role == 'assistant' and not message.tool_calls) %}
{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
{%- elif message.role == 'assistant' %}
{{- '<|im_start|>assistant' }}{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}
{%- for call in message.tool_calls %}
{{- '\\n<tool_call>\\n{"name": "' + call.function.name + '", "arguments": ' + (call.function.arguments | tojson) \
+ '}\\n</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>\\n' }}
{%- elif message.role == 'tool' %}
{{- '<|im_start|>user\\n<tool_response>\\n' + message.content + '\\n</tool_response><|im_end|>\\n' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
"""

LLAMA3 = """{{- bos_token }}
{%- if messages[0].role == 'system' %}{%- set system = messages[0].content | trim %}\
{%- set messages = messages[1:] %}{%- else %}{%- set system = '' %}{%- endif %}
{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}
{%- if tools %}{{- 'Environment: ipython\\n' }}{%- endif %}
{{- 'Cutting Knowledge Date: December 2023\\n\\n' + system + '<|eot_id|>' }}
{%- if tools %}
{%- if not messages %}{{- raise_exception('The tools go into the first user message, and there is none.') }}\
{%- endif %}
{{- '<|start_header_id|>user<|end_header_id|>\\n\\nGiven the following functions, please respond with a JSON for \
a function call with its proper arguments that best answers the given prompt.\\n\\nRespond in the format \
{"name": function name, "parameters": dictionary of argument name and its value}. Do not use variables.\\n\\n' }}
{%- for tool in tools %}{{- (tool | tojson(indent=4)) + '\\n\\n' }}{%- endfor %}
{{- (messages[0].content | trim) + '<|eot_id|>' }}
{%- set messages = messages[1:] %}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'tool' %}
{{- '<|start_header_id|>ipython<|end_header_id|>\\n\\n' + message.content + '<|eot_id|>' }}
{%- elif message.tool_calls %}
{%- if message.tool_calls | length != 1 %}{{- raise_exception('This model calls one tool at a time.') }}{%- endif %}
{%- set call = message.tool_calls[0].function %}
{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n{"name": "' + call.name + '", "parameters": ' \
+ (call.arguments | tojson) + '}<|eot_id|>' }}
{%- else %}
{{- '<|start_header_id|>' + message.role + '<|end_header_id|>\\n\\n' + (message.content | trim) + '<|eot_id|>' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}
"""

MISTRAL = """{%- if messages[0].role == 'system' %}{%- set system = messages[0].content %}\
{%- set loop_messages = messages[1:] %}{%- else %}{%- set loop_messages = messages %}{%- endif %}
{%- set users = loop_messages | selectattr('role', 'equalto', 'user') | list %}
{%- set ns = namespace(last='') %}
{%- for message in loop_messages %}{%- if message.role in ['user', 'assistant'] and not message.tool_calls %}
{%- if message.role == ns.last %}{{- raise_exception('Roles must alternate user/assistant/user/assistant.') }}\
{%- endif %}{%- set ns.last = message.role %}{%- endif %}{%- endfor %}
{{- bos_token }}
{%- for message in loop_messages %}
{%- if message.role == 'user' %}
{%- if tools and message == users[-1] %}{{- '[AVAILABLE_TOOLS] ' + (tools | tojson) + '[/AVAILABLE_TOOLS]' }}\
{%- endif %}
{%- if message == users[-1] and system is defined %}{{- '[INST] ' + system + '\\n\\n' + message.content + '[/INST]' }}
{%- else %}{{- '[INST] ' + message.content + '[/INST]' }}{%- endif %}
{%- elif message.tool_calls %}
{{- '[TOOL_CALLS] [' }}
{%- for call in message.tool_calls %}
{%- if call.id | length != 9 %}{{- raise_exception('Tool call ids must be 9 alphanumeric characters.') }}{%- endif %}
{{- '{"name": "' + call.function.name + '", "arguments": ' + (call.function.arguments | tojson) + ', "id": "' \
+ call.id + '"}' }}{%- if not loop.last %}{{- ', ' }}{%- endif %}
{%- endfor %}
{{- ']' + eos_token }}
{%- elif message.role == 'tool' %}
{%- if message.tool_call_id | length != 9 %}{{- raise_exception('Tool call ids must be 9 characters.') }}{%- endif %}
{{- '[TOOL_RESULTS] {"content": ' + (message.content | tojson) + ', "call_id": "' + message.tool_call_id \
+ '"}[/TOOL_RESULTS]' }}
{%- elif message.role == 'assistant' %}{{- ' ' + message.content + eos_token }}
{%- endif %}
{%- endfor %}
"""

TEMPLATES = {"hermes": HERMES, "llama3_json": LLAMA3, "mistral": MISTRAL}


def gguf_with_template(source: Path, target: Path, template: str) -> Path:
    """A copy of a GGUF file whose `tokenizer.chat_template` is `template` (weights and vocabulary unchanged)."""
    import gguf
    from gguf.scripts.gguf_new_metadata import MetadataDetails, copy_with_new_metadata

    reader = gguf.GGUFReader(str(source), "r")
    arch = reader.get_field(gguf.Keys.General.ARCHITECTURE).contents()
    writer = gguf.GGUFWriter(str(target), arch=arch, endianess=reader.endianess)
    new = {gguf.Keys.Tokenizer.CHAT_TEMPLATE: MetadataDetails(gguf.GGUFValueType.STRING, template)}
    copy_with_new_metadata(reader, writer, new, [])
    return target
