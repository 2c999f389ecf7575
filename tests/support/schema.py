"""The exact-schema check shared by the schema test and the migration kill harness."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from runtime.store import changes, team_models  # noqa: F401  (their tables join Base.metadata)
from runtime.store.models import Base, is_fts_table


def schema_diff(conn) -> list:
    """Differences between a migrated database (a sync connection) and the models. The FTS5 tables and their
    shadow tables are not in the metadata; test_store_schema.test_fts_tables checks them."""

    def include_name(name, type_, _parent):
        return not (type_ == "table" and is_fts_table(name))

    return compare_metadata(MigrationContext.configure(conn, opts={"include_name": include_name}), Base.metadata)
