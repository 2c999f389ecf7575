"""Provider presets as Settings shows them. The list comes from the runtime (`Runtime.presets()`); this module
adds the words a person needs next to each one (what to start, an example model), plus a fallback list for a
runtime without presets."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Preset:
    id: str
    label: str
    kind: str
    base_url: str | None = None
    needs_key: bool = False
    local: bool = True


FALLBACK: tuple[Preset, ...] = (
    Preset("builtin", "Bundled model (SmolLM2, offline)", "llama_cpp"),
    Preset("ollama", "Ollama", "openai", "http://127.0.0.1:11434/v1"),
    Preset("lmstudio", "LM Studio", "openai", "http://127.0.0.1:1234/v1"),
    Preset("llamacpp", "llama.cpp server", "openai", "http://127.0.0.1:8080/v1"),
    Preset("vllm", "vLLM", "openai", "http://127.0.0.1:8000/v1"),
    Preset("openai", "OpenAI", "openai", "https://api.openai.com/v1", needs_key=True, local=False),
    Preset("custom", "Custom OpenAI-compatible URL", "openai", "http://127.0.0.1:8000/v1"),
)

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


def provider_entry(preset, taken: set[str]) -> dict:
    """A settings.json provider entry for a preset, with an id not used yet."""
    pid = unique_id(preset.id, taken)
    entry = {"id": pid, "kind": preset.kind}
    if preset.base_url:
        entry["base_url"] = preset.base_url
    if preset.needs_key:
        entry["api_key_ref"] = f"keyring:{pid}"
    return entry


def unique_id(base: str, taken: set[str]) -> str:
    if base not in taken:
        return base
    n = 2
    while f"{base}{n}" in taken:
        n += 1
    return f"{base}{n}"
