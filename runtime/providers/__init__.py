"""Building providers from settings. Engines are imported only when a provider of their kind is used."""

from __future__ import annotations

from ..config import ProviderConfig
from ..errors import ConfigError
from ..keys import SecretStore
from ..local_models.library import ModelLibrary
from .base import Provider


def build_provider(cfg: ProviderConfig, keys: SecretStore, library: ModelLibrary | None = None) -> Provider:
    """The provider a settings entry describes. `library`: the data folder's installed models, served by a
    `llama_cpp` provider without a `model_path` beside the bundled model."""
    if cfg.kind == "openai":
        if not cfg.base_url:
            raise ConfigError(f"Provider {cfg.id!r} needs a base_url (for example http://127.0.0.1:11434/v1).")
        from .openai_compat import OpenAICompatProvider

        provider = OpenAICompatProvider(
            cfg.id,
            cfg.base_url,
            keys.resolve(cfg.api_key_ref),
            temperature=cfg.temperature,
            max_tokens=cfg.max_tokens,
            seed=cfg.seed,
            context_window=cfg.context_window,
        )
        provider.empty_tool_call_content = cfg.empty_tool_call_content  # applied by the agent loop
        return provider
    if cfg.kind == "llama_cpp":
        from .llama.provider import LlamaCppProvider

        return LlamaCppProvider(
            cfg.id,
            cfg.model_path,
            library=library,
            n_ctx=cfg.n_ctx,
            chat_format=cfg.chat_format,
            temperature=cfg.temperature,
            max_tokens=cfg.max_tokens,
            seed=cfg.seed,
        )
    if cfg.kind == "scripted":
        from .scripted import ScriptedModel

        return ScriptedModel(id=cfg.id)
    raise ConfigError(f"Provider {cfg.id!r} has an unknown kind {cfg.kind!r}.")
