"""Server-sent events from an httpx2 response: the `data` of each event, as a chat-completions stream sends them.

Decoded as the SSE spec says and as httpx-sse (which the provider used before, and which imports the legacy httpx
with its command line, ~0.1 s of a `hearth run`) decodes them: lines end at \\r\\n, \\r or \\n only (a JSON string
may hold a raw U+2028, which `splitlines` would cut), an event is the fields before a blank line, its `data`
lines are joined with \\n, comments and unknown fields are skipped, an event the body ends in the middle of is
dropped, and a response that is not `text/event-stream` is refused before anything is read.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any


class NotEventStream(Exception):
    """The response is no event stream (an HTML page, a JSON error): the base URL is probably wrong."""


async def event_data(response: Any) -> AsyncIterator[str]:
    """The data of each event of `response` (an httpx2 streaming response)."""
    content_type = response.headers.get("content-type", "").partition(";")[0]
    if "text/event-stream" not in content_type:
        raise NotEventStream(f"Expected response header Content-Type to contain 'text/event-stream', got "
                             f"{content_type!r}")
    event, retry, last_id = "", False, ""  # this event's fields; the last id is kept across events (the spec)
    data: list[str] = []
    async for line in _lines(response):
        if not line:
            if event or data or last_id or retry:
                yield "\n".join(data)
            event, data, retry = "", [], False
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            data.append(value)
        elif name == "event":
            event = value
        elif name == "id" and "\0" not in value:
            last_id = value
        elif name == "retry":
            retry = retry or _is_int(value)


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


async def _lines(response: Any) -> AsyncIterator[str]:
    """The body's lines, split at \\r\\n, \\r and \\n only, whatever way the text arrives in pieces."""
    rest = ""
    async for text in response.aiter_text():
        text = rest + text
        if text.endswith("\r"):  # maybe the first half of \r\n: decided with the next piece
            rest, text = "\r", text[:-1]
        else:
            rest = ""
        lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        rest = lines.pop() + rest  # the unfinished last line (or "" after a line end)
        for line in lines:
            yield line
    if rest:
        yield rest.rstrip("\r")
