"""Refusing a value longer than its column, with a sentence.

SQLite keeps any length in a VARCHAR(n); PostgreSQL refuses the whole statement ("value too long for type
character varying(n)"). Values a person or an HTTP client chooses — a model name, a client message id, a user
name — are checked here before they are written, on both, so the same input gets the same answer everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Table

from ..errors import ConfigError

_WHAT = {"model": "A model name", "client_msg_id": "A client message id", "name": "A user name",
         "approval": "An approval mode"}


def refuse_too_long(table: Table, values: Mapping[str, Any]) -> None:
    """ConfigError naming the first of `values` that does not fit its column of `table`."""
    for key, value in values.items():
        column = table.c.get(key)
        limit = getattr(column.type, "length", None) if column is not None else None
        if limit and isinstance(value, str) and len(value) > limit:
            what = _WHAT.get(key, f"The {key.replace('_', ' ')}")
            raise ConfigError(f"{what} may be at most {limit} characters long; this one has {len(value)}.")
