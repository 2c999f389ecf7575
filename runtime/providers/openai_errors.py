"""What an OpenAI-compatible server's failures are called in front of the person (openai_compat.py maps the SDK's
and the stream's errors onto these): each names the server and the model and says what to check."""

from __future__ import annotations

import json
from typing import Any

from runtime.errors import ProviderError

SDK_STREAM_ERROR = "An error occurred during streaming"  # the SDK's text for an error event without a message


def model_words(model: str | None) -> str:
    return f'model "{model}"' if model else "the model list"


def server_text(body: Any, fallback: str | None) -> str:
    """The error text in an error body (OpenAI-shaped or not), short; `fallback` when the body has none."""
    msg = None
    if isinstance(body, dict):
        err = body.get("error", body)
        msg = err.get("message") if isinstance(err, dict) else err
        if msg is None and isinstance(body.get("message"), str):
            msg = body["message"]
    elif isinstance(body, str):
        msg = body
    if msg is None:
        msg = fallback
    if not msg:
        return ""
    msg = " ".join(str(msg).split())
    return msg[:300] + ("…" if len(msg) > 300 else "")


def stream_error(url: str, error: Any, model: str) -> ProviderError:
    """For `data: {"error": ...}` inside the stream (the text the SDK's APIError gave)."""
    message = error.get("message") if isinstance(error, dict) else None
    if not message or not isinstance(message, str):
        message = SDK_STREAM_ERROR
    detail = server_text(error, message) or message
    return ProviderError(f"The model server at {url} sent an error in the stream ({model_words(model)}): {detail}")


def malformed(url: str, model: str | None, reason: str) -> ProviderError:
    return ProviderError(f"The model server at {url} sent a malformed stream ({model_words(model)}): {reason}.")


def not_streaming(url: str, model: str | None) -> ProviderError:
    return ProviderError(
        f"The server at {url} did not answer in the streaming chat-completions "
        f'protocol (it sent no chunks for model "{model}"). Check the base URL: '
        "for OpenAI-compatible servers it usually ends in /v1."
    )


def response_error(url: str, status: int, text: str, model: str | None) -> ProviderError:
    """An error response to a request sent without the SDK, said as the SDK's typed error (APIStatusError) was:
    its body is the JSON's `error` (or the whole JSON, or the text) and its message "Error code: N - message"."""
    message, body = f"Error code: {status}", text.strip()
    try:
        body = json.loads(body)
    except (ValueError, RecursionError):
        pass
    else:
        error = body.get("error", body) if isinstance(body, dict) else None
        detail = error.get("message") if isinstance(error, dict) else None
        if isinstance(detail, str) and detail:
            message += f" - {detail}"
    data = body.get("error", body) if isinstance(body, dict) else body
    return status_error(url, status, server_text(data, message), model)


def status_error(url: str, status: int, detail: str, model: str | None) -> ProviderError:
    tail = f" The server said: {detail}" if detail else ""
    if status in (401, 403):
        msg = f"The model server at {url} rejected the API key (HTTP {status}). Check the key in Settings."
        return ProviderError(msg + tail, status_code=status)
    if status == 404:
        if model:
            msg = (
                f'Model "{model}" was not found on the server at {url} (HTTP 404). Check the model name, '
                "or whether the base URL is right (it usually ends in /v1)."
            )
        else:
            msg = f"The server at {url} has no model list (HTTP 404). Check the base URL (it usually ends in /v1)."
        return ProviderError(msg + tail, status_code=status)
    if status == 429:
        return ProviderError(
            f"The model server at {url} is rate limiting requests (HTTP 429). Wait a moment and try again." + tail,
            status_code=status,
            retryable=True,
        )
    if status >= 500:
        return ProviderError(
            f"The model server at {url} had a server error (HTTP {status}).{tail}",
            status_code=status,
            retryable=True,
        )
    return ProviderError(f"The model server at {url} refused the request (HTTP {status}).{tail}", status_code=status)
