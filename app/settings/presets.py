"""Provider presets as Settings shows them. The list comes from the runtime (`bridge.providers.presets()`); this
module adds the words a person needs next to each one (what to start, an example model)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runtime.api import Preset

NOTES: dict[str, tuple[str, str]] = {  # preset id -> (what to do, an example model)
    "builtin": ("Small and fast; runs on this computer with no setup.", "smollm2-135m"),
    "ollama": ("Start Ollama, then pull a model: ollama pull llama3.2", "llama3.2"),
    "lmstudio": ("Turn on the local server in LM Studio's Developer tab.", ""),
    "llamacpp": ("Start it with: llama-server -m model.gguf --port 8080", ""),
    "vllm": ("Start it with: vllm serve MODEL", ""),
    "openai": ("Needs an API key; it is kept in your system keyring, never in settings.json.", "gpt-4o-mini"),
    "openrouter": ("Needs an API key; it is kept in your system keyring, never in settings.json.", ""),
    "custom": ("Any server that speaks the OpenAI chat-completions API.", ""),
}


def provider_entry(preset: Preset, taken: set[str]) -> dict:
    """A settings.json provider entry for a preset, with an id not used yet."""
    pid = unique_id(preset.id, taken)
    entry: dict[str, str | bool] = {"id": pid, "kind": preset.kind}
    if preset.base_url:
        entry["base_url"] = preset.base_url
    if preset.needs_key:
        entry["api_key_ref"] = f"keyring:{pid}"
    if preset.empty_tool_call_content:  # llama.cpp's server refuses `content: null` beside tool calls
        entry["empty_tool_call_content"] = True
    return entry


def unique_id(base: str, taken: set[str]) -> str:
    if base not in taken:
        return base
    n = 2
    while f"{base}{n}" in taken:
        n += 1
    return f"{base}{n}"
