"""Secrets are cut out of every text that leaves the runtime (runtime/ARCHITECTURE.md, "Secrets").

`redact(text)` replaces every secret value the runtime knows (`remember()`: the provider keys it resolved, the
values of the environment variables the settings point to, MCP servers' credentials) and anything that looks
like a credential whatever its value (`Bearer <token>`, `sk-…` keys, `api_key=…`) with `[redacted]`. It is
applied where a text is stored, published or shown: turn errors (finalize), warnings, background job errors,
model-list errors, the CLI's output, and every log record of the process (`install_log_redaction`). Tool
results get `redact_known()`, which only removes the known values: a file the model reads may legitimately say
`password=...`, and mangling it would break the edits that follow.

The known values are kept per process (a runtime, its CLI and its logs share them); values shorter than
`MIN_SECRET` characters are not remembered, so a setting such as "1" never blanks out ordinary text.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable

REDACTED = "[redacted]"
MIN_SECRET = 8

# A credential by its shape: `Bearer <token>`, an OpenAI-style `sk-...` key, or `api_key=<value>` and friends
# (JSON, headers, query strings). The name part is kept so the text still says what was there.
_SHAPES = re.compile(
    r"(?P<bearer>\bbearer\s+)[A-Za-z0-9._~+/=-]{8,}"
    r"|\bsk-[A-Za-z0-9_-]{16,}"
    r"|(?P<named>\b(?:api[_-]?key|x-api-key|access[_-]?token|auth[_-]?token|secret|password)[\"']?\s*[:=]\s*"
    r"[\"']?)[^\s\"'&,;]{6,}",
    re.IGNORECASE,
)

_lock = threading.Lock()
_known: set[str] = set()
_known_pattern: re.Pattern[str] | None = None


def remember(values: Iterable[str | None]) -> None:
    """Add secret values that must never appear in what the runtime stores, publishes, shows or logs."""
    global _known_pattern
    new = {v for v in values if v and len(v) >= MIN_SECRET} - _known
    if not new:
        return
    with _lock:
        _known.update(new)
        # Longest first, so a key that contains another is cut out whole.
        alternatives = sorted(_known, key=len, reverse=True)
        _known_pattern = re.compile("|".join(re.escape(v) for v in alternatives))


def redact_known(text: str) -> str:
    """`text` without the secret values remembered so far."""
    pattern = _known_pattern
    return pattern.sub(REDACTED, text) if pattern is not None and text else text


def _shape(match: re.Match[str]) -> str:
    return (match.group("bearer") or match.group("named") or "") + REDACTED


def redact(text: str) -> str:
    """`text` without the remembered secret values and without anything shaped like a credential."""
    if not text:
        return text
    return _SHAPES.sub(_shape, redact_known(text))


# -- logs --

_installed = False


def install_log_redaction() -> None:
    """Redact every log record of this process, message and traceback, before any handler sees it: the
    runtime's, and those of whatever hosts it (the app's `hearth.log`, the CLI) and of libraries (an HTTP
    client's URL, asyncio's "exception was never retrieved"), since the known secrets are the process's. A
    `logging.Filter` would not do: a logger's filters only apply to records logged on that logger itself, not to
    those its children propagate. A record without a secret is left as it is (its `args` too: some formatters
    read them). Idempotent."""
    global _installed
    with _lock:
        if _installed:
            return
        _installed = True
    make_record = logging.getLogRecordFactory()
    formatter = logging.Formatter()

    def redacting_factory(*args: object, **kwargs: object) -> logging.LogRecord:
        record = make_record(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # a broken format string: logging reports it when the record is emitted
            message = None
        if message is not None and (clean := redact(message)) != message:
            record.msg, record.args = clean, None
        if record.exc_info and record.exc_info[1] is not None:
            trace = formatter.formatException(record.exc_info)
            if (clean := redact(trace)) != trace:
                record.exc_text = clean
        return record

    logging.setLogRecordFactory(redacting_factory)
